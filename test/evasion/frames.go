// SPDX-License-Identifier: Apache-2.0

// Package evasion holds the differential tests of xdplimit's parser: a
// seeded generator of adversarial frames sent through the real Linux stack
// (stack_test.go), and a fuzz target comparing the BPF parser with a Go one
// on the same bytes (fuzz_test.go).
package evasion

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"

	"github.com/xdplimit/xdplimit/pktgen"
)

// Target is where generated frames go: the receiving end's MAC and
// addresses, and the destination port of every UDP and TCP packet.
type Target struct {
	SrcMAC, DstMAC net.HardwareAddr
	Dst4, Dst6     netip.Addr
	Port           uint16
	// MaxTags is the most VID-0 tags a frame gets (a third of the frames
	// get 1 to MaxTags); 0 means 3.
	MaxTags int
}

// Gen makes adversarial frames from a seed: the same seed gives the same
// frames in the same order.
type Gen struct {
	r     *rand.Rand
	t     Target
	id    uint32
	clean bool // this IPv6 chain holds only headers the stack accepts
}

func NewGen(seed uint64, t Target) *Gen {
	return &Gen{r: rand.New(rand.NewPCG(seed, 0x65766173)), t: t}
}

func (g *Gen) chance(percent int) bool { return g.r.IntN(100) < percent }

func (g *Gen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return b
}

// Group returns one datagram as the frames that carry it: one frame, or
// its fragments in or out of order. Most are well formed, so that a parser
// that misjudges a deliverable packet shows; a share is damaged (truncated
// at a random offset, wrong length fields, a bad header checksum), so that
// a parser that gives up on the wrong frames shows too.
func (g *Gen) Group() [][]byte {
	v6 := g.chance(50)
	proto := byte(17)
	if g.chance(40) {
		proto = 6
	}
	l4 := g.transport(proto)
	var frames [][]byte
	if v6 {
		frames = g.ipv6(proto, l4)
	} else {
		frames = g.ipv4(proto, l4)
	}
	if len(frames) > 1 && g.chance(50) {
		g.r.Shuffle(len(frames), func(i, j int) { frames[i], frames[j] = frames[j], frames[i] })
	}
	tags, most := 0, g.t.MaxTags
	if most == 0 {
		most = 3
	}
	if g.chance(30) {
		tags = 1 + g.r.IntN(most)
	}
	for i, f := range frames {
		// The tags a 1500-byte MTU leaves room for: a longer frame cannot
		// be sent through the veth at all.
		n := min(tags, max(0, (maxFrame-14-len(f))/4))
		frames[i] = g.damage(g.ether(f, v6, n), v6, n)
	}
	return frames
}

// maxFrame is the longest frame the test's veth (MTU 1500) sends.
const maxFrame = 1514

// transport is a UDP datagram or a TCP segment (never RST: the stack
// answers every other segment to a closed port with a reset, which the
// test counts) with its checksum left 0; ipv4/ipv6 fill it in.
func (g *Gen) transport(proto byte) []byte {
	payload := g.bytes(g.r.IntN(80))
	sport := uint16(1024 + g.r.IntN(60000))
	if proto == 17 {
		h := make([]byte, 8, 8+len(payload))
		binary.BigEndian.PutUint16(h[0:], sport)
		binary.BigEndian.PutUint16(h[2:], g.t.Port)
		binary.BigEndian.PutUint16(h[4:], uint16(8+len(payload)))
		return append(h, payload...)
	}
	opts := 4 * g.r.IntN(4)
	h := make([]byte, 20+opts, 20+opts+len(payload))
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], g.t.Port)
	binary.BigEndian.PutUint32(h[4:], g.r.Uint32())
	binary.BigEndian.PutUint32(h[8:], g.r.Uint32())
	h[12] = byte((20+opts)/4) << 4
	h[13] = byte(g.r.IntN(256)) &^ 0x04 // no RST
	if h[13]&0x12 == 0 {
		h[13] |= 0x02
	}
	binary.BigEndian.PutUint16(h[14:], 1024)
	for i := 20; i < 20+opts; i++ {
		h[i] = 1 // NOP
	}
	return append(h, payload...)
}

// checksum is the Internet checksum of the pseudo header sum plus b.
func checksum(sum uint32, b []byte) uint16 { return pktgen.Checksum(sum, b) }

func pseudoSum(src, dst []byte, proto byte, length int) uint32 {
	var sum uint32
	for _, a := range [][]byte{src, dst} {
		for i := 0; i < len(a); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(a[i:]))
		}
	}
	return sum + uint32(proto) + uint32(length)
}

// setL4Checksum fills the transport checksum for the given addresses.
func setL4Checksum(l4 []byte, proto byte, src, dst []byte) {
	off := 6
	if proto == 6 {
		off = 16
	}
	binary.BigEndian.PutUint16(l4[off:], 0)
	c := checksum(pseudoSum(src, dst, proto, len(l4)), l4)
	if c == 0 && proto == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[off:], c)
}

func (g *Gen) src4() []byte {
	for {
		a := g.r.Uint32()
		top := a >> 24
		if top == 0 || top == 127 || top >= 224 || a>>8 == 198<<16|18<<8 {
			continue
		}
		return binary.BigEndian.AppendUint32(nil, a)
	}
}

// ipv4 builds the packet with random options, fragmented sometimes.
func (g *Gen) ipv4(proto byte, l4 []byte) [][]byte {
	src, dst := g.src4(), g.t.Dst4.AsSlice()
	setL4Checksum(l4, proto, src, dst)
	var opts []byte
	if g.chance(20) {
		opts = make([]byte, 4*(1+g.r.IntN(10)))
		for i := range opts {
			opts[i] = 1 // NOP
		}
		if g.chance(30) {
			opts[len(opts)-1-g.r.IntN(len(opts))] = 0 // EOL: the rest is ignored
		}
	}
	g.id++
	var frames [][]byte
	for _, fr := range g.fragments(len(l4)) {
		h := make([]byte, 20+len(opts))
		h[0] = 0x40 | byte(5+len(opts)/4)
		binary.BigEndian.PutUint16(h[2:], uint16(len(h)+fr.len))
		binary.BigEndian.PutUint16(h[4:], uint16(g.id))
		fo := uint16(fr.off / 8)
		if fr.more {
			fo |= 0x2000
		}
		binary.BigEndian.PutUint16(h[6:], fo)
		h[8], h[9] = 64, proto
		copy(h[12:], src)
		copy(h[16:], dst)
		copy(h[20:], opts)
		binary.BigEndian.PutUint16(h[10:], checksum(0, h))
		frames = append(frames, append(h, l4[fr.off:fr.off+fr.len]...))
	}
	return frames
}

type fragment struct {
	off, len int
	more     bool
}

// fragments splits n bytes: whole most of the time, else into 2 to 4
// pieces on 8-byte boundaries (a first piece of only 8 bytes sometimes, so
// that the transport header spans two fragments).
func (g *Gen) fragments(n int) []fragment {
	if n < 16 || !g.chance(15) {
		return []fragment{{0, n, false}}
	}
	var out []fragment
	off := 0
	for k := 1 + g.r.IntN(3); k > 0 && n-off > 8; k-- {
		size := 8 * (1 + g.r.IntN((n-off-1)/8))
		out = append(out, fragment{off, size, true})
		off += size
	}
	return append(out, fragment{off, n - off, false})
}
