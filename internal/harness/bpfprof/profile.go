// SPDX-License-Identifier: Apache-2.0

package bpfprof

import (
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/xdplimit/xdplimit/internal/cpupin"
)

// Profile is where the samples of a sampled run landed.
type Profile struct {
	Samples, Lost uint64
	Runs          uint64        // program runs in the sampled calls
	CPU           time.Duration // the thread's CPU time in them
	counts        map[Place]uint64
}

// Entry is one place's part of a profile.
type Entry struct {
	Place
	Samples uint64
	Share   float64 // of all samples
	Ns      float64 // per run: the runs' CPU time times the share
}

// Sample runs call calls times on this thread with the sampler on, every
// period of CPU time, and names each sample's place with sym. call makes
// one BPF_PROG_TEST_RUN call and returns how many runs it made.
func Sample(sym *Symbolizer, period time.Duration, calls int, call func() (runs int, err error)) (*Profile, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := NewSampler(uint64(period.Nanoseconds()))
	if err != nil {
		return nil, err
	}
	defer s.Close()
	p := &Profile{counts: map[Place]uint64{}}
	add := func(ip uint64) {
		p.counts[sym.Place(ip)]++
		p.Samples++
	}
	for range calls {
		t0 := cpupin.ThreadCPU()
		if err := s.Enable(); err != nil {
			return nil, err
		}
		runs, err := call()
		if derr := s.Disable(); err == nil {
			err = derr
		}
		p.CPU += cpupin.ThreadCPU() - t0
		if err != nil {
			return nil, err
		}
		p.Runs += uint64(runs)
		p.Lost += s.Drain(add)
	}
	if p.Samples == 0 {
		return nil, fmt.Errorf("no samples in %v of CPU time at one per %v", p.CPU, period)
	}
	return p, nil
}

// NsPerRun is the sampled calls' CPU time per program run.
func (p *Profile) NsPerRun() float64 {
	if p.Runs == 0 {
		return 0
	}
	return float64(p.CPU.Nanoseconds()) / float64(p.Runs)
}

// Entries are the places, most samples first (then by name).
func (p *Profile) Entries() []Entry {
	out := make([]Entry, 0, len(p.counts))
	for pl, n := range p.counts {
		share := float64(n) / float64(p.Samples)
		out = append(out, Entry{Place: pl, Samples: n, Share: share, Ns: share * p.NsPerRun()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Samples != out[j].Samples {
			return out[i].Samples > out[j].Samples
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// InProgram is the share of samples in the program's own code (not in
// the kernel functions it calls, nor in the test run's loop).
func (p *Profile) InProgram() float64 {
	var n uint64
	for pl, c := range p.counts {
		if pl.InProgram {
			n += c
		}
	}
	return float64(n) / float64(p.Samples)
}
