// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// MaxTriePrefixes sizes each longest-prefix trie of the classification
// (a rule's sources and destinations, per family) and of allow and deny
// (per family), both generations together: a policy may use half of it.
// bpf/xdplimit_consts.h builds them with 16k (XDPL_MAX_CIDRS), which one
// country's networks exceed. An LPM trie is never preallocated: its size
// is a bound, and its memory follows the prefixes in it (measured: an
// empty trie of 4M entries holds no memory, 500k IPv4 entries 32 MB as the
// kernel counts them).
const MaxTriePrefixes = 1 << 22

// tries are the maps MaxTriePrefixes sizes.
var tries = []string{gen.XdplimitMapXdplSrc4, gen.XdplimitMapXdplSrc6, gen.XdplimitMapXdplDst4,
	gen.XdplimitMapXdplDst6, gen.XdplimitMapXdplAcl4, gen.XdplimitMapXdplAcl6}

func sizeTries(spec *ebpf.CollectionSpec) {
	for _, name := range tries {
		spec.Maps[name].MaxEntries = MaxTriePrefixes
	}
}
