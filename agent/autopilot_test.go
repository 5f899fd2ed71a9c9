// SPDX-License-Identifier: Apache-2.0

package agent_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// autopilotPolicy samples every packet and judges within seconds: the
// frames come from BPF_PROG_TEST_RUN, a few thousand a second.
const autopilotPolicy = `autopilot: {sample: 1, learning: 3s, expire: 3s, floor: 300/s, multiple: 5}
rules:
  - name: everyone
    limit: {algorithm: token_bucket, rate: 1M/s, burst: 1M}
`

var apServer = netip.MustParseAddr("10.0.0.1")

// normalFrame is a UDP datagram to port 9000 as clients send it: their own
// sources and ports, payloads of their own.
func normalFrame(r *rand.Rand) []byte {
	data := make([]byte, 20+r.IntN(200))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	src := netip.AddrFrom4([4]byte{192, 0, 2, byte(1 + r.IntN(200))})
	return pktgen.Frame{Src: src, Dst: apServer, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: 9000, Data: data}.MustBuild()
}

// attackFrame is the flood's: random sources and ports, a fixed payload
// prefix.
func attackFrame(r *rand.Rand) []byte {
	data := append([]byte("\xde\xad\xbe\xef\x13\x37\x00\x01"), make([]byte, 56)...)
	for i := 8; i < len(data); i++ {
		data[i] = byte(r.Uint32())
	}
	src := netip.AddrFrom4([4]byte{198, 51, byte(r.Uint32()), byte(r.Uint32())})
	return pktgen.Frame{Src: src, Dst: apServer, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: 9000, Data: data}.MustBuild()
}

// feed runs frames through the program attached to iface for d, normal
// and attack frames a second of each; it returns the verdicts of the last
// tenth of a second's attack frames.
func feed(t *testing.T, iface string, r *rand.Rand, d time.Duration, normal, attack int) (drops, total int) {
	t.Helper()
	s, err := loader.Open(iface)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgramFromID(s.ProgramID)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	verdict := func(frame []byte) uint32 {
		ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Repeat: 1})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		next := time.Now().Add(100 * time.Millisecond)
		for range normal / 10 {
			if v := verdict(normalFrame(r)); v != xdpPass {
				t.Fatalf("a normal frame dropped (verdict %d)", v)
			}
		}
		drops, total = 0, 0
		for range attack / 10 {
			if verdict(attackFrame(r)) == xdpDrop {
				drops++
			}
			total++
		}
		time.Sleep(time.Until(next))
	}
	return drops, total
}

// The autopilot in an agent: normal traffic learned, a flood with a fixed
// payload prefix gets a rule that drops it and spares the normal traffic,
// the rule outlives a restart of the attach process, and it is removed
// once the flood has stopped for expire.
func TestAgentAutopilot(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	iface := v.PeerName
	path := policyFile(t, autopilotPolicy)
	a := startKeeping(t, v, agent.Config{Policy: path})
	r := rand.New(rand.NewPCG(7, 8))
	feed(t, iface, r, 7*time.Second, 200, 0) // learning, and the 3 s held back
	var rule string
	for i := 0; i < 8 && rule == ""; i++ {
		feed(t, iface, r, time.Second, 200, 3000)
		view, err := agent.AskAutopilot(context.Background(), iface)
		if err != nil {
			t.Fatal(err)
		}
		if len(view.Rules) > 0 {
			rule = view.Rules[0].Name
			t.Logf("after %d s of flood: %+v", i+1, view.Rules[0])
			if !strings.Contains(view.Rules[0].Fingerprint, "payload[0..7] deadbeef13370001") {
				t.Errorf("fingerprint %q", view.Rules[0].Fingerprint)
			}
		}
	}
	if rule == "" {
		t.Fatalf("no rule after 8 s of flood:\n%s", a.logs)
	}
	if drops, total := feed(t, iface, r, time.Second, 200, 3000); drops < total*99/100 {
		t.Fatalf("the rule dropped %d of %d flood frames", drops, total)
	}
	if !hasRule(t, iface, rule) {
		t.Fatalf("rule %s is not in force: %v", rule, ruleNames(t, iface))
	}
	// A restarted attach process enforces it from its first moment.
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	a = startKeeping(t, v, agent.Config{Policy: path})
	if !hasRule(t, iface, rule) || !strings.Contains(a.logs.String(), "autopilot: rule restored") {
		t.Fatalf("rule %s not restored: %v\n%s", rule, ruleNames(t, iface), a.logs)
	}
	// The flood stops: the rule goes after expire.
	ok := false
	for i := 0; i < 10 && !ok; i++ {
		feed(t, iface, r, time.Second, 200, 0)
		ok = !hasRule(t, iface, rule)
	}
	if !ok {
		t.Fatalf("rule %s still in force 10 s after the flood:\n%s", rule, a.logs)
	}
	for _, want := range []string{"autopilot: attack ended", "autopilot: rule removed"} {
		if !strings.Contains(a.logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, a.logs)
		}
	}
}

