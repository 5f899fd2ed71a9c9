// SPDX-License-Identifier: Apache-2.0

package netns

import "testing"

func TestParseSNMP(t *testing.T) {
	in := "Ip: Forwarding DefaultTTL InReceives\nIp: 2 64 42\nUdp: InDatagrams NoPorts\nUdp: 7 3\n"
	out := map[string]uint64{}
	if err := parseSNMP([]byte(in), out); err != nil {
		t.Fatal(err)
	}
	if out["Ip.InReceives"] != 42 || out["Udp.NoPorts"] != 3 || out["Udp.InDatagrams"] != 7 {
		t.Fatalf("parsed %v", out)
	}
	if err := parseSNMP([]byte("Ip: A B\nIp: 1\n"), out); err == nil {
		t.Fatal("mismatched lines accepted")
	}
	out6 := map[string]uint64{}
	if err := parseSNMP6([]byte("Ip6InReceives   \t 12\nUdp6NoPorts 4\n"), out6); err != nil {
		t.Fatal(err)
	}
	c := Counters{Raw: out6}
	c.fillFields()
	if c.IP6InReceives != 12 || c.UDP6NoPorts != 4 {
		t.Fatalf("parsed %+v", c)
	}
	d := c.Delta(Counters{Raw: map[string]uint64{"Ip6InReceives": 10, "Udp6NoPorts": 9}})
	if d.IP6InReceives != 2 || d.UDP6NoPorts != 0 {
		t.Fatalf("delta %+v", d)
	}
}
