// SPDX-License-Identifier: Apache-2.0

// Package pktgen builds test frames and floods them through a veth at XDP
// rates.
//
// # Frames
//
// Frame describes an Ethernet frame (VLAN tags, IPv4 with options or
// fragmentation, IPv6 with extension headers, UDP, TCP with flags, ICMP)
// and serialises it with gopacket, lengths and checksums correct. UDP4,
// TCP6 and the other short constructors cover the common fixtures for
// BPF_PROG_TEST_RUN; truncated variants are a slice away.
//
// # Generator
//
// trafgen and other AF_PACKET senders are copied into an skb before a
// veth's XDP program sees their frames, so they cannot load XDP. Generator
// instead runs the XDP program xdpl_pktgen with BPF_PROG_TEST_RUN and
// BPF_F_TEST_XDP_LIVE_FRAMES (Linux 5.18): the program returns XDP_TX, and
// the kernel transmits each frame out of the veth given as ingress_ifindex
// straight into the XDP program of the veth's peer. The peer must have an
// XDP program (a limiter, or a Sink): otherwise frames vanish while the
// generator counts them as sent.
//
// How the kernel reuses frame buffers in live-frames mode, as measured on
// Linux 6.18: it keeps a page pool, initialises a page from the template
// only when the page is first allocated, and recycles pages after the peer
// drops or passes the frame. A frame's modifications therefore persist in
// its page. With the peer on the same CPU (the peer's NAPI runs in the
// sender's softirq), exactly KernelBatch pages rotate: 100,000 frames at
// batch size 64 used 64 pages, each 1,563 times, and a counter the program
// incremented inside the frame came back as 1..1563, each value 64 times.
// A program that rotated the source by editing the buffer would thus
// change it once per batch, not once per frame. xdpl_pktgen does not rely
// on the buffer's history at all: it derives each source from a per-CPU
// sequence number and updates the checksums incrementally (RFC 1624) from
// the address actually in the buffer, which is right for a fresh page and a
// recycled one alike.
//
// Every test-run call with Repeat > 1 registers the program in the kernel's
// XDP dispatcher and unregisters it afterwards, each time waiting for an
// RCU grace period: 10-25 ms per call on this VM. Open therefore keeps the
// program attached to an idle veth in a private namespace
// (HoldDispatcher), which makes the kernel skip both updates; other code
// that benchmarks XDP programs with Repeat > 1 can do the same.
//
// The kernel resolves ingress_ifindex in the calling thread's network
// namespace, so Send runs each test run on an OS thread locked into the
// sender's namespace (and pinned to a CPU when asked); such threads are
// never returned to the Go scheduler.
package pktgen
