package loader

import (
	"os"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testutil"
)

// TestKernelFeatures reports what this kernel offers (the VM suite shows it
// for 6.1) and requires everything the datapath needs.
func TestKernelFeatures(t *testing.T) {
	testutil.Require(t, os.Geteuid() == 0, "probing kernel features needs root")
	for _, f := range ProbeKernel() {
		state := "present"
		if f.Err != nil {
			state = "MISSING: " + f.Err.Error()
		}
		t.Logf("%-40s %s", f.Name, state)
	}
	if err := CheckKernel(); err != nil {
		t.Fatal(err)
	}
}
