// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// returnSink is the XDP program on F's end of the listener's veth: it
// drops IPv4 frames to the forged sources' 10.0.0.0/8, counting them (and
// the TCP resets among them) and keeping the headers of the last, and
// passes everything else.
type returnSink struct {
	prog  *ebpf.Program
	count *ebpf.Map // per-CPU: slot 0 frames dropped, slot 1 the resets of them
	last  *ebpf.Map // one slot: the first lastBytes of the last one
}

// lastBytes of a frame the sink keeps: Ethernet, an IPv4 header without
// options and a TCP header up to its flags, or an ICMP header.
const lastBytes = 48

func attachReturnSink(t *testing.T, ns *testutil.Netns, ifname string) *returnSink {
	t.Helper()
	var err error
	s := &returnSink{}
	s.count, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.count.Close() })
	s.last, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: lastBytes, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.last.Close() })
	s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xdpl_return", Type: ebpf.XDP, License: "Dual BSD/GPL",
		Instructions: s.instructions(),
	})
	if err != nil {
		t.Fatalf("return sink: %v", err)
	}
	t.Cleanup(func() { s.prog.Close() })
	err = ns.Do(func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		lk, err := link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode})
		if err == nil {
			t.Cleanup(func() { lk.Close() })
		}
		return err
	})
	if err != nil {
		t.Fatalf("attaching the return sink to %s: %v", ifname, err)
	}
	return s
}

// instructions are the sink's program. The frame's start and end stay in
// R6 and R7, which the helper calls keep.
func (s *returnSink) instructions() asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.Word), // data
		asm.LoadMem(asm.R7, asm.R1, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R6),
		asm.Add.Imm(asm.R4, 14+20),
		asm.JGT.Reg(asm.R4, asm.R7, "pass"),
		asm.LoadMem(asm.R5, asm.R6, 12, asm.Half),
		asm.JNE.Imm(asm.R5, 0x0008, "pass"), // ETH_P_IP, loaded little-endian
		asm.LoadMem(asm.R5, asm.R6, 14+16, asm.Byte),
		asm.JNE.Imm(asm.R5, 10, "pass"), // the destination's first byte
	}
	insns = append(insns, s.countIn(0, "drop")...)
	insns = append(insns,
		// A TCP reset (the listener's IPv4 header has no options): slot 1.
		asm.Mov.Reg(asm.R4, asm.R6),
		asm.Add.Imm(asm.R4, 14+20+14),
		asm.JGT.Reg(asm.R4, asm.R7, "headers"),
		asm.LoadMem(asm.R5, asm.R6, 14+9, asm.Byte),
		asm.JNE.Imm(asm.R5, 6, "headers"), // IPPROTO_TCP
		asm.LoadMem(asm.R5, asm.R6, 14+20+13, asm.Byte),
		asm.And.Imm(asm.R5, 0x04), // RST
		asm.JEq.Imm(asm.R5, 0, "headers"),
	)
	insns = append(insns, s.countIn(1, "headers")...)
	insns = append(insns,
		// The headers, when the frame has lastBytes (two CPUs may write
		// at once: a torn copy only garbles a diagnostic).
		asm.StoreImm(asm.RFP, -4, 0, asm.Word).WithSymbol("headers"),
		asm.Mov.Reg(asm.R4, asm.R6),
		asm.Add.Imm(asm.R4, lastBytes),
		asm.JGT.Reg(asm.R4, asm.R7, "drop"),
		asm.LoadMapPtr(asm.R1, s.last.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "drop"),
	)
	for off := int16(0); off < lastBytes; off += 8 {
		insns = append(insns, asm.LoadMem(asm.R1, asm.R6, off, asm.DWord), asm.StoreMem(asm.R0, off, asm.R1, asm.DWord))
	}
	return append(insns,
		asm.Mov.Imm(asm.R0, 1).WithSymbol("drop"), // XDP_DROP
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
		asm.Return(),
	)
}

// countIn adds one to this CPU's slot of the counter, going to miss when
// the lookup fails (it never does); the frame stays in R6 and R7.
func (s *returnSink) countIn(slot int32, miss string) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, -4, int64(slot), asm.Word),
		asm.LoadMapPtr(asm.R1, s.count.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, miss),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord), // per-CPU: no other CPU writes it
	}
}

// dropped is the number of frames to forged sources the sink dropped.
func (s *returnSink) dropped(t *testing.T) uint64 {
	t.Helper()
	return s.counted(t, 0)
}

// resets is the number of TCP resets among them.
func (s *returnSink) resets(t *testing.T) uint64 {
	t.Helper()
	return s.counted(t, 1)
}

func (s *returnSink) counted(t *testing.T, slot uint32) uint64 {
	t.Helper()
	var per []uint64
	if err := s.count.Lookup(slot, &per); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// lastFrame describes the last frame to a forged source the sink dropped:
// its addresses, protocol and, for TCP, ports and flags.
func (s *returnSink) lastFrame(t *testing.T) string {
	t.Helper()
	b := make([]byte, lastBytes)
	if err := s.last.Lookup(uint32(0), &b); err != nil {
		t.Fatal(err)
	}
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil {
		return fmt.Sprintf("%x (no IPv4 header)", b)
	}
	desc := fmt.Sprintf("%v > %v %v", ip.SrcIP, ip.DstIP, ip.Protocol)
	// Read by hand: the kept bytes end inside the TCP header (after its
	// flags), which gopacket's TCP layer refuses as truncated.
	if ip.Protocol == layers.IPProtocolTCP && len(ip.Payload) >= 14 {
		p := ip.Payload
		desc += fmt.Sprintf(" %d > %d flags %#02x", uint16(p[0])<<8|uint16(p[1]), uint16(p[2])<<8|uint16(p[3]), p[13])
	}
	return desc
}
