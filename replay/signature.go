// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"fmt"
	"strings"

	"github.com/xdplimit/xdplimit/policy"
)

// signature is what a frame carries in the signature match fields, as
// gopacket decodes it.
type signature struct {
	length, ttl, tos   int
	icmp               bool
	icmpType, icmpCode uint8
	// The transport payload, when gopacket decoded the transport header
	// and the packet is no fragment.
	payload      []byte
	payloadKnown bool
}

// text names the packet's values of the signature fields a rule's match
// constrains, so that an explanation says why the rule matched: " on
// length 1200, ttl 250". Empty when the match uses none.
func (s signature) text(m policy.Match) string {
	var parts []string
	if len(m.Length) > 0 {
		parts = append(parts, fmt.Sprintf("length %d", s.length))
	}
	if len(m.TTL) > 0 {
		parts = append(parts, fmt.Sprintf("ttl %d", s.ttl))
	}
	if len(m.DSCP) > 0 {
		parts = append(parts, fmt.Sprintf("dscp %d", s.tos>>2))
	}
	if len(m.TOS) > 0 {
		parts = append(parts, fmt.Sprintf("tos %d", s.tos))
	}
	if m.ICMP != nil {
		if s.icmp {
			parts = append(parts, fmt.Sprintf("icmp type %d code %d", s.icmpType, s.icmpCode))
		} else {
			parts = append(parts, "icmp type and code unknown (fragment)")
		}
	}
	if start, _, mask, ok := m.PayloadWindow(); ok {
		parts = append(parts, s.payloadText(start, mask))
	}
	if len(parts) == 0 {
		return ""
	}
	return " on " + strings.Join(parts, ", ")
}

// payloadText shows the packet's bytes in a rule's payload window, up to
// the last byte its mask reads: "payload[0..3] deadbeef".
func (s signature) payloadText(start int, mask [policy.PayloadWindow]byte) string {
	if !s.payloadKnown {
		return "payload unknown (fragment)"
	}
	end := start + policy.PayloadNeed(mask)
	if end > len(s.payload) {
		return fmt.Sprintf("payload of %d bytes", len(s.payload))
	}
	return fmt.Sprintf("payload[%d..%d] %x", start, end-1, s.payload[start:end])
}
