// SPDX-License-Identifier: Apache-2.0

package testutil

import "time"

// MachineWait bounds a wait for work whose duration is the machine's, not
// the product's to be judged on: loading and verifying the program (a third
// of a second on an idle host, 5-10 s in an emulated VM, over 30 s there
// with the host's CPUs taken by other work), an attach process's start or
// exit, a reload, a command run to completion. Only a hang should reach
// it, so it is generous; a test that judges how fast something happens
// measures that instead.
const MachineWait = 5 * time.Minute
