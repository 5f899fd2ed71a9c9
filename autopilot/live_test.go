// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/xdplimit/xdplimit/policy"
)

// live drives a pilot second by second: normal traffic to dst at
// normalPerSec samples a second throughout, an attack's samples where
// given; each sample stands for 8 packets (sampling one in 8).
type live struct {
	t   *testing.T
	p   *Pilot
	r   *rand.Rand
	now time.Time
	log []Event
}

const liveScale = 8

func newLive(t *testing.T, cfg LiveConfig) *live {
	l := &live{t: t, p: NewPilot(cfg), r: rand.New(rand.NewPCG(5, 6)), now: time.Unix(1000, 0)}
	l.p.Tick(l.now)
	return l
}

// second adds a second of samples and ticks; it returns the events.
func (l *live) second(batches ...[]Sample) []Event {
	for _, b := range batches {
		l.p.Add(b, liveScale)
	}
	l.now = l.now.Add(time.Second)
	ev, _ := l.p.Tick(l.now)
	l.log = append(l.log, ev...)
	return ev
}

// learn runs past the learning period and the seconds held back: normal
// traffic to d alone, which must raise no event.
func (l *live) learn(d Dest) {
	for range 25 {
		if ev := l.second(gen(l.r, 60, d, normalUDP)); len(ev) > 0 {
			l.t.Fatalf("events in normal traffic: %v", ev)
		}
	}
}

func kinds(ev []Event) string {
	var s []string
	for _, e := range ev {
		s = append(s, e.Kind.String())
	}
	return strings.Join(s, ",")
}

func liveConfig() LiveConfig {
	return LiveConfig{Learning: 10 * time.Second, Expire: 5 * time.Second}
}

// An attack after the learning period gets a rule in the second it is
// seen; normal traffic goes on beside it; the rule is removed Expire after
// the attack ends, and parses as a policy's rule.
func TestPilotAttackRuleExpiry(t *testing.T) {
	l := newLive(t, liveConfig())
	udp := Dest{server, layers.IPProtocolUDP, 9000}
	prefix := func(r *rand.Rand, s *Sample) {
		s.Payload = append([]byte("\xde\xad\xbe\xef\x13\x37\x00\x01"), randBytes(r, 8)...)
		s.Length = 100
	}
	for range 25 {
		if ev := l.second(gen(l.r, 60, udp, normalUDP), gen(l.r, 60, dns, normalDNS)); len(ev) > 0 {
			t.Fatalf("events in normal traffic: %v", ev)
		}
	}
	ev := l.second(gen(l.r, 60, udp, normalUDP), gen(l.r, 3000, udp, prefix))
	if kinds(ev) != "attack,rule" {
		t.Fatalf("first attack second: %v", ev)
	}
	g := ev[1].Rule
	t.Log(ev[0], "\n", ev[1])
	if !strings.Contains(Describe(g.Preds, true), "payload[0..7] deadbeef13370001") || g.BaselineShare > 0.001 {
		t.Errorf("fingerprint %s", g.Evidence())
	}
	if _, err := policy.Parse("gen.yaml", []byte("rules:\n"+g.YAML())); err != nil {
		t.Fatalf("rule does not parse: %v\n%s", err, g.YAML())
	}
	// Held: the rule covers the attack, no second rule.
	for range 10 {
		if ev := l.second(gen(l.r, 60, udp, normalUDP), gen(l.r, 3000, udp, prefix)); len(ev) > 0 {
			t.Fatalf("events while the rule holds the attack: %v", ev)
		}
	}
	// Ended: below the threshold for Expire, then removed.
	for i := range 5 {
		ev := l.second(gen(l.r, 60, udp, normalUDP))
		if i < 4 && len(ev) > 0 || i == 4 && kinds(ev) != "ended,removed" {
			t.Fatalf("second %d after the attack: %v", i, ev)
		}
	}
	if len(l.p.Rules()) != 0 {
		t.Fatalf("rules left: %v", l.p.Rules())
	}
}

// A flood random in everything gets no rule, once in the log; before the
// learning period has passed, nothing is an attack.
func TestPilotNoTrait(t *testing.T) {
	l := newLive(t, liveConfig())
	udp := Dest{server, layers.IPProtocolUDP, 9000}
	random := func(r *rand.Rand, s *Sample) {
		s.Payload = randBytes(r, 16)
		s.TTL = uint8(r.Uint32())
		s.Length = uint16(28 + r.IntN(1400))
	}
	// While learning, nothing is an attack (and what it sees is learned
	// as normal: docs/autopilot.md).
	early := newLive(t, liveConfig())
	for range 5 {
		if ev := early.second(gen(l.r, 60, udp, normalUDP), gen(l.r, 3000, udp, random)); len(ev) > 0 {
			t.Fatalf("an attack while learning: %v", ev)
		}
	}
	l.learn(udp)
	ev := l.second(gen(l.r, 60, udp, normalUDP), gen(l.r, 3000, udp, random))
	if kinds(ev) != "attack,no_rule" || !errors.Is(ev[1].Err, ErrNoTrait) {
		t.Fatalf("random flood: %v", ev)
	}
	t.Log(ev[1])
	if ev := l.second(gen(l.r, 60, udp, normalUDP), gen(l.r, 3000, udp, random)); len(ev) > 0 {
		t.Fatalf("the same refusal logged twice: %v", ev)
	}
	if len(l.p.Rules()) != 0 {
		t.Fatal("a rule for a random flood")
	}
}

