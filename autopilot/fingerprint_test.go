// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/xdplimit/xdplimit/policy"
)

var (
	server = netip.MustParseAddr("192.0.2.10")
	dns    = Dest{Addr: server, Proto: layers.IPProtocolUDP, Port: 53}
	web    = Dest{Addr: server, Proto: layers.IPProtocolTCP, Port: 443}
)

// gen makes n samples to d, each from mk with its own random source.
func gen(r *rand.Rand, n int, d Dest, mk func(r *rand.Rand, s *Sample)) []Sample {
	out := make([]Sample, n)
	for i := range out {
		s := &out[i]
		s.Time = time.Unix(0, 0).Add(time.Duration(i) * time.Millisecond)
		s.Dst = d
		s.SrcPort = uint16(1024 + r.IntN(64511))
		s.TTL = uint8(40 + r.IntN(25)) // clients 0 to 24 hops behind a TTL of 64
		s.IPID, s.HasIPID = uint16(r.Uint32()), true
		mk(r, s)
	}
	return out
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// query is a DNS query's first 16 bytes: a random ID, RD, one question,
// and the first label of name.
func query(r *rand.Rand, label string) []byte {
	b := []byte{byte(r.Uint32()), byte(r.Uint32()), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, byte(len(label))}
	return append(b, label...)[:PayloadBytes]
}

func normalDNS(r *rand.Rand, s *Sample) {
	labels := []string{"www", "mail", "api", "cdn", "example", "images", "login", "static"}
	s.Payload = query(r, labels[r.IntN(len(labels))]+"abc")
	s.Length = uint16(60 + r.IntN(60))
}

func normalWeb(r *rand.Rand, s *Sample) {
	s.TCPFlags = []uint8{0x10, 0x18, 0x10, 0x10, 0x02, 0x11}[r.IntN(6)]
	s.Window = uint16(500 + r.IntN(64000))
	s.Options = []string{"1,1,8", "2,4,8,1,3", "1,1,8,1,1,5"}[r.IntN(3)]
	s.Length = uint16(52 + r.IntN(1400))
}

func normalUDP(r *rand.Rand, s *Sample) {
	s.Payload = randBytes(r, 16)
	s.Length = uint16(60 + r.IntN(400))
}

// Each attack of the issue against normal traffic to the same service:
// the fingerprint covers 95% of it, matches none of the normal traffic,
// and pins what the attack tool fixed.
func TestFind(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dst    Dest
		normal func(*rand.Rand, *Sample)
		attack func(*rand.Rand, *Sample)
		want   []string // predicates the fingerprint must hold
	}{
		{"UDP flood with a fixed payload prefix", Dest{server, layers.IPProtocolUDP, 9000}, normalUDP,
			func(r *rand.Rand, s *Sample) {
				s.Payload = append([]byte("\xde\xad\xbe\xefFLOOD"), randBytes(r, 7)...)
				s.Length = uint16(60 + r.IntN(400))
			}, []string{"payload[0..8] deadbeef464c4f4f44"}},
		{"TCP flood with a fixed window and options", web, normalWeb,
			func(r *rand.Rand, s *Sample) {
				s.TCPFlags, s.Window, s.Options = 0x02, 5840, "2,1,3"
				s.Length = 52
			}, []string{"tcp window 5840", "tcp options [2,1,3]", "tcp flags syn"}},
		{"UDP flood with a TTL band and a length band", Dest{server, layers.IPProtocolUDP, 9000}, normalUDP,
			func(r *rand.Rand, s *Sample) {
				s.Payload = randBytes(r, 16)
				s.TTL = uint8(100 + r.IntN(11))
				s.Length = uint16(1200 + r.IntN(11))
			}, []string{"ttl 100-110", "length 1200-1210"}},
		{"DNS flood with a fixed query name", dns, normalDNS,
			func(r *rand.Rand, s *Sample) {
				s.Payload = query(r, "x5kq9z")
				s.Length = 70
			}, []string{"payload[2..15] 010000010000000000000678356b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			normal := gen(r, 20000, tc.dst, tc.normal)
			// The attack's seconds carry normal traffic too: 2%.
			attack := append(gen(r, 9800, tc.dst, tc.attack), gen(r, 200, tc.dst, tc.normal)...)
			fp, err := Find(tc.dst, attack, normal, Config{})
			if err != nil {
				t.Fatalf("%v: %v", fp, err)
			}
			t.Log(fp)
			if fp.Coverage < 0.95 || fp.BaselineShare > 0.001 {
				t.Errorf("covers %.3f of the attack and %.4f of normal traffic", fp.Coverage, fp.BaselineShare)
			}
			got := fp.String()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("fingerprint lacks %q", w)
				}
			}
			// The rule parses as a policy, and spares normal traffic
			// where the fingerprint's matchable part does.
			in, _ := fp.Matchable()
			rule := fp.Rule("autopilot-test", 1)
			pol, err := policy.Parse("suggested.yaml", []byte("rules:\n"+rule))
			if err != nil {
				t.Fatalf("the rule does not parse: %v\n%s", err, rule)
			}
			// Its payload items pick the samples the payload predicates do.
			var bytes []Predicate
			for _, p := range in {
				if p.Field >= FieldPayload {
					bytes = append(bytes, p)
				}
			}
			for i, s := range append(attack[:500:500], normal[:500]...) {
				if got, want := pol.Rules[0].Match.MatchesPayload(s.Payload), matchesAll(&s, bytes); got != want {
					t.Fatalf("sample %d, payload %x: the rule's payload match says %v, the fingerprint %v", i, s.Payload, got, want)
				}
			}
			t.Logf("rule (matches %.3f%% of normal traffic):\n%s", 100*Share(normal, in), rule)
		})
	}
}

