// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

const reflectorWords = int(gen.XdplimitXdplConstXDPL_REFLECTOR_WORDS)

// writeReflectors writes generation next's reflector ports: a bitmap of
// the 65536 ports.
func (l *Limiter) writeReflectors(next uint32, ports []uint16) error {
	words := make([]uint64, reflectorWords)
	for _, p := range ports {
		words[p/64] |= 1 << (p % 64)
	}
	keys := make([]uint32, reflectorWords)
	for i := range keys {
		keys[i] = next*uint32(reflectorWords) + uint32(i)
	}
	if _, err := l.objs.XdplReflectors.BatchUpdate(keys, words, nil); err != nil {
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("writing the reflector ports: %w", err)
		}
		for i, k := range keys {
			if err := l.objs.XdplReflectors.Update(k, words[i], ebpf.UpdateAny); err != nil {
				return fmt.Errorf("writing the reflector ports: %w", err)
			}
		}
	}
	return nil
}

// EgressProgram returns the program that records the requests this host
// sends to reflector ports (bpf/egress.bpf.c), loaded onto the limiter's
// maps at the first call; the caller attaches it to the egress of the
// limiter's interface. It reads the same clock as the XDP program.
func (l *Limiter) EgressProgram() (*ebpf.Program, error) {
	if l.egress != nil {
		return l.egress, nil
	}
	eg, err := loadEgress(l.mapsByName(), l.clock, ebpf.ProgramOptions{})
	if err != nil {
		return nil, err
	}
	l.egress = eg
	return l.egress, nil
}
