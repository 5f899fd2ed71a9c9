// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// MachineWait bounds a wait for work whose duration is the machine's, not
// the product's to be judged on: loading and verifying the program (a third
// of a second on an idle host, 5-10 s in an emulated VM, over 30 s there
// with the host's CPUs taken by other work), an attach process's start or
// exit, a reload, a command run to completion. Only a hang should reach
// it, so it is generous; a test that judges how fast something happens
// measures that instead.
const MachineWait = 5 * time.Minute

// WaitLogged waits until out, a process's output, holds s; it fails the
// test when the process ends first (ended reports that, and how) or when
// timeout passes. who names the process in the failure.
func WaitLogged(t testing.TB, who string, out fmt.Stringer, ended func() (bool, error), s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(out.String(), s) {
		if done, err := ended(); done {
			// It may have logged s just before it ended.
			if strings.Contains(out.String(), s) {
				return
			}
			t.Fatalf("%s exited (%v) before %q:\n%s", who, err, s, out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q from %s after %v:\n%s", s, who, timeout, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
