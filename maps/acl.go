// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/gen"
)

// Allow/deny entries are split by length: host addresses (/32, /128) go to
// hash maps, which the datapath looks up first (a host is the longest prefix
// there is), and only shorter prefixes to the tries. A 100k list of hosts
// then costs a packet one hash lookup instead of a walk down a deep trie.

// isHost reports whether p covers one address.
func isHost(p netip.Prefix) bool { return p.Bits() == p.Addr().BitLen() }

// aclFlags are the generation flags that say which allow/deny maps hold
// entries (the datapath skips the others).
func aclFlags(img *Image) uint32 {
	var f uint32
	for _, ps := range [][]netip.Prefix{img.Allow, img.Deny} {
		for _, p := range ps {
			f |= gfACL
			if isHost(p) {
				f |= gfACLExact
			} else {
				f |= gfACLPrefix
			}
		}
	}
	return f
}

// writeACL replaces generation g's allow/deny entries. Deny is written after
// allow, so a host on both lists is denied, as in the trie before.
func (l *Limiter) writeACL(g uint32, img *Image) error {
	m := &l.objs.XdplimitMaps
	var prefixes []lpmValue[uint32]
	var hosts []lpmValue[uint32]
	for _, list := range []struct {
		ps []netip.Prefix
		v  uint32
	}{{img.Allow, aclAllow}, {img.Deny, aclDeny}} {
		for _, p := range list.ps {
			e := lpmValue[uint32]{p.Masked(), list.v}
			if isHost(p) {
				hosts = append(hosts, e)
			} else {
				prefixes = append(prefixes, e)
			}
		}
	}
	if err := writeLPMValues(m.XdplAcl4, m.XdplAcl6, g, prefixes); err != nil {
		return err
	}
	if err := clearGen[gen.XdplimitXdplHost4, uint32](m.XdplAcl4Hosts, g, func(k *gen.XdplimitXdplHost4) uint32 { return k.Gen }); err != nil {
		return err
	}
	if err := clearGen[gen.XdplimitXdplHost6, uint32](m.XdplAcl6Hosts, g, func(k *gen.XdplimitXdplHost6) uint32 { return k.Gen }); err != nil {
		return err
	}
	for _, e := range hosts {
		var err error
		a := e.prefix.Addr()
		if a.Is4() {
			b := a.As4()
			k := gen.XdplimitXdplHost4{Gen: g, Addr: binary.NativeEndian.Uint32(b[:])}
			err = m.XdplAcl4Hosts.Update(&k, &e.value, ebpf.UpdateAny)
		} else {
			b := a.As16()
			k := gen.XdplimitXdplHost6{Gen: g}
			for i := range k.Addr {
				k.Addr[i] = binary.NativeEndian.Uint32(b[4*i:])
			}
			err = m.XdplAcl6Hosts.Update(&k, &e.value, ebpf.UpdateAny)
		}
		if err != nil {
			if errors.Is(err, unix.E2BIG) || errors.Is(err, unix.ENOSPC) {
				return fmt.Errorf("%v: the host table is full (%d entries per family for both generations): %w",
					e.prefix, m.XdplAcl4Hosts.MaxEntries(), err)
			}
			return fmt.Errorf("%v: %w", e.prefix, err)
		}
	}
	return nil
}

// clearGen deletes generation g's entries of a hash map with values V:
// the host maps' (uint32) and the payload values' (Bitmap).
func clearGen[K, V any](m *ebpf.Map, g uint32, genOf func(*K) uint32) error {
	var stale []K
	var k K
	it := m.Iterate()
	var v V
	for it.Next(&k, &v) {
		if genOf(&k) == g {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for i := range stale {
		if err := m.Delete(&stale[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}