// In shadow mode a generated rule counts and drops nothing; a reload to
// enforce makes the same rule drop; a kept rule outlives its flood, and
// an operator's remove takes it out of the datapath.
func TestAgentAutopilotShadowKeepRemove(t *testing.T) {
	testutil.RequireRoot(t)
	v := newVeth(t)
	iface := v.PeerName
	path := policyFile(t, strings.Replace(autopilotPolicy, "sample: 1,", "sample: 1, mode: shadow,", 1))
	a := startAgent(t, v, agent.Config{Policy: path})
	r := rand.New(rand.NewPCG(9, 10))
	feed(t, iface, r, 7*time.Second, 200, 0)
	var rule string
	for i := 0; i < 8 && rule == ""; i++ {
		if drops, _ := feed(t, iface, r, time.Second, 200, 3000); drops > 0 {
			t.Fatalf("shadow mode dropped %d flood frames", drops)
		}
		view, err := agent.AskAutopilot(context.Background(), iface)
		if err != nil {
			t.Fatal(err)
		}
		if len(view.Rules) > 0 {
			rule = view.Rules[0].Name
			if !view.Rules[0].Shadow || !strings.Contains(view.Rules[0].YAML, "action: shadow") {
				t.Fatalf("a shadow-mode rule: %+v", view.Rules[0])
			}
		}
	}
	if rule == "" {
		t.Fatalf("no rule after 8 s of flood:\n%s", a.logs)
	}
	if drops, total := feed(t, iface, r, time.Second, 200, 3000); drops > 0 {
		t.Fatalf("shadow rule dropped %d of %d", drops, total)
	}
	if _, _, shadow := ruleVerdicts(t, iface, rule); shadow == 0 {
		t.Errorf("the shadow rule counted no would-drops")
	}
	writePolicy(t, path, autopilotPolicy)
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if drops, total := feed(t, iface, r, time.Second, 200, 3000); drops < total*99/100 {
		t.Fatalf("after the reload to enforce, the rule dropped %d of %d", drops, total)
	}
	if g, err := agent.AskAutopilotKeep(context.Background(), iface, rule); err != nil || !g.Kept {
		t.Fatalf("keep: %+v, %v", g, err)
	}
	if _, err := agent.AskAutopilotKeep(context.Background(), iface, "no-such-rule"); err == nil {
		t.Error("keeping a rule that does not exist succeeded")
	}
	feed(t, iface, r, 6*time.Second, 200, 0) // past expire
	if !hasRule(t, iface, rule) {
		t.Fatalf("the kept rule expired:\n%s", a.logs)
	}
	if _, err := agent.AskAutopilotRemove(context.Background(), iface, rule); err != nil {
		t.Fatal(err)
	}
	if hasRule(t, iface, rule) {
		t.Fatalf("rule %s still in force after remove", rule)
	}
	// The section taken out: the autopilot stops and its file goes.
	writePolicy(t, path, autopilotPolicy[strings.Index(autopilotPolicy, "rules:"):])
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if v, err := agent.AskAutopilot(context.Background(), iface); err != nil || v.On {
		t.Fatalf("after the section went: %+v, %v", v, err)
	}
	if _, err := os.Stat(agent.AutopilotStatePath(iface)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after the section went: %v", err)
	}
}

// ruleVerdicts are a rule's pass, drop and shadow packet counts.
func ruleVerdicts(t *testing.T, iface, rule string) (pass, drop, shadow uint64) {
	t.Helper()
	stats, err := pinned(t, iface).Limiter.RuleStats()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Name == rule {
			return s.Verdicts[maps.VerdictPass].Packets, s.Verdicts[maps.VerdictDrop].Packets, s.Verdicts[maps.VerdictShadow].Packets
		}
	}
	t.Fatalf("no rule %s in force", rule)
	return
}
