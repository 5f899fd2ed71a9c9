// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/xdplimit/xdplimit/gen"
)

// ringMem is a fake xdpl_drop_samples of one CPU's ring, written as the
// datapath writes it: publish stores a sample whole, with its seq.
type ringMem []byte

// newRingMem makes a ringMem of n samples, 8-byte aligned as the map's
// mapping is: a []byte may sit anywhere (on the stack, at any byte), and an
// atomic load of an unaligned word faults on arm64.
func newRingMem(n int) ringMem {
	words := make([]uint64, n*dropSampleWords)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

func (m ringMem) put(slot uint64, seq uint64, sport uint16) {
	b := m[slot*64 : (slot+1)*64]
	clear(b)
	binary.NativeEndian.PutUint16(b[40:], sport)
	binary.NativeEndian.PutUint64(b[8*dropSeqWord:], seq)
}

// publish writes the sample of ring index i (its source port numbers it).
func (m ringMem) publish(size, i uint64) { m.put(i%size, i+1, uint16(1000+i)) }

func ports(recs []gen.XdplimitXdplDropSample) []uint16 {
	var p []uint16
	for _, r := range recs {
		p = append(p, r.Sport)
	}
	return p
}

// A sample the head counts but whose seq is not there yet is left for the
// next read, and read then; the ones before it are read.
func TestReadRingWaitsForAPublishedSample(t *testing.T) {
	const size = 4
	mem := newRingMem(size)
	for i := range uint64(3) {
		mem.publish(size, i)
	}
	// Index 3: the head already says 4 (a reader on arm64 may see it
	// first), its slot is still empty: seq 0.
	recs, next := readRing(mem, 0, size, 0, 4, nil)
	if got := ports(recs); len(got) != 3 || got[0] != 1000 || got[2] != 1002 || next != 3 {
		t.Fatalf("read %v, next %d: want ports 1000-1002 and next 3", got, next)
	}
	// Being overwritten: seq cleared by the datapath.
	mem.publish(size, 3)
	mem.put(0, 0, 9999) // index 4 in progress in slot 0
	recs, next = readRing(mem, 0, size, 3, 5, nil)
	if got := ports(recs); len(got) != 1 || got[0] != 1003 || next != 4 {
		t.Fatalf("read %v, next %d: want port 1003 and next 4", got, next)
	}
	// An older lap's sample in the slot: not published yet either.
	mem.publish(size, 1) // slot 1 holds index 1; index 5 is wanted
	if _, next = readRing(mem, 0, size, 5, 6, nil); next != 5 {
		t.Fatalf("a slot of the previous lap: next %d, want 5", next)
	}
}

// A sample overwritten before it was read is skipped, not returned as the
// newer one, and the read goes on.
func TestReadRingSkipsOverwritten(t *testing.T) {
	const size = 4
	mem := newRingMem(size)
	for i := range uint64(6) {
		mem.publish(size, i) // 4 and 5 overwrote 0 and 1
	}
	recs, next := readRing(mem, 0, size, 0, 6, nil)
	got := ports(recs)
	if len(got) != 4 || got[0] != 1002 || got[3] != 1005 || next != 6 {
		t.Fatalf("read %v, next %d: want ports 1002-1005 and next 6", got, next)
	}
}

// readSlot takes every field where the datapath's struct has it.
func TestReadSlotLayout(t *testing.T) {
	mem := newRingMem(2)
	want := gen.XdplimitXdplDropSample{Saddr: [4]uint32{1, 2, 3, 4}, Daddr: [4]uint32{5, 6, 7, 8}, Len: 60,
		Family: 4, Verdict: 1, Slot: 3, Sport: 4000, Dport: 53, Iplen: 28, Proto: 17, Ttl: 64, Level: 2,
		Ports: 1, TcpFlags: 0x12, Tos: 0x10, Seq: 8}
	b, err := binary.Append(nil, binary.NativeEndian, want)
	if err != nil {
		t.Fatal(err)
	}
	copy(mem[64:], b)
	var got gen.XdplimitXdplDropSample
	if st := readSlot(mem, 1, 7, &got); st != slotRead || got != want {
		t.Fatalf("readSlot: %v %+v, want %+v", st, got, want)
	}
	if st := readSlot(mem, 1, 8, &got); st != slotNotYet {
		t.Errorf("seq 8 read as index 8: %v, want not yet", st)
	}
	if st := readSlot(mem, 1, 6, &got); st != slotOverwritten {
		t.Errorf("seq 8 read as index 6: %v, want overwritten", st)
	}
}
