// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"fmt"
	"hash/fnv"

	"github.com/gopacket/gopacket/layers"
)

// Field is one thing of a packet a fingerprint can pin.
type Field int

const (
	FieldSrcPort Field = iota
	FieldTTL
	FieldLength
	FieldIPID
	FieldDSCP
	FieldTCPFlags
	FieldWindow
	FieldOptions
	// FieldPayload + i is the transport payload's byte i.
	FieldPayload
	numFields = FieldPayload + PayloadBytes
)

var fieldNames = [...]string{"source port", "ttl", "length", "ip id", "dscp", "tcp flags", "tcp window", "tcp options"}

func (f Field) String() string {
	if f >= FieldPayload {
		return fmt.Sprintf("payload[%d]", f-FieldPayload)
	}
	return fieldNames[f]
}

// band is how wide a range of values a field may be pinned to where no one
// value is shared: a tool that draws a TTL or a length from a band is as
// recognisable as one that fixes it. 0: one value only.
func (f Field) band() uint64 {
	switch f {
	case FieldTTL:
		return 15
	case FieldLength:
		return 63
	}
	return 0
}

// value is the field's value in s, and whether s has the field.
func (f Field) value(s *Sample) (uint64, bool) {
	tcp := s.Dst.Proto == layers.IPProtocolTCP
	switch {
	case f == FieldSrcPort:
		return uint64(s.SrcPort), true
	case f == FieldTTL:
		return uint64(s.TTL), true
	case f == FieldLength:
		return uint64(s.Length), true
	case f == FieldIPID:
		return uint64(s.IPID), s.HasIPID
	case f == FieldDSCP:
		return uint64(s.DSCP), true
	case f == FieldTCPFlags:
		return uint64(s.TCPFlags), tcp
	case f == FieldWindow:
		return uint64(s.Window), tcp
	case f == FieldOptions:
		h := fnv.New64a()
		h.Write([]byte(s.Options))
		return h.Sum64(), tcp
	case f >= FieldPayload && f < numFields:
		i := int(f - FieldPayload)
		if i >= len(s.Payload) {
			return 0, false
		}
		return uint64(s.Payload[i]), true
	}
	return 0, false
}

// Predicate pins a field to a value or a band of values.
type Predicate struct {
	Field  Field
	Lo, Hi uint64
	// Text is the value as read (tcp options: their kinds), for a field
	// whose value is a hash.
	Text string
}

func (p Predicate) matches(s *Sample) bool {
	v, ok := p.Field.value(s)
	return ok && v >= p.Lo && v <= p.Hi
}

func (p Predicate) String() string {
	switch {
	case p.Text != "":
		return fmt.Sprintf("%v %s", p.Field, p.Text)
	case p.Field == FieldTCPFlags:
		return fmt.Sprintf("%v %s", p.Field, flagNames(uint8(p.Lo)))
	case p.Field >= FieldPayload:
		return fmt.Sprintf("%v 0x%02x", p.Field, p.Lo)
	case p.Lo == p.Hi:
		return fmt.Sprintf("%v %d", p.Field, p.Lo)
	}
	return fmt.Sprintf("%v %d-%d", p.Field, p.Lo, p.Hi)
}

// tcpFlagNames are the TCP flags by bit, as rules name them.
var tcpFlagNames = [8]string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"}

func flagNames(b uint8) string {
	s := ""
	for i, n := range tcpFlagNames {
		if b&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += n
		}
	}
	if s == "" {
		return "none"
	}
	return s
}
