// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/model"
)

// FuzzParse checks that Parse never panics, that every rejection is an
// ErrorList of positioned errors, and that every accepted policy is within
// the ranges the datapath can represent.
//
//	go test -fuzz=FuzzParse ./policy
func FuzzParse(f *testing.F) {
	examples, _ := filepath.Glob("../examples/*.yaml")
	seeds, _ := filepath.Glob("testdata/*.yaml")
	for _, name := range append(examples, seeds...) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"rules: []",
		"rules: [{name: a, limit: {algorithm: token_bucket, rate: 1/s, burst: 1}}]",
		"allow: {files: [good.netset, bad.netset]}\ndeny: [10.0.0.0/8]",
		"x-base: &b {algorithm: fixed_window, packets: 1, window: 1s}\nrules: [{name: a, limit: *b}]",
		"rules:\n  - name: s\n    match: {protocol: tcp, tcp_flags: [syn, \"!ack\"]}\n    limit: {algorithm: token_bucket, rate: 8Mbit/s, burst: 64KB}",
		kitchenSink,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	for name, text := range map[string]string{
		"good.netset": "# ok\n10.0.0.0/8\n2001:db8::/32\n",
		"bad.netset":  "10.0.0.0/8\nnot-an-address\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	path := filepath.Join(dir, "p.yaml")

	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(path, data)
		if err != nil {
			if p != nil {
				t.Fatal("a rejected policy came with a Policy")
			}
			checkErrorList(t, path, err)
			return
		}
		checkPolicy(t, p)
		p.Describe(io.Discard)
	})
}

func checkErrorList(t *testing.T, path string, err error) {
	t.Helper()
	var list ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("error is %T, not a non-empty ErrorList: %v", err, err)
	}
	for _, e := range list {
		if e.File == "" || e.Line < 1 || e.Column < 1 || e.Msg == "" {
			t.Fatalf("error without a position or message: %#v", e)
		}
	}
	less := func(a, b *Error) int {
		return comparePos(path, located{a.File, a.Line, a.Column, a.Field, a.Msg}, located{b.File, b.Line, b.Column, b.Field, b.Msg})
	}
	if !slices.IsSortedFunc(list, less) {
		t.Fatalf("errors not sorted by position:\n%v", err)
	}
}

// checkPolicy asserts what the compiler relies on: every value in range.
func checkPolicy(t *testing.T, p *Policy) {
	t.Helper()
	if len(p.Rules) > maxRules {
		t.Fatalf("%d rules", len(p.Rules))
	}
	for _, w := range p.Warnings {
		if w.Line < 1 || w.Column < 1 || w.File == "" {
			t.Fatalf("warning without a position: %#v", w)
		}
	}
	for _, ps := range [][]netip.Prefix{p.Allow, p.Deny} {
		for i, q := range ps {
			if q != q.Masked() || q.Addr().Is4In6() || q.Addr().Zone() != "" || i > 0 && comparePrefix(ps[i-1], q) >= 0 {
				t.Fatalf("allow/deny not normalised, sorted and deduplicated: %v", ps)
			}
		}
	}
	names := map[string]bool{}
	for _, r := range p.Rules {
		if !nameRE.MatchString(r.Name) || names[r.Name] {
			t.Fatalf("bad or duplicate rule name %q", r.Name)
		}
		names[r.Name] = true
		if r.Line < 1 {
			t.Fatalf("rule %s without a line", r.Name)
		}
		if p.Mode == ModeShadow && r.Action != ActionShadow {
			t.Fatalf("rule %s drops in shadow mode", r.Name)
		}
		checkMatch(t, r)
		if len(r.Levels) < 1 || len(r.Levels) > maxAggregate+1 {
			t.Fatalf("rule %s has %d levels", r.Name, len(r.Levels))
		}
		for _, l := range r.Levels {
			checkLevel(t, r, l)
		}
	}
}

