// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// Another interface's detach removes the pin root when it is empty, which
// can happen between an attach making it and renaming its staging
// directory into it: the rename makes the root again.
func TestRenameIntoRemovedRoot(t *testing.T) {
	testutil.RequireRoot(t)
	a := &Attachment{Interface: "xpinrace0"}
	tmp, err := a.stagingDir()
	testutil.Require(t, err == nil, "no bpffs at "+BPFFS)
	dir := filepath.Join(PinRoot, a.Interface)
	t.Cleanup(func() { _ = removePins(dir); _ = os.RemoveAll(tmp) })
	if err := os.Remove(PinRoot); err != nil {
		t.Skipf("the pin root holds other pins (%v): the race needs it empty", err)
	}
	if err := renameIntoRoot(tmp, dir); err != nil {
		t.Fatalf("rename into a removed root: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}
