package main

import "testing"

// TestReloadRefuses: without pinned state, reload neither signals anything
// nor applies the policy it is given.
func TestReloadRefuses(t *testing.T) {
	good := writeFile(t, "p.yaml", goodPolicy)
	cases := []cliCase{
		refused("no interface", "accepts 1 arg(s), received 0", "reload"),
		refused("two interfaces", "accepts 1 arg(s), received 2", "reload", noIface, "eth9"),
		refused("not attached", notAttached(t), "reload", noIface),
		refused("not attached, with a policy", notAttached(t), "reload", noIface, "--policy", good),
	}
	runCases(t, append(cases, badNameCases("reload")...))
}