func checkMatch(t *testing.T, r Rule) {
	t.Helper()
	m := r.Match
	if (len(m.SrcPorts) > 0 || len(m.DstPorts) > 0) && !m.Protocol.hasPorts() {
		t.Fatalf("rule %s: ports without tcp or udp", r.Name)
	}
	if m.ICMP != nil && m.Protocol != ProtoICMP && m.Protocol != ProtoICMPv6 {
		t.Fatalf("rule %s: icmp without protocol icmp or icmpv6", r.Name)
	}
	if len(m.DSCP) > 0 && len(m.TOS) > 0 {
		t.Fatalf("rule %s: both dscp and tos", r.Name)
	}
	if m.TCPFlags != nil && (m.Protocol != ProtoTCP || m.TCPFlags.Set&m.TCPFlags.Clear != 0) {
		t.Fatalf("rule %s: bad tcp flags %+v", r.Name, *m.TCPFlags)
	}
	checkPayload(t, r)
	for _, v := range m.VLANs {
		if v > 4095 {
			t.Fatalf("rule %s: vlan %d", r.Name, v)
		}
	}
	for _, ps := range [][]netip.Prefix{m.SrcCIDRs, m.DstCIDRs} {
		for _, q := range ps {
			if q != q.Masked() || q.Addr().Is4In6() {
				t.Fatalf("rule %s: prefix %s not normalised", r.Name, q)
			}
		}
	}
	for _, rs := range [][]PortRange{m.SrcPorts, m.DstPorts} {
		for i, pr := range rs {
			if pr.Lo > pr.Hi || i > 0 && int(rs[i-1].Hi)+1 >= int(pr.Lo) {
				t.Fatalf("rule %s: port ranges not merged: %v", r.Name, rs)
			}
		}
	}
}

// checkPayload asserts what the compiler relies on for payload items:
// sorted, in range, masked, within one window, a mask with a bit set.
func checkPayload(t *testing.T, r Rule) {
	t.Helper()
	m := r.Match
	for i, it := range m.Payload {
		if it.Offset < 0 || it.Offset > MaxPayloadOffset || len(it.Bytes) < 1 || len(it.Bytes) > PayloadWindow ||
			len(it.Mask) != len(it.Bytes) || i > 0 && m.Payload[i-1].Offset > it.Offset {
			t.Fatalf("rule %s: payload item %+v out of range or order", r.Name, it)
		}
		for j, b := range it.Bytes {
			if b&^it.Mask[j] != 0 {
				t.Fatalf("rule %s: payload item %+v not masked", r.Name, it)
			}
		}
		if it.Offset+len(it.Bytes) > m.Payload[0].Offset+PayloadWindow {
			t.Fatalf("rule %s: payload %+v wider than %d bytes", r.Name, m.Payload, PayloadWindow)
		}
	}
	if _, _, mask, ok := m.PayloadWindow(); ok && mask == [PayloadWindow]byte{} {
		t.Fatalf("rule %s: payload mask all zero", r.Name)
	}
}

