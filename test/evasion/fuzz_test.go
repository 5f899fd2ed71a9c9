// SPDX-License-Identifier: Apache-2.0

package evasion

import (
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// bpfParse runs the XDP program on a frame under BPF_PROG_TEST_RUN and
// reads what its parser found from the decision record.
func bpfParse(t testing.TB, l *maps.Limiter, frame []byte) Parse {
	t.Helper()
	if _, err := l.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 1}); err != nil {
		t.Fatalf("test run %x: %v", frame, err)
	}
	d, err := l.LastDecision()
	if err != nil {
		t.Fatal(err)
	}
	pp, err := l.LastParse()
	if err != nil {
		t.Fatal(err)
	}
	switch d.Why {
	case maps.WhyNonIP:
		return Parse{NonIP: true, Unparsed: -1, VLAN: pp.VLAN}
	case maps.WhyMalformed:
		return Parse{Unparsed: int(pp.Unparsed), VLAN: -1}
	}
	p := Parse{Unparsed: -1, Family: pp.Family, Proto: pp.Proto, Sport: pp.Sport, Dport: pp.Dport,
		TCPFlags: pp.TCPFlags, VLAN: pp.VLAN, Src: pp.Source, Long: pp.LongChain,
		Payload: pp.Payload, PayloadLen: pp.PayloadLen}
	switch {
	case pp.Ports:
		p.Ports = 1
	case pp.Fragment:
		p.Ports = 2
	}
	return p
}

var (
	fuzzOnce sync.Once
	fuzzLim  *maps.Limiter
)

// The program is loaded once per process: the fuzzer calls the target
// millions of times. It records every decision; no rule, so nothing is
// dropped and the parse alone is compared.
func fuzzLimiter(t *testing.T) *maps.Limiter {
	fuzzOnce.Do(func() {
		// Not t.Cleanup: the limiter outlives this test's first caller.
		fuzzLim = xdpltest.LoadShared(t, maps.Options{Clock: maps.ClockMap, Record: true}, "rules: []\n")
	})
	return fuzzLim
}

// FuzzParser: the BPF parser and RefParse agree on every frame: the same
// classification (family, protocol, ports, flags, source, VLAN), or the same
// reason to give up, or both non-IP.
func FuzzParser(f *testing.F) {
	g := NewGen(7, Target{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		Dst4: netip.MustParseAddr("198.18.0.2"), Dst6: netip.MustParseAddr("2001:2::2"), Port: 9})
	for range 300 {
		for _, fr := range g.Group() {
			f.Add(fr)
		}
	}
	f.Add([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1}) // ARP
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 3000 {
			t.Skip("BPF_PROG_TEST_RUN takes an Ethernet header and one page at most")
		}
		l := fuzzLimiter(t)
		got, want := bpfParse(t, l, frame), RefParse(frame)
		if got != want {
			t.Fatalf("frame %x\nBPF parser: %+v\nreference:  %+v", frame, got, want)
		}
	})
}
