// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestAttachRefuses: flag and argument errors fail before the metrics port
// is bound or the interface touched; policy errors and warnings reach the
// command's error stream. None of it needs root.
func TestAttachRefuses(t *testing.T) {
	good, warn, bad := policyFiles(t)
	// Without the metrics port, so that a run never binds it.
	attach := func(args ...string) []string { return append([]string{"attach", "--metrics-addr="}, args...) }
	cases := []cliCase{
		refused("no interface", "accepts 1 arg(s), received 0", attach("--policy", good)...),
		refused("two interfaces", "accepts 1 arg(s), received 2", attach(noIface, "eth9", "--policy", good)...),
		refused("no policy", "--policy is required", attach(noIface)...),
		refused("mode", `--mode "bogus": use auto, native or generic`, attach(noIface, "--policy", good, "--mode", "bogus")...),
		refused("max-sources 0", "--max-sources 0: give 1 or more", attach(noIface, "--policy", good, "--max-sources", "0")...),
		refused("max-sources negative", `invalid argument "-1" for "--max-sources" flag: strconv.ParseUint: parsing "-1": invalid syntax`,
			attach(noIface, "--policy", good, "--max-sources", "-1")...),
		refused("clock", `--clock "foo": use coarse or ktime`, attach(noIface, "--policy", good, "--clock", "foo")...),
		refused("wait", `--wait-for-interface "soon": give a duration (30s, 5m), "forever", or 0`,
			attach(noIface, "--policy", good, "--wait-for-interface=soon")...),
		refused("log level", `--log-level "loud": use debug, info, warn or error`, attach(noIface, "--policy", good, "--log-level", "loud")...),
		refused("log format", `--log-format "xml": use text or json`, attach(noIface, "--policy", good, "--log-format", "xml")...),
		refused("metrics address", "--metrics-addr: listen tcp: address bad: missing port in address",
			"attach", noIface, "--policy", good, "--metrics-addr", "bad"),
		refused("missing policy file", "open "+good+".missing: no such file or directory", attach(noIface, "--policy", good+".missing")...),
		refused("policy with errors", badError(bad), attach(noIface, "--policy", bad)...),
		refused("no such interface", fmt.Sprintf("interface %q: Link not found", noIface), attach(noIface, "--policy", good)...),
		{name: "warnings on the error stream", args: attach(noIface, "--policy", warn), code: 1,
			stderr: warnLine(warn) + fmt.Sprintf("xdplimit: interface %q: Link not found\n", noIface)},
	}
	runCases(t, append(cases, badNameCases(attach("--policy", good)...)...))
}

// TestLogFlags: --log-format json writes one JSON object a line, and
// --log-level drops what is below it.
func TestLogFlags(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "interface", "eth0")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["msg"] != "shown" || line["interface"] != "eth0" ||
		line["level"] != "WARN" || strings.Count(buf.String(), "\n") != 1 {
		t.Errorf("log: %q (%v)", buf.String(), err)
	}
}
