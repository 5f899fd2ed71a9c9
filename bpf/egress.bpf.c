// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* xdpl_egress: records the requests this host sends to reflector services,
 * for the reflection guard (conversation.h), which passes a datagram from
 * a reflector's port only as the answer to one of them. Attached to the
 * egress of the interface the limiter guards (a clsact filter), it never
 * changes or drops a packet: it reads the headers of outgoing UDP, and
 * when the destination port is one of the policy's reflector ports and
 * the guard is on, stores the time in xdpl_requests under the answer's
 * addresses and ports (and for DNS the query ID). Its own object
 * (gen.LoadEgress), loaded onto the limiter's maps. */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "xdplimit_consts.h"
#include "xdplimit_structs.h"
#include "xdplimit_maps.h"
#include "counters.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* linux/pkt_cls.h's: let the packet go on unchanged. */
#define TC_ACT_OK 0

/* Set by the loader: XDPL_CLOCK_MAP reads the injected time, as the XDP
 * program does in tests; otherwise bpf_ktime_get_ns, which the XDP side's
 * coarse clock follows to within a tick. */
volatile const __u32 xdpl_clock_mode = XDPL_CLOCK_KTIME;

static __always_inline __u64 xdpl_egress_now(void)
{
	if (xdpl_clock_mode == XDPL_CLOCK_MAP) {
		__u32 zero = 0;
		__u64 *t = bpf_map_lookup_elem(&xdpl_clock, &zero);

		return t ? *t : 0;
	}
	return bpf_ktime_get_ns();
}

/* Whether port is a reflector port of the generation in force, when its
 * guard is on, or else of the other one: a reload writes the next
 * generation before it switches to it, and the requests sent in between
 * must be known when their answers arrive after the switch. */
static __always_inline int xdpl_egress_watched(__u16 port)
{
	__u32 zero = 0;
	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);

	if (!ctl)
		return 0;
	__u32 gen = ctl->active & 1;

	if (!(ctl->gen[gen].flags & XDPL_GF_CONV_REFL))
		gen ^= 1;
	if (!(ctl->gen[gen].flags & XDPL_GF_CONV_REFL))
		return 0;
	__u32 k = gen * XDPL_REFLECTOR_WORDS + (port >> 6);
	__u64 *w = bpf_map_lookup_elem(&xdpl_reflectors, &k);

	return w && (*w >> (port & 63)) & 1;
}

/* Whether the guard of either generation (as above) judges echo replies. */
static __always_inline int xdpl_egress_echo(void)
{
	__u32 zero = 0;
	struct xdpl_control *ctl = bpf_map_lookup_elem(&xdpl_ctl, &zero);

	return ctl && ((ctl->gen[0].flags | ctl->gen[1].flags) & XDPL_GF_CONV_ECHO);
}

static __always_inline void xdpl_record(struct __sk_buff *skb, struct xdpl_request_key *k)
{
	__u64 now = xdpl_egress_now();

	bpf_map_update_elem(&xdpl_requests, k, &now, BPF_ANY);
	xdpl_count(XDPL_C_REQUESTS, skb->len);
}

/* An echo request (ICMP type 8, ICMPv6 128) at l4: recorded under its
 * identifier, when the guard judges echo replies. */
static __always_inline int xdpl_egress_echo_request(struct __sk_buff *skb,
						    struct xdpl_request_key *k, __u32 l4)
{
	__u8 h[6];

	if (bpf_skb_load_bytes(skb, l4, h, sizeof(h)) || h[1] != 0 ||
	    h[0] != (k->proto == IPPROTO_ICMP ? 8 : 128) || !xdpl_egress_echo())
		return TC_ACT_OK;
	k->lport = (__u16)h[4] << 8 | h[5];
	xdpl_record(skb, k);
	return TC_ACT_OK;
}

SEC("tc")
int xdpl_egress(struct __sk_buff *skb)
{
	struct xdpl_request_key k = {};
	__u32 l4;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) ||
		    (ip.protocol != IPPROTO_UDP && ip.protocol != IPPROTO_ICMP) ||
		    (ip.frag_off & bpf_htons(0x3fff)) || ip.ihl < 5)
			return TC_ACT_OK;
		k.family = 4;
		k.proto = ip.protocol;
		k.raddr[0] = ip.daddr;
		k.laddr[0] = ip.saddr;
		l4 = ETH_HLEN + ip.ihl * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip6, sizeof(ip6)) ||
		    (ip6.nexthdr != IPPROTO_UDP && ip6.nexthdr != 58))
			return TC_ACT_OK;
		k.family = 6;
		k.proto = ip6.nexthdr;
		__builtin_memcpy(k.raddr, &ip6.daddr, 16);
		__builtin_memcpy(k.laddr, &ip6.saddr, 16);
		l4 = ETH_HLEN + sizeof(ip6);
	} else {
		return TC_ACT_OK;
	}
	if (k.proto != IPPROTO_UDP)
		return xdpl_egress_echo_request(skb, &k, l4);
	struct udphdr uh;

	if (bpf_skb_load_bytes(skb, l4, &uh, sizeof(uh)))
		return TC_ACT_OK;
	k.rport = bpf_ntohs(uh.dest);
	k.lport = bpf_ntohs(uh.source);
	if (!xdpl_egress_watched(k.rport))
		return TC_ACT_OK;
	if (k.rport == 53) {
		__be16 id;

		if (bpf_skb_load_bytes(skb, l4 + sizeof(uh), &id, 2))
			return TC_ACT_OK;
		k.dns_id = bpf_ntohs(id);
	}
	xdpl_record(skb, &k);
	return TC_ACT_OK;
}
