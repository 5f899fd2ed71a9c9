// SPDX-License-Identifier: Apache-2.0

package compiler

import (
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// ipv6ExtHeaders are the protocol numbers the parser walks as IPv6
// extension headers (bpf/parsing_l3.h, xdpl_ipv6_ext). A packet is classified
// with one of them as its protocol only when its transport protocol is
// unknown: a chain longer than the parser's bound, or a fragment whose
// headers continue in the next fragment.
var ipv6ExtHeaders = []int{0, 43, 44, 51, 60, 135, 139, 140, 253, 254}

// compileUnparsed adds to img what the parser's limits need: the unparsed
// section, and the classification of packets whose transport protocol is
// unknown. Those are judged as a non-first fragment is, "as if they
// matched": every rule that can match IPv6 matches their protocol, and a
// rule with tcp_flags matches their (absent) flags, so that adding headers
// never steps around a rule. tcp_flags needs protocol tcp, so the flags
// slot of non-TCP packets can match every rule: the protocol dimension
// already keeps real UDP or ICMP packets out of a tcp rule.
func compileUnparsed(img *maps.Image, p *policy.Policy) error {
	if img.Proto != nil {
		for i, r := range p.Rules {
			if !protoMatchesIPv6(r.Match.Protocol) {
				continue
			}
			for _, nh := range ipv6ExtHeaders {
				maps.SetBit(&img.Proto[256+nh], i)
			}
		}
	}
	if img.TCPFlags != nil {
		for i := range p.Rules {
			maps.SetBit(&img.TCPFlags[maps.TCPFlagIdxNone], i)
		}
	}
	img.Unparsed.Drop = p.Unparsed.Drop
	if l := p.Unparsed.Limit; l != nil && !p.Unparsed.Drop {
		ls, err := compileLevel(policy.Level{Key: policy.Key{Kind: policy.KeyGlobal}, Limit: *l})
		if err != nil {
			return err
		}
		img.Unparsed.Limit = &ls
	}
	return nil
}

// protoMatchesIPv6 says whether a rule's protocol can match an IPv6 packet.
func protoMatchesIPv6(p policy.Protocol) bool {
	for proto := 0; proto < 256; proto++ {
		if protoMatches(p, 1, proto) {
			return true
		}
	}
	return false
}
