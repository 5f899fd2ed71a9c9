// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
)

// maxIfname is the longest interface name Linux takes (IFNAMSIZ less the
// terminating NUL).
const maxIfname = 15

// UniqueID returns a random suffix of 8 hex digits that makes each of
// prefixes a name no xdplimit pin or lock on this machine uses: pins live
// under /sys/fs/bpf/xdplimit/<interface> and locks in /run/xdplimit, shared
// by every namespace and every test process, so two overlapping runs must
// never pick one name. A shortened PID does not do that on a host whose
// pid_max exceeds what the name keeps; 32 random bits, checked against what
// exists, do. The prefixes with the suffix must fit an interface name.
func UniqueID(tb testing.TB, prefixes ...string) string {
	tb.Helper()
	for _, p := range prefixes {
		if len(p)+8 > maxIfname {
			tb.Fatalf("interface name prefix %q: with an 8-digit suffix it exceeds %d bytes", p, maxIfname)
		}
	}
	for range 16 {
		b := make([]byte, 4)
		_, _ = rand.Read(b) // crypto/rand does not fail on Linux
		id := hex.EncodeToString(b)
		if !nameInUse(prefixes, id) {
			return id
		}
	}
	tb.Fatalf("no unused interface name for %v after 16 random tries", prefixes)
	return ""
}

func nameInUse(prefixes []string, id string) bool {
	for _, p := range prefixes {
		for _, path := range []string{"/sys/fs/bpf/xdplimit/" + p + id, "/run/xdplimit/" + p + id + ".lock"} {
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				return true
			}
		}
	}
	return false
}