// An attack that changes its fingerprint gets a second rule for the new
// one; an operator's removal holds until the attack ends; a kept rule
// outlives it; MaxRules bounds them.
func TestPilotRotateRemoveKeep(t *testing.T) {
	cfg := liveConfig()
	cfg.MaxRules = 2
	l := newLive(t, cfg)
	udp := Dest{server, layers.IPProtocolUDP, 9000}
	withPrefix := func(p string) func(r *rand.Rand, s *Sample) {
		return func(r *rand.Rand, s *Sample) { s.Payload, s.Length = append([]byte(p), randBytes(r, 8)...), 100 }
	}
	l.learn(udp)
	if ev := l.second(gen(l.r, 3000, udp, withPrefix("AAAAAAAA"))); kinds(ev) != "attack,rule" {
		t.Fatalf("first wave: %v", ev)
	}
	ev := l.second(gen(l.r, 3000, udp, withPrefix("BBBBBBBB")))
	if kinds(ev) != "rule" || !strings.Contains(ev[0].Rule.Evidence(), "4242424242424242") {
		t.Fatalf("rotated: %v", ev)
	}
	ev = l.second(gen(l.r, 3000, udp, withPrefix("CCCCCCCC")))
	if kinds(ev) != "no_rule" || !errors.Is(ev[0].Err, ErrNoRoom) {
		t.Fatalf("third fingerprint with max_rules 2: %v", ev)
	}
	rules := l.p.Rules()
	if _, err := l.p.Keep(rules[0].Name); err != nil {
		t.Fatal(err)
	}
	if _, err := l.p.Remove(rules[1].Name); err != nil {
		t.Fatal(err)
	}
	if _, err := l.p.Remove("nope"); !errors.Is(err, ErrNoSuchRule) {
		t.Fatalf("removing an unknown rule: %v", err)
	}
	if ev := l.second(gen(l.r, 3000, udp, withPrefix("DDDDDDDD"))); len(ev) > 0 {
		t.Fatalf("a rule after the operator removed one: %v", ev)
	}
	for range 6 {
		l.second(gen(l.r, 60, udp, normalUDP))
	}
	if got := l.p.Rules(); len(got) != 1 || got[0].Name != rules[0].Name {
		t.Fatalf("after the attack: %v, want the kept rule only", got)
	}
	// A restarted pilot takes the rules back; an unkept one expires on
	// its old schedule.
	q := NewPilot(cfg)
	un := *rules[1]
	q.Restore([]*Generated{rules[0], &un})
	q.Tick(l.now)
	ev, changed := q.Tick(l.now.Add(time.Second))
	if !changed || kinds(ev) != "ended,removed" || ev[1].Rule.Name != un.Name {
		t.Fatalf("restored: %v changed %v", ev, changed)
	}
	if got := q.Rules(); len(got) != 1 || !got[0].Kept {
		t.Fatalf("restored rules: %v", got)
	}
}

// A restarted pilot judges a restored rule's destination against the
// baseline the rule was written with, from its first second: a flood that
// goes on keeps its rule, and is never learned as normal traffic.
func TestPilotRestoreUnderFlood(t *testing.T) {
	l := newLive(t, liveConfig())
	udp := Dest{server, layers.IPProtocolUDP, 9000}
	flood := func(r *rand.Rand, s *Sample) {
		s.Payload, s.Length = append([]byte("EEEEEEEE"), randBytes(r, 8)...), 100
	}
	l.learn(udp)
	if ev := l.second(gen(l.r, 3000, udp, flood)); kinds(ev) != "attack,rule" {
		t.Fatalf("flood: %v", ev)
	}
	saved := l.p.Rules()
	if saved[0].Baseline <= 0 {
		t.Fatalf("the rule carries no baseline: %+v", saved[0])
	}
	q := &live{t: t, p: NewPilot(liveConfig()), r: l.r, now: l.now}
	q.p.Restore(saved)
	q.p.Tick(q.now)
	for i := range 20 { // past Expire and the learning period
		if ev := q.second(gen(q.r, 60, udp, normalUDP), gen(q.r, 3000, udp, flood)); len(ev) > 0 {
			t.Fatalf("second %d after the restart, under the same flood: %v", i, ev)
		}
	}
	if len(q.p.Rules()) != 1 {
		t.Fatalf("rules after 20 s of flood: %v", q.p.Rules())
	}
}

// An interval's samples are kept to maxPending, a uniform share of them:
// the rate still counts every one, and the fingerprint comes out the same.
func TestPilotPendingBounded(t *testing.T) {
	l := newLive(t, liveConfig())
	udp := Dest{server, layers.IPProtocolUDP, 9000}
	l.learn(udp)
	l.p.Add(gen(l.r, 3*maxPending, udp, func(r *rand.Rand, s *Sample) {
		s.Payload, s.Length = append([]byte("FFFFFFFF"), randBytes(r, 8)...), 100
	}), liveScale)
	if d := l.p.dests[udp]; len(d.pending) != maxPending || d.count != 3*maxPending*liveScale {
		t.Fatalf("kept %d samples counted as %.0f packets, want %d and %d", len(d.pending), d.count, maxPending, 3*maxPending*liveScale)
	}
	ev := l.second()
	if kinds(ev) != "attack,rule" || !strings.Contains(ev[1].Rule.Evidence(), "4646464646464646") {
		t.Fatalf("%v", ev)
	}
}
