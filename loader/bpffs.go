// SPDX-License-Identifier: Apache-2.0

// Package loader attaches the limiter to an interface and keeps its state
// pinned in bpffs, so that enforcement outlives the control plane: a new
// `attach` adopts the pinned program state without a gap, and `detach`
// removes everything.
package loader

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// BPFFS is where bpffs is expected; PinRoot holds one directory per interface.
const (
	BPFFS   = "/sys/fs/bpf"
	PinRoot = BPFFS + "/xdplimit"
	// stagingRoot holds pin directories being populated, renamed into
	// PinRoot when complete.
	stagingRoot = BPFFS + "/xdplimit-staging"
)

const bpffsMagic = 0xcafe4a11

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && uint32(st.Type) == bpffsMagic
}

// ensureBPFFS mounts bpffs at /sys/fs/bpf when it is missing (as under
// `ip netns exec`, which mounts a fresh /sys).
func ensureBPFFS() error {
	if isBPFFS(BPFFS) {
		return nil
	}
	if err := os.MkdirAll(BPFFS, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", BPFFS, err)
	}
	if err := unix.Mount("bpf", BPFFS, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mounting bpffs at %s: %w", BPFFS, err)
	}
	return nil
}

// PrivateMountNamespace reports whether pins made here die with this
// process's mount namespace: it is not init's (as under `ip netns exec`) and
// the bpffs at /sys/fs/bpf is not init's either. A hardened systemd unit also
// runs in its own mount namespace, but sees the host's bpffs there, and its
// pins persist.
func PrivateMountNamespace() bool {
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	init, err2 := os.Readlink("/proc/1/ns/mnt")
	if err1 != nil || err2 != nil || self == init {
		return false // the same namespace, or cannot tell: do not warn
	}
	var here, theirs unix.Stat_t
	if unix.Stat(BPFFS, &here) != nil || unix.Stat("/proc/1/root"+BPFFS, &theirs) != nil {
		return true
	}
	return here.Dev != theirs.Dev
}

// NetnsInode identifies the network namespace of the calling thread.
func NetnsInode() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func pinDir(iface string) string { return PinRoot + "/" + iface }

// CheckInterfaceName refuses what Linux refuses as an interface name. The
// name becomes a path under PinRoot and the lock directory, so ".." or a
// '/' would reach outside them: `detach ..` would remove every pin in bpffs.
func CheckInterfaceName(name string) error {
	bad := ""
	switch {
	case name == "":
		bad = "empty"
	case len(name) >= unix.IFNAMSIZ:
		bad = fmt.Sprintf("longer than %d bytes", unix.IFNAMSIZ-1)
	case name == "." || name == "..":
		bad = "not a name"
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		bad = "holds '/', ':' or white space"
	}
	if bad != "" {
		return fmt.Errorf("interface name %q: %s", name, bad)
	}
	return nil
}

// ErrNotAttached means no pinned xdplimit state exists for the interface.
var ErrNotAttached = errors.New("xdplimit is not attached there")
