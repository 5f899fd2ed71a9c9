// SPDX-License-Identifier: Apache-2.0

package pktgen

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/internal/fmix"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// mix64 mirrors the BPF program's hash.
func mix64(x uint64) uint32 { return uint32(fmix.Fmix64(x)) }

func withSource(l layout, frame []byte, a netip.Addr) []byte {
	out := append([]byte(nil), frame...)
	setSource(out, l, a)
	return out
}

// TestProgramRewrite runs xdpl_pktgen in ordinary (not live-frames) test
// runs, one frame per run, and checks each output: the expected source,
// valid checksums, and no other byte changed.
func TestProgramRewrite(t *testing.T) {
	testutil.RequireRoot(t)
	g, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	noCsum := UDP4(src4, dst4, 1, 2, 18)
	noCsum[40], noCsum[41] = 0, 0
	templates := map[string][]byte{
		"UDP4":              UDP4(src4, dst4, 1, 2, 18),
		"UDP4 no checksum":  noCsum,
		"UDP6 ext chain":    Frame{Src: src6, Dst: dst6, Ext: []ExtHeader{ExtHopByHop, ExtDestOpts}}.MustBuild(),
		"TCP4 QinQ options": Frame{Src: src4, Dst: dst4, Proto: ProtoTCP, IPv4Options: 3, VLANs: []VLAN{{TPID: 0x88a8, ID: 1}, {ID: 2}}}.MustBuild(),
		"TCP6":              TCP6(src6, dst6, 1, 2, TCPAck, 100),
		"ICMP4":             ICMP4(src4, dst4, 8),
		"ICMP6":             ICMP6(src6, dst6, 8),
		"UDP4 first frag":   Frame{Src: src4, Dst: dst4, Frag: &Fragment{More: true}, Payload: 30}.MustBuild(),
		"UDP6 later frag":   Frame{Src: src6, Dst: dst6, Frag: &Fragment{Offset: 16}, Payload: 30}.MustBuild(),
	}
	const cpu = 0
	for name, frame := range templates {
		l, err := parseLayout(frame)
		if err != nil {
			t.Fatal(err)
		}
		first4, first6 := netip.MustParseAddr("198.19.255.254"), netip.MustParseAddr("2001:2::ffff:fffa")
		first := first4
		if !l.is4 {
			first = first6
		}
		for _, s := range []Sources{
			{Mode: Fixed},
			{Mode: Fixed, First: first},
			{Mode: Sequential, First: first, Count: 4},
			{Mode: Random, First: first, Mask: 0x00ff00ff},
			{Mode: Random},
		} {
			t.Run(name+"/"+s.Mode.String(), func(t *testing.T) { checkRewrite(t, g, l, frame, s, cpu) })
		}
	}
}

