// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/model"
)

// Levels for the planner tests: a token bucket of rate per second (burst
// rate) keyed as kind, at policy position origin.
func level(t *testing.T, kind uint8, rate uint64, origin int) LevelSpec {
	t.Helper()
	p, err := model.TokenBucketParams(rate, time.Second, rate, false)
	if err != nil {
		t.Fatal(err)
	}
	return LevelSpec{Params: p, KeyKind: kind, V4Prefix: 32, V6Prefix: 128, ToleranceNs: p.ToleranceNs(), Origin: origin}
}

func rules(rs ...RuleSpec) *Image { return &Image{Rules: rs} }

// inForceAfter plans img from scratch and returns the rules that plan
// installs, as Apply would read them back.
func inForceAfter(t *testing.T, img *Image, nextID uint32) []installed {
	t.Helper()
	p, err := planGeneration(planInput{img: img, nextStateID: nextID, cpus: 2})
	if err != nil {
		t.Fatal(err)
	}
	var out []installed
	for i, r := range p.rules {
		out = append(out, installed{name: img.Rules[i].Name, slot: r.CounterSlot, levels: r.Levels[:r.Nlevels]})
	}
	return out
}

// TestPlanGeneration: counter slots follow names, state ids carry over only
// for an unchanged limit at the same place, global levels keep their slot
// with their state, and new slots are ones nothing in force uses.
func TestPlanGeneration(t *testing.T) {
	src := func(rate uint64, origin int) LevelSpec { return level(t, KeySrc, rate, origin) }
	glob := func(rate uint64, origin int) LevelSpec { return level(t, KeyGlobal, rate, origin) }
	a := RuleSpec{Name: "a", Levels: []LevelSpec{src(100, 0)}}
	b := RuleSpec{Name: "b", Levels: []LevelSpec{glob(1000, 1), src(100, 0)}}
	long := RuleSpec{Name: strings.Repeat("x", NameLen), Levels: []LevelSpec{src(1, 0)}}
	many := &Image{}
	for i := range CounterSlots {
		many.Rules = append(many.Rules, RuleSpec{Name: fmt.Sprint("r", i), Levels: []LevelSpec{src(1, 0)}})
	}
	globals := &Image{}
	for i := range globalSlots / MaxLevels {
		ls := make([]LevelSpec, MaxLevels)
		for k := range ls {
			ls[k] = glob(uint64(10+k), k)
		}
		globals.Rules = append(globals.Rules, RuleSpec{Name: fmt.Sprint("g", i), Levels: ls})
	}

	for _, c := range []struct {
		name      string
		old, img  *Image // old: the policy in force (nil: none), planned with ids from 1
		wantErr   string
		slots     []uint32   // counter slot per rule
		ids       [][]uint32 // state id per level
		gslots    [][]uint32 // xdpl_globals slot per level (0 for others)
		newSlots  []uint32
		newGlobal []uint32
		next      uint32 // next free state id after the plan; old's plan leaves 10
	}{
		{name: "fresh", img: rules(a, b),
			slots: []uint32{0, 1}, ids: [][]uint32{{10}, {11, 12}}, gslots: [][]uint32{{0}, {0, 0}},
			newSlots: []uint32{0, 1}, newGlobal: []uint32{0}, next: 13},
		{name: "unchanged keeps everything", old: rules(a, b), img: rules(b, a),
			slots: []uint32{1, 0}, ids: [][]uint32{{2, 3}, {1}}, gslots: [][]uint32{{0, 0}, {0}}, next: 10},
		{name: "changed limit keeps the slot, not the state", old: rules(a),
			img:   rules(RuleSpec{Name: "a", Levels: []LevelSpec{src(200, 0)}}),
			slots: []uint32{0}, ids: [][]uint32{{10}}, gslots: [][]uint32{{0}}, next: 11},
		{name: "moved level starts fresh", old: rules(b),
			img:   rules(RuleSpec{Name: "b", Levels: []LevelSpec{glob(1000, 0), src(100, 1)}}),
			slots: []uint32{0}, ids: [][]uint32{{10, 11}}, gslots: [][]uint32{{1, 0}},
			newGlobal: []uint32{1}, next: 12},
		{name: "renamed rule takes a free slot", old: rules(a, b),
			img:   rules(RuleSpec{Name: "c", Levels: a.Levels}, b),
			slots: []uint32{2, 1}, ids: [][]uint32{{10}, {2, 3}}, gslots: [][]uint32{{0}, {0, 0}},
			newSlots: []uint32{2}, next: 11},
		{name: "new global level avoids the slots in force", old: rules(b),
			img:   rules(b, RuleSpec{Name: "c", Levels: []LevelSpec{glob(5, 0)}}),
			slots: []uint32{0, 1}, ids: [][]uint32{{1, 2}, {10}}, gslots: [][]uint32{{0, 0}, {1}},
			newSlots: []uint32{1}, newGlobal: []uint32{1}, next: 11},
		{name: "name too long", img: rules(long), wantErr: "longer than 63 bytes"},
		{name: "counter slots exhausted", old: many, img: rules(a), wantErr: `no free counter slot for rule "a"`},
		{name: "global slots exhausted", old: globals, img: rules(RuleSpec{Name: "g0", Levels: []LevelSpec{glob(999, 0)}}),
			wantErr: `rule "g0": no free slot for a global level`},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := planInput{img: c.img, nextStateID: 10, cpus: 2}
			if c.old != nil {
				in.inForce = inForceAfter(t, c.old, 1)
			}
			p, err := planGeneration(in)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var slots []uint32
			var ids, gslots [][]uint32
			for _, r := range p.rules {
				slots = append(slots, r.CounterSlot)
				var id, gs []uint32
				for _, lv := range r.Levels[:r.Nlevels] {
					id, gs = append(id, lv.StateId), append(gs, lv.Slot)
				}
				ids, gslots = append(ids, id), append(gslots, gs)
			}
			var newSlots []uint32
			for _, s := range p.newSlots {
				newSlots = append(newSlots, s.slot)
				if s.name != c.img.Rules[slices.Index(slots, s.slot)].Name {
					t.Errorf("new slot %d named %q", s.slot, s.name)
				}
			}
			for _, x := range []struct {
				what      string
				got, want any
			}{
				{"counter slots", slots, c.slots}, {"state ids", ids, c.ids}, {"global slots", gslots, c.gslots},
				{"new slots", newSlots, c.newSlots}, {"new global slots", p.newGlobals, c.newGlobal},
				{"next state id", p.nextStateID, c.next},
			} {
				if fmt.Sprint(x.got) != fmt.Sprint(x.want) {
					t.Errorf("%s: %v, want %v", x.what, x.got, x.want)
				}
			}
		})
	}
}

