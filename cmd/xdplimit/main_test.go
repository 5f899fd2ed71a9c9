// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// runCLI runs a command line exactly as main does and returns its standard
// output, standard error and exit status.
func runCLI(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// cliCase is a command line and exactly what it must print and return.
type cliCase struct {
	name           string
	args           []string
	code           int
	stdout, stderr string
}

// refused is a command line that must fail with err, printed as main
// prints it, and print nothing else.
func refused(name, err string, args ...string) cliCase {
	return cliCase{name: name, args: args, code: 1, stderr: "xdplimit: " + err + "\n"}
}

func runCases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCLI(c.args...)
			if code != c.code || out != c.stdout || errOut != c.stderr {
				t.Errorf("xdplimit %q:\n got exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q, stderr %q",
					c.args, code, out, errOut, c.code, c.stdout, c.stderr)
			}
		})
	}
}

// An error that quotes outside text raw (here the os package's, with a
// path that carries a terminal title sequence) reaches the terminal
// escaped: its controls are printed, not obeyed.
func TestErrorLineEscaped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "\x1b]0;owned\x07.yaml")
	_, errOut, code := runCLI("policy", "check", path)
	if code != 1 || strings.ContainsAny(errOut, "\x1b\x07") || !strings.Contains(errOut, `\x1b]0;owned\x07.yaml`) {
		t.Errorf("exit %d, stderr %q: want exit 1 and the path's controls escaped", code, errOut)
	}
}

// The interface the tests ask about: a valid name no test creates.
const noIface = "xdpl-none0"

// notAttached is the error loader.Open gives for noIface (it depends on
// whether bpffs is mounted here), after checking that it is the
// not-attached error and that the interface has no pins.
func notAttached(t *testing.T) string {
	t.Helper()
	_, err := loader.Open(noIface)
	if !errors.Is(err, loader.ErrNotAttached) {
		t.Fatalf("loader.Open(%s): %v, want not attached", noIface, err)
	}
	return err.Error()
}

// badNameCases: every command taking interfaces refuses a name Linux would
// refuse before touching anything.
func badNameCases(args ...string) []cliCase {
	var cs []cliCase
	for _, name := range []string{"..", "../eth0", "sixteen-chars-xx"} {
		err := loader.CheckInterfaceName(name)
		cs = append(cs, refused("name "+name, err.Error(), append(args[:len(args):len(args)], name)...))
	}
	return cs
}

// writeFile writes a file into a test directory and returns its path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Policies for the tests: a valid one, one with a warning and one with an
// error.
const (
	goodPolicy = `rules:
  - name: dns
    match: {protocol: udp, dst_ports: [53]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 3}
`
	warnPolicy = "allow: [192.0.2.1/24]\nrules: []\n"
	badPolicy  = "rules:\n  - name: dns\n    limit: {rate: 1000/sec}\n"
)

// policyFiles writes the three test policies and returns their paths.
func policyFiles(t *testing.T) (good, warn, bad string) {
	return writeFile(t, "p.yaml", goodPolicy), writeFile(t, "w.yaml", warnPolicy), writeFile(t, "bad.yaml", badPolicy)
}

// The warning of warnPolicy and the error of badPolicy, as printed.
func warnLine(path string) string {
	return "warning: " + path + ":1:9: allow[0]: 192.0.2.1/24 is masked to 192.0.2.0/24\n"
}

func badError(path string) string {
	return path + ":3:12: rules[0].limit: algorithm is required: token_bucket, fixed_window, sliding_window or sliding_log"
}

func TestRoot(t *testing.T) {
	help, _, _ := runCLI("--help")
	runCases(t, []cliCase{
		{name: "no command prints help", stdout: help},
		refused("unknown command", `unknown command "bogus" for "xdplimit"`, "bogus"),
		refused("unknown flag", "unknown flag: --bogus", "--bogus"),
	})
}

// TestHelp: every command's --help shows its description and usage on
// standard output, and the root lists every subcommand but hidden ones.
func TestHelp(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		args := append(strings.Fields(c.CommandPath())[1:], "--help")
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := runCLI(args...)
			desc := c.Long
			if desc == "" {
				desc = c.Short
			}
			if code != 0 || errOut != "" || !strings.HasPrefix(out, desc+"\n\nUsage:\n  "+c.UseLine()) {
				t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant it to start with:\n%s\n\nUsage:\n  %s", code, errOut, out, desc, c.UseLine())
			}
			for _, sub := range c.Commands() {
				listed := strings.Contains(out, "\n  "+sub.Name()+" ") && strings.Contains(out, " "+sub.Short+"\n")
				if listed == sub.Hidden {
					t.Errorf("help lists %s (%s): %v; hidden: %v", sub.Name(), sub.Short, listed, sub.Hidden)
				}
			}
		})
	}
	walk(newRootCmd())
}

// startAgent starts an agent with cfg on v's receiving end (natively, with
// a small state table, detaching when it stops) and runs it in this process
// until the test ends, as an attach process would run it.
func startAgent(t *testing.T, v *testutil.Veth, cfg agent.Config) *agent.Agent {
	t.Helper()
	cfg.Interface, cfg.Mode, cfg.MaxSources, cfg.DetachOnExit = v.PeerName, loader.ModeNative, 1<<12, true
	var a *agent.Agent
	err := v.PeerNS.Do(func() (err error) {
		a, err = agent.Start(context.Background(), cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return a
}
