// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/model"
	"github.com/xdplimit/xdplimit/pktgen"
)

// TestModelAgreement replays random traces through the Go reference models
// and through the program with the same injected timestamps, and requires
// identical verdicts packet by packet.
func TestModelAgreement(t *testing.T) {
	type algo struct {
		name  string
		limit func(r *rand.Rand) (yaml string, p model.Params, bytes bool)
	}
	algos := []algo{
		{"token_bucket", func(r *rand.Rand) (string, model.Params, bool) {
			rate, burst := 1+r.Uint64N(5000), 1+r.Uint64N(50)
			p, err := model.TokenBucketParams(rate, time.Second, burst, false)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d}", rate, burst), p, false
		}},
		{"token_bucket_bytes", func(r *rand.Rand) (string, model.Params, bool) {
			rate, burst := 1000+r.Uint64N(500000), 1500+r.Uint64N(20000)
			p, err := model.TokenBucketParams(rate, time.Second, burst, true)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: token_bucket, rate: %dB/s, burst: %d}", rate, burst), p, true
		}},
		{"fixed_window", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(100), time.Duration(1+r.IntN(500))*time.Millisecond
			p, err := model.WindowParams(model.AlgFixedWindow, n, w)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: fixed_window, packets: %d, window: %v}", n, w), p, false
		}},
		// Fleet levels: the token bucket also counts what it admitted for
		// the sync; the fixed window starts its windows at a phase.
		{"token_bucket_fleet", func(r *rand.Rand) (string, model.Params, bool) {
			rate, burst := 1+r.Uint64N(5000), 1+r.Uint64N(50)
			p, err := model.TokenBucketParams(rate, time.Second, burst, false)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: %d, scope: fleet}", rate, burst), p, false
		}},
		{"fixed_window_fleet", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(100), time.Duration(1+r.IntN(500))*time.Millisecond
			p, err := model.WindowParams(model.AlgFixedWindow, n, w)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: fixed_window, packets: %d, window: %v, scope: fleet}", n, w), p, false
		}},
		{"sliding_window", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(100), time.Duration(1+r.IntN(500))*time.Millisecond
			p, err := model.WindowParams(model.AlgSlidingWindow, n, w)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: sliding_window, packets: %d, window: %v}", n, w), p, false
		}},
		// Windows up to ~16 ms: the previous window's share to the ns
		// (time shift 0); the longer ones above reckon it in 2^shift ns.
		{"sliding_window_short", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(100), time.Duration(1+r.IntN(16))*time.Millisecond
			p, err := model.WindowParams(model.AlgSlidingWindow, n, w)
			if err != nil || p.P3 != 0 {
				t.Fatalf("%v: shift %d (%v)", w, p.P3, err)
			}
			return fmt.Sprintf("{algorithm: sliding_window, packets: %d, window: %v}", n, w), p, false
		}},
		// Limits from 1 to the most a log holds; the time of each
		// admission wraps around the log many times per trace.
		{"sliding_log", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 1+r.Uint64N(model.LogMax), time.Duration(1+r.IntN(500))*time.Millisecond
			p, err := model.SlidingLogParams(n, w)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: sliding_log, packets: %d, window: %v}", n, w), p, false
		}},
		{"sliding_window_bytes", func(r *rand.Rand) (string, model.Params, bool) {
			n, w := 2000+r.Uint64N(100000), time.Duration(1+r.IntN(500))*time.Millisecond
			p, err := model.WindowParams(model.AlgSlidingWindow, n, w)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("{algorithm: sliding_window, bytes: %d, window: %v}", n, w), p, true
		}},
	}
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			for trial := 0; trial < 4; trial++ {
				seed := uint64(trial*7919 + len(a.name))
				r := rand.New(rand.NewPCG(seed, 1))
				lim, params, bytes := a.limit(r)
				// The models are of the algorithms: the admission sketch
				// (which delays a key's entry to its second packet) is off
				// here and tested on its own.
				head := ""
				if strings.Contains(lim, "scope: fleet") {
					head = "fleet: {redis: redis://127.0.0.1:6379/0}\n"
				}
				l := loadWith(t, maps.Options{Clock: maps.ClockMap, TrackAfter: 1}, head+"rules:\n  - name: r\n    limit: "+lim+"\n")
				if head != "" {
					fls, err := l.FleetLevels()
					if err != nil || len(fls) != 1 {
						t.Fatalf("fleet levels: %v %v", fls, err)
					}
					params.P3 = fls[0].P3
					if fls[0].Algorithm == maps.AlgFixedWindow {
						// A reserve below the limit, as a fleet of
						// hosts would set it.
						params.Reserve = r.Uint64N(params.P2)
						if err := l.SetFleetReserves(map[uint32]uint64{fls[0].StateID: params.Reserve}); err != nil {
							t.Fatal(err)
						}
					}
				}
				// A handful of sources, bursty arrivals, some long gaps.
				srcs := []pktgen.Frame{udp4("192.0.2.1"), udp4("192.0.2.2"), udp6("2001:db8::1"), udp4("192.0.2.3")}
				states := make([]model.State, len(srcs))
				now := uint64(t0) + r.Uint64N(uint64(time.Second))
				meanGap := uint64(time.Second) / (1 + r.Uint64N(20000))
				for i := 0; i < 3000; i++ {
					switch r.IntN(100) {
					case 0:
						now += r.Uint64N(uint64(3 * time.Second))
					default:
						now += r.Uint64N(2 * meanGap)
					}
					s := r.IntN(len(srcs))
					f := srcs[s]
					f.Payload = r.IntN(1400)
					pkt := f.MustBuild()
					cost := uint64(1)
					if bytes {
						cost = uint64(len(pkt))
					}
					want := uint32(xdpDrop)
					if states[s].Admit(params, now, cost) {
						want = xdpPass
					}
					if got := xdpltest.Run(t, l, pkt, time.Duration(now)); got != want {
						t.Fatalf("seed %d limit %s: packet %d (source %d, t=%d, cost %d): program %s, model %s",
							seed, lim, i, s, now, cost, letters([]uint32{got}), letters([]uint32{want}))
					}
				}
			}
		})
	}
}
