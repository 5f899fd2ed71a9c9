// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/gopacket/gopacket/layers"
)

// matchable: whether a policy rule's match can pin p: the header fields
// below, and a payload byte of one value (payload matches compare bytes
// under a mask, not ranges).
func (p Predicate) matchable() bool {
	if p.Field >= FieldPayload {
		return p.Lo == p.Hi && p.Text == ""
	}
	switch p.Field {
	case FieldSrcPort, FieldTTL, FieldLength, FieldDSCP, FieldTCPFlags:
		return true
	}
	return false
}

// Matchable is the part of f's predicates a rule can match, and the rest.
func (f Fingerprint) Matchable() (in, out []Predicate) {
	for _, p := range f.Preds {
		if p.matchable() {
			in = append(in, p)
		} else {
			out = append(out, p)
		}
	}
	return in, out
}

// Share is the share of samples that every predicate matches.
func Share(samples []Sample, preds []Predicate) float64 {
	if len(samples) == 0 {
		return 0
	}
	return float64(count(samples, preds)) / float64(len(samples))
}

// Rule writes f as a policy rule (one item of rules:, YAML) named name
// that holds what it matches to rate packets per second in all. The
// predicates a rule cannot match are left out: the rule then matches
// more than f (Share of the normal traffic tells how much more).
func (f Fingerprint) Rule(name string, rate uint64) string {
	in, _ := f.Matchable()
	proto := strings.ToLower(f.Dest.Proto.String())
	bits := 32
	if f.Dest.Addr.Is6() {
		bits = 128
	}
	m := []string{"protocol: " + proto, fmt.Sprintf("dst_cidrs: [%s]", netip.PrefixFrom(f.Dest.Addr, bits)),
		fmt.Sprintf("dst_ports: [%d]", f.Dest.Port)}
	for _, p := range in {
		switch p.Field {
		case FieldSrcPort:
			m = append(m, fmt.Sprintf("src_ports: [%s]", span(p)))
		case FieldTTL, FieldLength, FieldDSCP:
			m = append(m, fmt.Sprintf("%s: %s", p.Field, span(p)))
		case FieldTCPFlags:
			if f.Dest.Proto == layers.IPProtocolTCP {
				m = append(m, "tcp_flags: ["+flagList(uint8(p.Lo))+"]")
			}
		}
	}
	if items := payloadItems(in); items != "" {
		m = append(m, "payload: ["+items+"]")
	}
	rate = max(rate, 1)
	return fmt.Sprintf(`  - name: %s
    match: {%s}
    key: global
    limit: {algorithm: token_bucket, rate: %d/s, burst: %d}
`, name, strings.Join(m, ", "), rate, rate)
}

func span(p Predicate) string {
	if p.Lo == p.Hi {
		return fmt.Sprint(p.Lo)
	}
	return fmt.Sprintf("%d-%d", p.Lo, p.Hi)
}

// flagList pins every TCP flag to b: set ones by name, clear ones with !.
func flagList(b uint8) string {
	out := make([]string, len(tcpFlagNames))
	for i, n := range tcpFlagNames {
		if b&(1<<i) != 0 {
			out[i] = n
		} else {
			out[i] = `"!` + n + `"`
		}
	}
	return strings.Join(out, ", ")
}

// payloadItems writes the payload bytes among preds as payload match items,
// one per run of consecutive offsets: {offset: 2, bytes: "0100"}. The
// samples keep PayloadBytes of payload, the window one rule's items may
// span.
func payloadItems(preds []Predicate) string {
	var bytes []Predicate
	for _, p := range preds {
		if p.Field >= FieldPayload {
			bytes = append(bytes, p)
		}
	}
	slices.SortFunc(bytes, func(a, b Predicate) int { return cmp.Compare(a.Field, b.Field) })
	var items []string
	for i := 0; i < len(bytes); {
		j := i + 1
		for j < len(bytes) && bytes[j].Field == bytes[j-1].Field+1 {
			j++
		}
		hex := ""
		for _, p := range bytes[i:j] {
			hex += fmt.Sprintf("%02x", p.Lo)
		}
		items = append(items, fmt.Sprintf(`{offset: %d, bytes: "%s"}`, bytes[i].Field-FieldPayload, hex))
		i = j
	}
	return strings.Join(items, ", ")
}
