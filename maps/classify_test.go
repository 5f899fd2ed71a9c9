// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// The first matching rule in file order decides, whichever of the rule
// bitmap's words and bits it is in: a policy of every rule the datapath
// holds, rule i on UDP port 1000+i and on some of ten shared ports (so
// that a packet to a shared port matches several rules across the words),
// the last one matching everything. Each packet's recorded rule is the
// lowest index whose ports hold its port.
func TestClassifyFirstMatch(t *testing.T) {
	n := maps.MaxRules
	shared := func(i, j int) bool { return i > 0 && (uint32(i*(j+7))*2654435761)>>27 == (uint32(j)+1)&31 }
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n - 1 {
		ports := []string{fmt.Sprint(1000 + i)}
		for j := range 10 {
			if shared(i, j) {
				ports = append(ports, fmt.Sprint(5000+j))
			}
		}
		fmt.Fprintf(&b, "  - name: r%d\n    match: {protocol: udp, dst_ports: [%s]}\n"+
			"    limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}\n", i, strings.Join(ports, ", "))
	}
	fmt.Fprintf(&b, "  - name: all\n    limit: {algorithm: token_bucket, rate: 1000000/s, burst: 1000000}\n")
	l := loadWith(t, maps.Options{Clock: maps.ClockMap, Record: true}, b.String())
	want := func(port int) int {
		for i := range n - 1 {
			if port == 1000+i || port >= 5000 && port < 5010 && shared(i, port-5000) {
				return i
			}
		}
		return n - 1
	}
	var ports []int
	for i := range n - 1 {
		ports = append(ports, 1000+i)
	}
	for j := range 10 {
		ports = append(ports, 5000+j)
	}
	ports = append(ports, 9999) // only the last rule
	beyond := false             // a shared port's first rule past the first word
	for _, port := range ports {
		frame := pktgen.UDP4(upSrc4, upDst4, 4000, uint16(port), 18)
		if v := xdpltest.Run(t, l, frame, t0); v != xdpPass {
			t.Fatalf("port %d: verdict %d, want pass", port, v)
		}
		d, err := l.LastDecision()
		if err != nil {
			t.Fatal(err)
		}
		if w := want(port); d.Why != maps.WhyRule || d.Rule != w {
			t.Errorf("port %d: %+v, want rule %d", port, d, w)
		}
		beyond = beyond || port >= 5000 && port < 5010 && want(port) >= 64
	}
	if !beyond {
		t.Fatal("no shared port's first rule is past the bitmap's first word: the test proves less than it says")
	}
}