// checkRewrite prepares frame as the template for sources s, then runs
// the program nine times on cpu and checks each frame it sends.
func checkRewrite(t *testing.T, g *Generator, l layout, frame []byte, s Sources, cpu int) {
	if err := g.SetSources(s); err != nil {
		t.Fatal(err)
	}
	tmpl, cfg, err := g.prepare(frame)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.objs.Config.Set(cfg); err != nil {
		t.Fatal(err)
	}
	if err := g.resetState([]int{cpu}); err != nil {
		t.Fatal(err)
	}
	base := l.src(frame)
	if s.First.IsValid() {
		base = s.First
	}
	if got := l.src(tmpl); got != base {
		t.Fatalf("template source %v, want %v", got, base)
	}
	checkChecksums(t, tmpl)

	err = cpupin.OnCPU(cpu, func() error {
		for i := 0; i < 9; i++ {
			out := make([]byte, len(tmpl)+256)
			opts := ebpf.RunOptions{Data: tmpl, DataOut: out, Repeat: 1}
			verdict, err := g.objs.Prog.Run(&opts)
			if err != nil {
				return err
			}
			if verdict != 3 { // XDP_TX
				return fmt.Errorf("verdict %d, want XDP_TX", verdict)
			}
			out = opts.DataOut
			want := nthSource(base, s.Mode, g.sources.Mask, i, cpu)
			if got := l.src(out); got != want {
				return fmt.Errorf("frame %d: source %v, want %v", i, got, want)
			}
			checkChecksums(t, out)
			// Everything else is the template with that source.
			if exp := withSource(l, tmpl, want); !bytes.Equal(out, exp) {
				return fmt.Errorf("frame %d:\n got % x\nwant % x", i, out, exp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// nthSource is the source the program gives frame i on cpu, from base
// as mode varies it.
func nthSource(base netip.Addr, mode Mode, mask uint32, i, cpu int) netip.Addr {
	var low uint32
	switch mode {
	case Fixed:
		low = low32(base)
	case Sequential:
		low = low32(base) + uint32(i%4)
	case Random:
		low = low32(base)&^mask | mix64(uint64(i)^uint64(cpu)<<48)&mask
	}
	b := base.As16()
	binary.BigEndian.PutUint32(b[12:], low)
	want := netip.AddrFrom16(b)
	if base.Is4() {
		want = want.Unmap()
	}
	return want
}

func TestPrepareErrors(t *testing.T) {
	g := &Generator{}
	for _, tc := range []struct {
		name  string
		s     Sources
		frame []byte
	}{
		{"family", Sources{Mode: Sequential, First: src6, Count: 1}, UDP4(src4, dst4, 1, 2, 0)},
		{"overflow", Sources{Mode: Sequential, First: netip.MustParseAddr("255.255.255.250"), Count: 10}, UDP4(src4, dst4, 1, 2, 0)},
		{"not IP", Sources{}, make([]byte, 60)},
		{"short", Sources{}, UDP4(src4, dst4, 1, 2, 0)[:20]},
	} {
		g.sources = tc.s
		if _, _, err := g.prepare(tc.frame); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestCsumReplace4(t *testing.T) {
	// Against a full recomputation over random headers.
	frame := UDP4(src4, dst4, 1, 2, 18)
	l, err := parseLayout(frame)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"0.0.0.0", "255.255.255.255", "10.0.0.1", "198.18.0.1", "1.2.3.4"} {
		out := withSource(l, frame, netip.MustParseAddr(a))
		checkChecksums(t, out)
	}
}

// TestProgramDstPorts: with Sources.DstPorts the program varies the
// destination port and keeps both checksums valid; the source stays.
func TestProgramDstPorts(t *testing.T) {
	testutil.RequireRoot(t)
	g, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for name, frame := range map[string][]byte{
		"UDP4": UDP4(src4, dst4, 53, 1000, 18),
		"TCP6": TCP6(src6, dst6, 53, 1000, TCPAck, 10),
	} {
		l, err := parseLayout(frame)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []Sources{{Mode: Sequential, Count: 4, DstPorts: true}, {Mode: Random, DstPorts: true}} {
			t.Run(name+"/"+s.Mode.String(), func(t *testing.T) { checkPorts(t, g, l, frame, s) })
		}
	}
}

func checkPorts(t *testing.T, g *Generator, l layout, frame []byte, s Sources) {
	if err := g.SetSources(s); err != nil {
		t.Fatal(err)
	}
	tmpl, cfg, err := g.prepare(frame)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.objs.Config.Set(cfg); err != nil {
		t.Fatal(err)
	}
	if err := g.resetState([]int{0}); err != nil {
		t.Fatal(err)
	}
	err = cpupin.OnCPU(0, func() error {
		for i := 0; i < 9; i++ {
			opts := ebpf.RunOptions{Data: tmpl, DataOut: make([]byte, len(tmpl)+256), Repeat: 1}
			if _, err := g.objs.Prog.Run(&opts); err != nil {
				return err
			}
			out := opts.DataOut
			want := uint16(1000 + i%4)
			if s.Mode == Random {
				want = uint16(mix64(uint64(i)))
			}
			if got := binary.BigEndian.Uint16(out[l.l4Off+2:]); got != want || l.src(out) != l.src(tmpl) ||
				binary.BigEndian.Uint16(out[l.l4Off:]) != 53 {
				return fmt.Errorf("frame %d: source %v port %d to port %d, want %v port 53 to %d", i, l.src(out),
					binary.BigEndian.Uint16(out[l.l4Off:]), got, l.src(tmpl), want)
			}
			checkChecksums(t, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
