// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"os"
	"testing"
)

// UniqueID never returns a suffix whose name a lock file already holds,
// and every suffix it returns fits an interface name with the prefix.
func TestUniqueIDAvoidsNamesInUse(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := UniqueID(t, "xag3s", "x")
		if len("xag3s"+id) > maxIfname || seen[id] {
			t.Fatalf("suffix %q: too long or repeated", id)
		}
		seen[id] = true
	}
	if nameInUse([]string{"xdpltest-none"}, "00000000") {
		t.Fatal("a name with no pins and no lock is reported in use")
	}
	// A lock file makes the name taken.
	RequireRoot(t)
	if err := os.MkdirAll("/run/xdplimit", 0o755); err != nil {
		t.Fatal(err)
	}
	lock := "/run/xdplimit/xut" + "0badc0de" + ".lock"
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(lock)
	if !nameInUse([]string{"xzz", "xut"}, "0badc0de") {
		t.Error("a name whose lock file exists is reported free")
	}
}