func checkLevel(t *testing.T, r Rule, l Level) {
	t.Helper()
	k := l.Key
	switch k.Kind {
	case KeyGlobal:
		if k.IPv4Prefix != 0 || k.IPv6Prefix != 0 {
			t.Fatalf("rule %s: global key with prefixes", r.Name)
		}
	case KeySrcIP, KeySrcIPDstPort, KeySrcIPSrcPort:
		if k.IPv4Prefix < 1 || k.IPv4Prefix > 32 || k.IPv6Prefix < 1 || k.IPv6Prefix > 128 {
			t.Fatalf("rule %s: key %v", r.Name, k)
		}
		if k.Kind.hasPort() && !r.Match.Protocol.hasPorts() {
			t.Fatalf("rule %s: port key without ports", r.Name)
		}
	default:
		t.Fatalf("rule %s: key kind %d", r.Name, k.Kind)
	}
	lim := l.Limit
	if lim.Unit != Packets && lim.Unit != Bytes {
		t.Fatalf("rule %s: unit %d", r.Name, lim.Unit)
	}
	switch lim.Algorithm {
	case TokenBucket:
		if lim.Count == 0 || lim.Per <= 0 || lim.Per%time.Second != 0 || lim.Window != 0 {
			t.Fatalf("rule %s: token bucket %+v", r.Name, lim)
		}
		// Count/Per within 1/h .. max, compared without overflow in float:
		// the bounds are far from float64's precision limits.
		perSec := float64(lim.Count) / lim.Per.Seconds()
		maxRate := float64(maxPacketRate)
		if lim.Unit == Bytes {
			maxRate = maxByteRate
		}
		if perSec < 1.0/3600*(1-1e-9) || perSec > maxRate*(1+1e-9) {
			t.Fatalf("rule %s: rate %v out of range", r.Name, lim)
		}
		if lim.Burst < 1 || lim.Burst > maxBurst {
			t.Fatalf("rule %s: burst %d", r.Name, lim.Burst)
		}
	case FixedWindow, SlidingWindow:
		if lim.Count < 1 || lim.Count > maxWindowCount || lim.Window < minWindow || lim.Window > maxWindow || lim.Per != 0 || lim.Burst != 0 {
			t.Fatalf("rule %s: window %+v", r.Name, lim)
		}
	case SlidingLog:
		if lim.Unit != Packets || lim.Count < 1 || lim.Count > model.LogMax || lim.Window < minWindow || lim.Window > maxWindow || lim.Per != 0 || lim.Burst != 0 {
			t.Fatalf("rule %s: sliding log %+v", r.Name, lim)
		}
	default:
		t.Fatalf("rule %s: algorithm %d", r.Name, lim.Algorithm)
	}
}

// kitchenSink uses every field of the language once, to give the fuzzer a
// start from which every decoder is one mutation away.
const kitchenSink = `version: 1
mode: shadow
defaults:
  key: {type: src_ip, ipv4_prefix: 32, ipv6_prefix: 64}
  action: drop
x-lim: &lim {algorithm: sliding_window, bytes: 10MB, window: 100ms}
allow:
  cidrs: [192.0.2.0/24, "2001:db8::/32"]
  files: [good.netset]
deny: [10.1.0.0/16, 198.51.100.7]
rules:
  - name: syn
    match:
      protocol: tcp
      dst_ports: [80, 443, 8000-8999]
      src_ports: [1024-65535]
      src_cidrs: [0.0.0.0/0, ::/0]
      dst_cidrs: [203.0.113.0/24]
      tcp_flags: [syn, "!rst"]
      vlan: [100, 200]
    key: {type: src_ip+dst_port, ipv4_prefix: 24}
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}
    action: shadow
    aggregate:
      - key: {ipv4_prefix: 16, ipv6_prefix: 48}
        limit: *lim
      - key: global
        limit: {algorithm: fixed_window, packets: 1M, window: 1s}
  - name: udp
    match: {protocol: udp, payload: [{offset: 0, bytes: "deadbeef"}, {offset: 6, bytes: 0100, mask: ff0f}]}
    key: src_ip
    limit: {algorithm: token_bucket, rate: 1.5Gbit/s, burst: 1MB}
  - name: icmp
    match: {protocol: icmp, src_cidrs: [10.0.0.1/8]}
    limit: {algorithm: fixed_window, packets: 10, window: 1m}
  - name: rest
    key: global
    limit: {algorithm: token_bucket, rate: 1/h, burst: 1}
`

// TestKitchenSink keeps the fuzzer's richest seed a valid policy.
func TestKitchenSink(t *testing.T) {
	dir := writeFiles(t, map[string]string{"good.netset": "198.51.100.0/24\n"})
	p, err := Parse(filepath.Join(dir, "p.yaml"), []byte(kitchenSink))
	if err != nil {
		t.Fatal(err)
	}
	checkPolicy(t, p)
	if len(p.Rules) != 4 || len(p.Rules[0].Levels) != 3 {
		t.Fatalf("%d rules", len(p.Rules))
	}
}
