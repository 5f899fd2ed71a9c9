// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
)

// The rings of sampled drops are read through a mapping of
// xdpl_drop_samples of this process's own, not through ebpf.Memory: every
// word of a sample is loaded with sync/atomic, which ebpf.Memory's copy
// cannot do.
//
// The datapath publishes each sample as a seqlock (bpf/account.h,
// xdpl_sample): seq cleared, the fields written, seq set to the sample's
// index + 1, the two seq stores fully ordered atomic exchanges. A reader
// keeps a sample only if seq, loaded before and after the fields, is the
// index it wants both times. On x86 every load is ordered after the loads
// before it anyway; on arm64 a plain load is not, and a copy (ReadAt, or
// the kernel's copy behind a map lookup) may read a field before seq, or
// seq before a field, and keep a sample half written. Go's atomic loads are
// sequentially consistent (the memory model), and on arm64 each is an LDAR,
// which no later load of this goroutine passes: seq, the fields and seq
// again are read in that order. The heads, read with a map lookup (a plain
// copy in the kernel, in no order with these loads), only say how far to
// look: a sample they count whose seq is not there yet is read next time.
type ringView struct {
	once sync.Once
	// mu keeps Close from unmapping the samples while a reader is in
	// them (read holds it shared).
	mu     sync.RWMutex
	mem    []byte
	err    error
	closed bool
}

// A sample is 64 bytes (bpf/xdplimit_structs.h asserts it too): eight
// 64-bit words, 8-byte aligned in the map (array values are). These two
// fail to compile if the generated struct is any other size.
const dropSampleWords = 8

var (
	_ [unsafe.Sizeof(gen.XdplimitXdplDropSample{}) - 8*dropSampleWords]byte
	_ [8*dropSampleWords - unsafe.Sizeof(gen.XdplimitXdplDropSample{})]byte
)

// dropSeqWord is the word of seq.
const dropSeqWord = unsafe.Offsetof(gen.XdplimitXdplDropSample{}.Seq) / 8

// readDrops calls fn with xdpl_drop_samples mapped read-only (mapped
// once per Limiter, on first use).
func (l *Limiter) readDrops(fn func(mem []byte)) error {
	return l.readView(&l.drops, l.objs.XdplDropSamples, 8*dropSampleWords, "drop samples", fn)
}

// readView calls fn with m, a ring of samples of size bytes each, mapped
// read-only through v (mapped once per Limiter, on first use).
func (l *Limiter) readView(v *ringView, m *ebpf.Map, size uint32, what string, fn func(mem []byte)) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.closed {
		return fmt.Errorf("reading the %s: the limiter is closed", what)
	}
	v.once.Do(func() {
		if m.ValueSize() != size {
			v.err = fmt.Errorf("%s of %d bytes, want %d", what, m.ValueSize(), size)
			return
		}
		n := int(m.MaxEntries()) * int(m.ValueSize())
		v.mem, v.err = unix.Mmap(m.FD(), 0, n, unix.PROT_READ, unix.MAP_SHARED)
		if v.err != nil {
			v.err = fmt.Errorf("mapping the %s: %w", what, v.err)
		}
	})
	if v.err != nil {
		return v.err
	}
	fn(v.mem)
	return nil
}

// closeDropMem unmaps what the readers mapped, once no reader is in it.
func (l *Limiter) closeDropMem() {
	for _, v := range []*ringView{&l.drops, &l.traffic} {
		v.mu.Lock()
		v.closed = true
		if v.mem != nil {
			unix.Munmap(v.mem)
			v.mem = nil
		}
		v.mu.Unlock()
	}
}

// slotState is what a reader finds in a ring's slot.
type slotState int

const (
	slotRead        slotState = iota // the sample it wanted, whole
	slotNotYet                       // an older sample, or one being written: the wanted one is not published yet
	slotOverwritten                  // a newer sample, or the wanted one overwritten while it was read
)

// readSlot reads the drop sample of ring index i from slot (the map's
// index) of mem, a mapping of xdpl_drop_samples, into rec.
func readSlot(mem []byte, slot, i uint64, rec *gen.XdplimitXdplDropSample) slotState {
	return readSlotWords(mem, dropSeqWord, slot, i, unsafe.Slice((*uint64)(unsafe.Pointer(rec)), dropSampleWords))
}

// readSlotWords reads the sample of ring index i from slot of mem, a
// mapping of an array of samples of len(dst) 64-bit words whose word
// seqWord is its seq, into dst.
func readSlotWords(mem []byte, seqWord uintptr, slot, i uint64, dst []uint64) slotState {
	n := uint64(len(dst))
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[slot*8*n])), n)
	want := i + 1
	seq := atomic.LoadUint64(&words[seqWord])
	switch {
	case seq == 0 || seq < want:
		return slotNotYet
	case seq > want:
		return slotOverwritten
	}
	// Word by word into dst: the struct's layout is the map's (bpf2go's
	// HostLayout), and the words are in memory order whatever the
	// endianness.
	for k := range words {
		dst[k] = atomic.LoadUint64(&words[k])
	}
	if atomic.LoadUint64(&words[seqWord]) != want {
		return slotOverwritten
	}
	return slotRead
}

// readRing appends to recs the drop samples of one CPU's ring (its slots
// start at base, size of them) from ring index from up to head, in order.
// It returns the index to read from next time: head, or the first sample
// counted in head whose seq was not there yet.
func readRing(mem []byte, base, size, from, head uint64, recs []gen.XdplimitXdplDropSample) ([]gen.XdplimitXdplDropSample, uint64) {
	var rec gen.XdplimitXdplDropSample
	next := readRingWords(mem, dropSeqWord, base, size, from, head,
		unsafe.Slice((*uint64)(unsafe.Pointer(&rec)), dropSampleWords), func() { recs = append(recs, rec) })
	return recs, next
}

// readRingWords reads one CPU's ring of samples of len(dst) words into
// dst, calling keep after each whole one, as readRing does.
func readRingWords(mem []byte, seqWord uintptr, base, size, from, head uint64, dst []uint64, keep func()) uint64 {
	for i := from; i < head; i++ {
		switch readSlotWords(mem, seqWord, base+i%size, i, dst) {
		case slotRead:
			keep()
		case slotNotYet:
			return i
		}
	}
	return head
}

// readRings reads each CPU's ring of size samples, from cursor (what the
// previous read returned; nil the first time) up to the CPU's head, with
// read(cpu, start, head), which returns where to start next time. It
// returns how many samples the CPUs wrote since cursor, and the next
// cursor.
func readRings(heads []gen.XdplimitXdplDropRing, cursor []uint64, size uint64,
	read func(cpu int, start, head uint64) uint64) (written uint64, next []uint64) {
	next = make([]uint64, len(heads))
	for cpu, h := range heads {
		var from uint64
		if cpu < len(cursor) {
			from = cursor[cpu]
		}
		if h.Written < from { // the maps were recreated
			from = 0
		}
		// The oldest slot is the one the datapath writes next, before
		// it counts it: a reader keeps at most size-1 samples.
		start := max(from, h.Written-min(h.Written, size-1))
		next[cpu] = read(cpu, start, h.Written)
		written += next[cpu] - from
	}
	return written, next
}
