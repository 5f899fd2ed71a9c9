// SPDX-License-Identifier: Apache-2.0

package main

import "testing"

func TestTopRefuses(t *testing.T) {
	cases := []cliCase{
		refused("no interface", "accepts 1 arg(s), received 0", "top"),
		refused("two interfaces", "accepts 1 arg(s), received 2", "top", noIface, "eth9"),
		refused("interval too short", "--interval 10ms: at least 100ms", "top", noIface, "--interval", "10ms"),
		refused("interval not a duration", `invalid argument "foo" for "--interval" flag: time: invalid duration "foo"`,
			"top", noIface, "--interval", "foo"),
		refused("not attached", notAttached(t), "top", noIface, "--once"),
	}
	runCases(t, append(cases, badNameCases("top", "--once")...))
}
