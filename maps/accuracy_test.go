package maps_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testutil"
	"github.com/xdplimit/xdplimit/maps"
)

// TestAccuracyAcrossCPUs drives one source from both CPUs at once on the
// real clock and requires the admitted count to be within 5% of what the
// limit allows over the time packets were offered; a per-CPU bucket would
// admit twice that. Each CPU makes one long test-run call: every call costs
// a fixed ~16 ms in which no packet is offered and a bucket refills past its
// burst, so many short calls would undercount the offered time.
func TestAccuracyAcrossCPUs(t *testing.T) {
	testutil.Require(t, runtime.NumCPU() >= 2, "needs 2 CPUs, have %d", runtime.NumCPU())
	const window = 20 * time.Millisecond
	for _, c := range []struct {
		name  string
		clock maps.Clock
		limit string
		// admissions allowed for a flood between two CLOCK_MONOTONIC times
		expect func(start, end int64) float64
	}{
		// Bursts of 50 ms absorb the gaps between a thread's time slices,
		// in which refill beyond the burst would be lost; twice the limit,
		// as per-CPU buckets admit, still shows.
		{"token_bucket ktime", maps.ClockKtime, "{algorithm: token_bucket, rate: 200000/s, burst: 10000}",
			func(s, e int64) float64 { return 10000 + 200000*float64(e-s)/1e9 }},
		// A burst longer than a few ticks: the coarse clock serves it.
		{"token_bucket coarse", maps.ClockCoarse, "{algorithm: token_bucket, rate: 200000/s, burst: 10000}",
			func(s, e int64) float64 { return 10000 + 200000*float64(e-s)/1e9 }},
		// A flood fills every window it touches, the first and last
		// partly covered ones too; windows are aligned on CLOCK_MONOTONIC.
		{"fixed_window", maps.ClockCoarse, "{algorithm: fixed_window, packets: 4000, window: 20ms}",
			func(s, e int64) float64 { return 4000 * float64(e/int64(window)-s/int64(window)+1) }},
		{"sliding_window", maps.ClockCoarse, "{algorithm: sliding_window, packets: 4000, window: 20ms}",
			func(s, e int64) float64 { return 4000 * float64(e/int64(window)-s/int64(window)+1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt := udp4("192.0.2.1").MustBuild()
			// A busy machine preempts the flood, and refill during a gap
			// in the offered load is lost: such a run cannot judge the
			// limiter. Try again, and fail if the machine never quietens.
			var pass, want, ratio float64
			policy := "rules:\n  - name: r\n    limit: " + c.limit + "\n"
			repeat := floodRuns(t, c.clock, policy, pkt)
			for attempt := 1; ; attempt++ {
				l := load(t, c.clock, policy)
				start, end, busy, err := flood(l, pkt, repeat)
				if err != nil {
					t.Fatal(err)
				}
				stats, err := l.RuleStats()
				if err != nil {
					t.Fatal(err)
				}
				pass = float64(stats[0].Verdicts[maps.VerdictPass].Packets)
				drop := float64(stats[0].Verdicts[maps.VerdictDrop].Packets)
				want = c.expect(start, end)
				wall := time.Duration(end - start)
				ratio = pass / want
				t.Logf("offered %.0f packets from 2 CPUs over %v (%.1f Mpps; each CPU running %.0f%% of it), admitted %.0f, expected %.0f: ratio %.4f",
					pass+drop, wall, (pass+drop)/wall.Seconds()/1e6, 100*busy, pass, want, ratio)
				// Gaps shorter than the 50 ms bursts lose no refill:
				// runs with the threads on CPU at least half the time
				// are measured 0.97-1.00 even next to a qemu guest.
				if busy >= 0.5 {
					break
				}
				if attempt == 3 {
					t.Fatalf("the machine is too busy to measure accuracy: the flooding threads ran only %.0f%% of the time", 100*busy)
				}
			}
			// Time runs unevenly under emulation (the 6.1 VM suite): there
			// the run checks that the limit holds, not to 5%.
			tol := 0.05
			if os.Getenv("XDPLIMIT_VM") != "" {
				tol = 0.25
			}
			if ratio < 1-tol || ratio > 1+tol {
				t.Errorf("admitted/expected = %.4f, want within %.0f%%", ratio, 100*tol)
			}
		})
	}
}

// floodRuns is how many runs of pkt on each CPU make a flood of about a
// second on this machine, measured on a limiter of the test's policy that
// the flood itself does not use (its bucket would start drained); under
// emulation a fixed count, without the probe. The
// fixed cost of a test-run call (~16 ms, in which no packet is offered and
// the limit refills) must stay a small part of the flood: a fixed 12M runs
// took 0.3 s on a CPU whose empty program costs 6 ns, and that cost alone
// then took up 5% of the span, the whole tolerance.
func floodRuns(t *testing.T, clock maps.Clock, policy string, pkt []byte) int {
	t.Helper()
	if os.Getenv("XDPLIMIT_VM") != "" {
		return 1_500_000 // ~1 Mpps under emulation
	}
	_, perPacket, err := load(t, clock, policy).Program().Benchmark(pkt, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 12_000_000
	if perPacket > 0 {
		n = int(time.Second / perPacket)
	}
	return min(max(n, 12_000_000), 200_000_000)
}

// flood runs the program on pkt from both CPUs at once, repeat times each,
// and returns when it started and ended on CLOCK_MONOTONIC (the clock the
// datapath reads) and the share of that span each CPU spent running the
// program, which the kernel reports net of preemption.
func flood(l *maps.Limiter, pkt []byte, repeat int) (int64, int64, float64, error) {
	ran := make([]time.Duration, 2)
	begin, end := make([]int64, 2), make([]int64, 2)
	err := onBothCPUs(func(cpu int) error {
		begin[cpu] = mono()
		_, perPacket, err := l.Program().Benchmark(pkt, repeat, nil)
		end[cpu] = mono()
		ran[cpu] = perPacket * time.Duration(repeat)
		return err
	})
	if err != nil {
		return 0, 0, 0, err
	}
	s, e := min(begin[0], begin[1]), max(end[0], end[1])
	busy := float64(min(ran[0], ran[1])) / float64(e-s)
	return s, e, busy, nil
}
