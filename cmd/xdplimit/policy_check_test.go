// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"
)

func TestPolicyCheck(t *testing.T) {
	good, warn, bad := policyFiles(t)
	warning := warnLine(warn)
	cases := []cliCase{
		{name: "summary", args: []string{"policy", "check", good}, stdout: "policy " + good + ` (sha256 f9bd825295faa63e)
mode: enforce
allow: 0 prefixes, never limited
deny: 0 prefixes, always dropped
rules: 1, first match wins
  1. dns (line 2): protocol udp, dst_ports [53]
     own       key src_ip ipv4/32 ipv6/64: token_bucket 1 pkt/s burst 3
     over limit: drop
unmatched traffic: pass
unparsed frames (truncated, bad lengths or checksum, too many VLAN tags): pass, unlimited
non-IP frames (ARP, LLDP, ...): pass
`},
		{name: "quiet", args: []string{"policy", "check", "-q", good}},
		{name: "warning", args: []string{"policy", "check", "-q", warn}, stderr: warning},
		{name: "warning, strict", args: []string{"policy", "check", "-q", "--strict", warn}, code: 1,
			stderr: warning + "xdplimit: " + warn + ": 1 warning (--strict)\n"},
		{name: "errors", args: []string{"policy", "check", bad}, code: 1,
			stderr: badError(bad) + "\nxdplimit: " + bad + ": 1 error\n"},
		refused("missing file", "open "+good+".missing: no such file or directory", "policy", "check", good+".missing"),
		refused("no file", "accepts 1 arg(s), received 0", "policy", "check"),
		refused("two files", "accepts 1 arg(s), received 2", "policy", "check", good, warn),
	}
	// What attach refuses beyond the policy language: a password file that
	// cannot be read (TestPolicyCheckAgreesWithAttach runs every example).
	nopw := writeFile(t, "fleet.yaml", "fleet:\n  redis: redis://192.0.2.10:6379/0\n  password_file: "+good+".missing\n"+
		"  namespace: t\nrules: []\n")
	cases = append(cases, refused("password file missing", "fleet.password_file: open "+good+".missing: no such file or directory",
		"policy", "check", nopw))
	// So is a CrowdSec key file that cannot be read, or that others may
	// read (writeFile makes it 0644).
	key := writeFile(t, "crowdsec.key", "0123456789abcdef\n")
	for name, c := range map[string]struct{ file, err string }{
		"key file missing":  {key + ".missing", "crowdsec key file: open " + key + ".missing: no such file or directory"},
		"key file readable": {key, "crowdsec key file " + key + " is readable by group or others (mode 0644): chmod 600 it"},
	} {
		cs := writeFile(t, "cs.yaml", "crowdsec: {url: 'http://127.0.0.1:8080', api_key_file: "+c.file+"}\nrules: []\n")
		cases = append(cases, refused(name, c.err, "policy", "check", cs))
	}
	runCases(t, cases)
}