// TestPlanFlags: the rule, level and generation flags the datapath reads.
func TestPlanFlags(t *testing.T) {
	tick := uint64(4 * time.Millisecond)
	src := level(t, KeySrc, 100, 0)
	bytes := src
	bytes.Bytes = true
	short := src
	short.ToleranceNs = 3 * tick // a burst shorter than four ticks
	prefix := src
	prefix.V4Prefix, prefix.V6Prefix = 24, 64
	glob := level(t, KeyGlobal, 1e6, 0)
	globBytes := glob
	globBytes.Bytes = true
	fast := level(t, KeySrc, 1e6, 0) // an untracked key passes far less than half of it
	var mask64 [4]uint32
	copy(mask64[:], []uint32{0xffffffff, 0xffffffff})
	fleetTB := src
	fleetTB.Fleet = true
	fleetFW := fleetTB
	fw, err := model.WindowParams(model.AlgFixedWindow, 100, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fleetFW.Params = fw

	for _, c := range []struct {
		name       string
		ls         LevelSpec
		clock      Clock
		trackAfter uint32
		flags      uint8
		mask4      uint32
		mask6      [4]uint32
	}{
		{"slow source tracks first", src, ClockKtime, 2, lfTrackFirst, 0xffffffff, [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}},
		{"track_after 1 tracks every key anyway", src, ClockKtime, 1, 0, 0xffffffff, [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}},
		{"fast source may stay untracked", fast, ClockKtime, 2, 0, 0xffffffff, [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}},
		{"bytes", bytes, ClockKtime, 1, lfBytes, 0xffffffff, [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}},
		{"short burst on the coarse clock", short, ClockCoarse, 1, lfFineClock, 0xffffffff, [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}},
		{"short burst on the fine clock", short, ClockKtime, 1, 0, 0xffffffff, [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}},
		{"prefix masks", prefix, ClockKtime, 1, 0, prefixMask4(24), mask64},
		{"global: no mask, never tracked first", glob, ClockCoarse, 2, 0, 0, [4]uint32{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := rules(RuleSpec{Name: "r", Levels: []LevelSpec{c.ls}})
			p, err := planGeneration(planInput{img: img, clock: c.clock, tickNs: tick, trackAfter: c.trackAfter, cpus: 2, nextStateID: 1})
			if err != nil {
				t.Fatal(err)
			}
			lv := p.rules[0].Levels[0]
			if lv.Flags != c.flags || lv.Mask4 != c.mask4 || lv.Mask6 != c.mask6 {
				t.Errorf("flags %#x masks %#x %x, want %#x %#x %x", lv.Flags, lv.Mask4, lv.Mask6, c.flags, c.mask4, c.mask6)
			}
			if lv.Algorithm != c.ls.Params.Algorithm || lv.P1 != c.ls.Params.P1 || lv.P2 != c.ls.Params.P2 || lv.KeyKind != c.ls.KeyKind {
				t.Errorf("level %+v does not carry %+v", lv, c.ls)
			}
		})
	}

	for _, c := range []struct {
		name      string
		img       Image
		ruleFlags uint8
		genFlags  uint32
	}{
		{"enforcing", Image{Rules: []RuleSpec{{Name: "r", Levels: []LevelSpec{src}}}, Dims: DimProto}, 0, 0},
		{"shadow", Image{Rules: []RuleSpec{{Name: "r", Shadow: true, Levels: []LevelSpec{src}}}, Shadow: true}, rfShadow, gfShadow},
		{"allow list", Image{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, 0, gfACL | gfACLPrefix},
		{"deny list", Image{Deny: []netip.Prefix{netip.MustParsePrefix("::/0")}}, 0, gfACL | gfACLPrefix},
		// Host addresses go to the hash maps; the tries are then skipped.
		{"hosts only", Image{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")},
			Deny: []netip.Prefix{netip.MustParsePrefix("2001:db8::1/128")}}, 0, gfACL | gfACLExact},
		{"hosts and prefixes", Image{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32"),
			netip.MustParsePrefix("10.1.0.0/16")}}, 0, gfACL | gfACLExact | gfACLPrefix},
		{"fleet token bucket", Image{Rules: []RuleSpec{{Name: "r", Levels: []LevelSpec{fleetTB}}}}, 0, 0},
		{"fleet fixed window", Image{Rules: []RuleSpec{{Name: "r", Levels: []LevelSpec{src, fleetFW}}}}, 0, gfFleetWin},
		// A global first level's refusals are cached without the source
		// only where no rule reads the source (bpf/flows.h).
		{"global first level", Image{Rules: []RuleSpec{{Name: "r", Levels: []LevelSpec{glob, src}}}, Dims: DimProto}, 0, gfNoSrcFlows},
		{"global first level, a rule on sources", Image{Rules: []RuleSpec{{Name: "r", Levels: []LevelSpec{glob}}}, Dims: DimSrc}, 0, 0},
		{"global first level counting bytes", Image{Rules: []RuleSpec{{Name: "r", Levels: []LevelSpec{globBytes}}}}, 0, 0},
		{"global first level, a rule that bans", Image{Rules: []RuleSpec{{Name: "r", Ban: &BanSpec{For: time.Minute, V4Bits: 32, V6Bits: 64}, Levels: []LevelSpec{glob}}}}, rfBan, gfBans},
		{"global second level", Image{Rules: []RuleSpec{{Name: "r", Levels: []LevelSpec{src, glob}}}}, 0, 0},
		// A cookie rule makes every TCP ACK a candidate for the cookie check.
		{"syncookie", Image{Rules: []RuleSpec{{Name: "r", SynCookie: true, Levels: []LevelSpec{src}}}}, rfSynCookie, gfSynCookie},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := planGeneration(planInput{img: &c.img, cpus: 2, nextStateID: 1})
			if err != nil {
				t.Fatal(err)
			}
			want := gen.XdplimitXdplGenCfg{Dims: c.img.Dims, Nrules: uint32(len(c.img.Rules)), Flags: c.genFlags,
				SampleMask: DefaultSampleOneIn - 1, SigMask: sigMask(c.img.Dims, p.rules), Synack: DefaultSynAck.cfg()}
			if c.ruleFlags&rfSynCookie != 0 {
				want.CookieRules.W[0] = 1 // rule 0 answers with cookies
			}
			if p.cfg != want {
				t.Errorf("generation %+v, want %+v", p.cfg, want)
			}
			if len(p.rules) > 0 && p.rules[0].Flags != c.ruleFlags {
				t.Errorf("rule flags %#x, want %#x", p.rules[0].Flags, c.ruleFlags)
			}
		})
	}
}