// A flood that shares nothing normal traffic lacks (random sources, ports,
// TTLs, lengths and payloads) gets no fingerprint, rather than one that
// drops real clients.
func TestFindRandomFlood(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	d := Dest{server, layers.IPProtocolUDP, 9000}
	normal := gen(r, 20000, d, normalUDP)
	attack := gen(r, 10000, d, func(r *rand.Rand, s *Sample) {
		s.Payload = randBytes(r, 16)
		s.TTL = uint8(r.Uint32())
		s.Length = uint16(28 + r.IntN(1400))
	})
	fp, err := Find(d, attack, normal, Config{})
	if !errors.Is(err, ErrNoTrait) {
		t.Fatalf("got %v, %v; want ErrNoTrait", fp, err)
	}
	// A SYN flood random in everything but its flags shares only what
	// real clients' SYNs have too.
	syn := gen(r, 10000, web, func(r *rand.Rand, s *Sample) {
		s.TCPFlags, s.Window, s.Length = 0x02, uint16(r.Uint32()), uint16(40+r.IntN(40))
		s.Options = []string{"1,1,8", "2,4,8,1,3", "1,1,8,1,1,5"}[r.IntN(3)]
	})
	if fp, err := Find(web, syn, gen(r, 20000, web, normalWeb), Config{}); !errors.Is(err, ErrNoTrait) {
		t.Fatalf("SYN flood: got %v, %v; want ErrNoTrait", fp, err)
	}
	if _, err := Find(d, attack[:50], normal, Config{}); !errors.Is(err, ErrTooFew) {
		t.Fatalf("50 samples: got %v, want ErrTooFew", err)
	}
}

// A flood ten times its normal traffic's rate carries it in its samples:
// 9% of them. Find asks 95% of every sample and finds nothing; FindPart
// asks it of the flood's own part and covers all of that part, and holds
// the part to at least minAttackShare.
func TestFindPart(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	d := Dest{server, layers.IPProtocolUDP, 9000}
	band := func(r *rand.Rand, s *Sample) {
		s.Payload = randBytes(r, 16)
		s.TTL = uint8(100 + r.IntN(11))
		s.Length = uint16(1200 + r.IntN(11))
	}
	normal := gen(r, 5000, d, normalUDP)
	samples := append(gen(r, 10000, d, band), gen(r, 1000, d, normalUDP)...)
	if fp, err := Find(d, samples, normal, Config{}); !errors.Is(err, ErrNoTrait) {
		t.Errorf("Find over every sample: %v, %v; want %v", fp, err, ErrNoTrait)
	}
	fp, err := FindPart(d, samples, normal, 1-1000.0/11000, Config{})
	if err != nil {
		t.Fatalf("FindPart: %v: %v", fp, err)
	}
	t.Log(fp)
	if fp.Coverage != 1 || fp.BaselineShare > 0.001 || !strings.Contains(fp.String(), "ttl 100-110, length 1200-1210") {
		t.Errorf("FindPart: %v, want the band covering all of the flood and none of the normal traffic", fp)
	}
	if fp, _ := FindPart(d, samples, normal, 0.01, Config{}); fp.Part != minAttackShare {
		t.Errorf("a part of 0.01 is held to %v, want %v", fp.Part, minAttackShare)
	}
	if fp, _ := Find(d, samples, normal, Config{}); fp.Part != 1 {
		t.Errorf("Find's part: %v, want 1", fp.Part)
	}
}
