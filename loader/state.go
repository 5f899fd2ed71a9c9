// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/maps"
)

// State is a read-only view of a pinned limiter, for status and for
// commands run while (or after) another process attached it.
type State struct {
	Interface string
	Limiter   *maps.Limiter
	ProgramID ebpf.ProgramID
	Meta      maps.Meta
}

// Open opens the pinned state of an interface.
func Open(iface string) (*State, error) {
	if err := CheckInterfaceName(iface); err != nil {
		return nil, err
	}
	if !isBPFFS(BPFFS) {
		return nil, fmt.Errorf("%s: no bpffs at %s: %w", iface, BPFFS, ErrNotAttached)
	}
	dir := pinDir(iface)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%s: %w", iface, ErrNotAttached)
	}
	pinned := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range pinned {
			m.Close()
		}
	}()
	for _, name := range maps.MapNames {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: false})
		if err != nil {
			return nil, fmt.Errorf("%s: pinned map %s: %w", iface, name, err)
		}
		pinned[name] = m
	}
	l, err := maps.OpenPinned(pinned)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", iface, err)
	}
	s := &State{Interface: iface, Limiter: l}
	if s.Meta, err = l.Meta(); err != nil {
		l.Close()
		return nil, err
	}
	if lk, err := link.LoadPinnedLink(filepath.Join(dir, "link"), nil); err == nil {
		if info, err := lk.Info(); err == nil {
			s.ProgramID = info.Program
		}
		lk.Close()
	}
	return s, nil
}

// Close releases the view.
func (s *State) Close() error { return s.Limiter.Close() }

// Mode is the recorded attach mode.
func (s *State) Mode() Mode { return Mode(s.Meta.AttachMode) }

// List names the interfaces with pinned state.
func List() ([]string, error) {
	ents, err := os.ReadDir(PinRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Detach removes the limiter of an interface whose attach process is gone
// (it exited, leaving the limiter, or was killed): unpinning the link and
// closing it detaches the program.
func Detach(iface string) error {
	if err := CheckInterfaceName(iface); err != nil {
		return err
	}
	dir := pinDir(iface)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%s: %w", iface, ErrNotAttached)
	}
	lock, err := lockInterface(iface)
	if err != nil {
		return err
	}
	defer unlockInterface(lock)
	if lk, err := link.LoadPinnedLink(filepath.Join(dir, "link"), nil); err == nil {
		err := detachLink(lk)
		lk.Close()
		if err != nil {
			return err
		}
	}
	// The reflection guard's recorder on the egress goes too.
	if nl, err := netlink.LinkByName(iface); err == nil {
		if err := removeEgress(nl.Attrs().Index); err != nil {
			return err
		}
	}
	return removePins(dir)
}
