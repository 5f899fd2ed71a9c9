// SPDX-License-Identifier: Apache-2.0

// Package bpfprof samples where a thread's CPU time goes while it runs a
// BPF program with BPF_PROG_TEST_RUN, and names each sample's place: a
// source line of the program (from its BTF line info and the addresses the
// JIT gave each line) or a kernel function (a helper, a map's lookup, the
// test run's own loop).
//
// It is the benchmarks' answer to "where do the nanoseconds go" that cut
// copies of a program cannot give below their own spread: one program, as
// production runs it, sampled. The machine here has no hardware counters
// in its guest (no PMU), so samples come from the task clock (a software
// event, an hrtimer): a sample lands where the thread was when the timer
// fired, which charges a long-latency load to the instruction after it as
// often as to itself. Read a line's share with its neighbours.
package bpfprof

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sampler samples the calling thread's instruction pointer every period of
// its CPU time, kernel included. The thread must stay locked to its OS
// thread (runtime.LockOSThread) from NewSampler to Close.
type Sampler struct {
	fd   int
	mem  []byte
	meta *unix.PerfEventMmapPage
	data []byte
}

// ringPages is the sample ring's size in pages: at one 16-byte sample per
// 20 µs, a 4 KiB page holds 5 ms of samples, so 256 pages hold 1.3 s.
// Drain it between test-run calls shorter than that.
const ringPages = 256

// NewSampler starts sampling the calling thread every period of CPU time
// (disabled until Enable).
func NewSampler(periodNs uint64) (*Sampler, error) {
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_TASK_CLOCK,
		Sample:      periodNs,
		Sample_type: unix.PERF_SAMPLE_IP,
		Bits:        unix.PerfBitDisabled | unix.PerfBitExcludeHv,
	}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf_event_open (task clock, this thread): %w", err)
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (1+ringPages)*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mapping the sample ring: %w", err)
	}
	s := &Sampler{fd: fd, mem: mem, meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0]))}
	off, size := s.meta.Data_offset, s.meta.Data_size
	if off == 0 { // kernels before 4.1 leave these 0: the ring follows the first page
		off, size = uint64(page), uint64(ringPages*page)
	}
	s.data = mem[off : off+size]
	return s, nil
}

// Enable starts sampling; Disable stops it.
func (s *Sampler) Enable() error {
	return unix.IoctlSetInt(s.fd, unix.PERF_EVENT_IOC_ENABLE, 0)
}

func (s *Sampler) Disable() error {
	return unix.IoctlSetInt(s.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
}

// Drain calls fn with the instruction pointer of each sample taken since
// the last Drain, oldest first, and returns how many the kernel dropped
// because the ring was full.
func (s *Sampler) Drain(fn func(ip uint64)) (lost uint64) {
	head := atomic.LoadUint64(&s.meta.Data_head)
	tail := s.meta.Data_tail
	size := uint64(len(s.data))
	var rec [64]byte
	for tail < head {
		// A record may wrap around the ring's end: read it through a copy.
		hdr := s.read(rec[:8], tail)
		typ, recSize := binary.NativeEndian.Uint32(hdr[0:4]), uint64(binary.NativeEndian.Uint16(hdr[6:8]))
		if recSize < 8 || recSize > size {
			break
		}
		if recSize <= uint64(len(rec)) {
			body := s.read(rec[:recSize], tail)
			switch typ {
			case unix.PERF_RECORD_SAMPLE:
				if recSize >= 16 {
					fn(binary.NativeEndian.Uint64(body[8:16]))
				}
			case unix.PERF_RECORD_LOST:
				if recSize >= 24 {
					lost += binary.NativeEndian.Uint64(body[16:24])
				}
			}
		}
		tail += recSize
	}
	atomic.StoreUint64(&s.meta.Data_tail, tail)
	return lost
}

// read copies len(buf) bytes of the ring from position pos (a running
// offset, taken modulo the ring's size).
func (s *Sampler) read(buf []byte, pos uint64) []byte {
	size := uint64(len(s.data))
	at := pos % size
	n := copy(buf, s.data[at:])
	copy(buf[n:], s.data)
	return buf
}

// Close stops sampling and releases the ring.
func (s *Sampler) Close() error {
	err := unix.Munmap(s.mem)
	if cerr := unix.Close(s.fd); err == nil {
		err = cerr
	}
	return err
}
