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
	spec, err := gen.LoadEgress()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded egress program: %w", err)
	}
	mode := uint32(gen.XdplimitXdplConstXDPL_CLOCK_KTIME)
	if l.clock == ClockMap {
		mode = uint32(gen.XdplimitXdplConstXDPL_CLOCK_MAP)
	}
	if err := spec.Variables["xdpl_clock_mode"].Set(mode); err != nil {
		return nil, err
	}
	var objs gen.EgressPrograms
	err = spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: onMaps(spec, l.mapsByName())})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return nil, fmt.Errorf("the kernel's verifier rejected the egress program: %+v", ve)
	}
	if err != nil {
		return nil, fmt.Errorf("loading the egress program: %w", err)
	}
	l.egress = objs.XdplEgress
	return l.egress, nil
}
