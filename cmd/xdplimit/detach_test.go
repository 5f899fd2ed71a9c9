// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"testing"

	"github.com/xdplimit/xdplimit/loader"
)

func TestDetachRefuses(t *testing.T) {
	cases := []cliCase{
		refused("no interface", "accepts 1 arg(s), received 0", "detach"),
		refused("two interfaces", "accepts 1 arg(s), received 2", "detach", noIface, "eth9"),
		refused("not attached", noIface+": xdplimit is not attached there", "detach", noIface),
	}
	runCases(t, append(cases, badNameCases("detach")...))
	// Nothing was made on the way: no pins, no lock file.
	for _, p := range []string{loader.PinRoot + "/" + noIface, "/run/xdplimit/" + noIface + ".lock"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want it absent", p, err)
		}
	}
}
