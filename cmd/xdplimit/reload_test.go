// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

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

// TestReloadAsksAgent: with an attach process running, reload asks it
// through its control socket and reports its answer: the policy's
// warnings and success, or the errors with file, line and column and a
// non-zero exit while the previous policy stays. Neither reload --policy
// nor detach may go around it. The answer quotes the policy's path, here a
// file name that carries a terminal's escape sequence: printed escaped.
func TestReloadAsksAgent(t *testing.T) {
	testutil.RequireRoot(t)
	v := testutil.NewUniqueVethPair(t, "xrls", "xrlr")
	iface := v.PeerName
	path := writeFile(t, "p\x1b]0;owned\x07.yaml", goodPolicy)
	esc := termsafe.Escape(path)
	startAgent(t, v, agent.Config{Policy: path})
	sha := func() [32]byte {
		s, err := loader.Open(iface)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.Meta.PolicySHA256
	}

	if err := os.WriteFile(path, []byte(warnPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	runCases(t, []cliCase{{name: "warnings", args: []string{"reload", iface}, stdout: iface + ": policy " + esc + " reloaded\n",
		stderr: warnLine(esc)}})
	before := sha()
	if err := os.WriteFile(path, []byte(badPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	runCases(t, []cliCase{
		refused("broken", badError(esc)+" (the previous policy stays in force)", "reload", iface),
		refused("with --policy", fmt.Sprintf("attach (pid %d) runs for %s and owns its policy file %s: edit that file, then reload without --policy",
			os.Getpid(), iface, esc), "reload", iface, "--policy", path),
		refused("detach", fmt.Sprintf("attach (pid %d) runs for %s: stop it first (systemctl stop xdplimit@%s, or SIGTERM), then detach",
			os.Getpid(), iface, iface), "detach", iface),
	})
	if sha() != before {
		t.Error("a refused reload changed the policy in force")
	}
}
