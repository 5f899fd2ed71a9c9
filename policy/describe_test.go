// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"os"
)

func ExamplePolicy_Describe() {
	p, err := Parse("demo.yaml", []byte(`mode: shadow
allow: [192.0.2.0/24]
rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 60000/m, burst: 2k}
    aggregate:
      - key: global
        limit: {algorithm: sliding_window, bytes: 10MB, window: 1s}
  - name: rest
    key: {ipv4_prefix: 24}
    limit: {algorithm: fixed_window, packets: 100, window: 100ms}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	p.SHA256 = [32]byte{} // keep the example stable
	p.Describe(os.Stdout)
	// Output:
	// policy demo.yaml (sha256 0000000000000000)
	// mode: shadow (dry run: nothing is dropped; would-drops are counted)
	// allow: 1 prefix, never limited
	// deny: 0 prefixes, always dropped
	// rules: 2, first match wins
	//   1. dns (line 4): protocol udp, dst_ports [53]
	//      own       key src_ip ipv4/32 ipv6/64: token_bucket 1000 pkt/s burst 2000
	//      aggregate key global: sliding_window 10000000 B per 1s
	//      over limit: shadow
	//   2. rest (line 10): every IP packet
	//      own       key src_ip ipv4/24 ipv6/64: fixed_window 100 pkt per 100ms
	//      over limit: shadow
	// unmatched traffic: pass
	// unparsed frames (truncated, bad lengths or checksum, too many VLAN tags): pass, unlimited
	// non-IP frames (ARP, LLDP, ...): pass
}
