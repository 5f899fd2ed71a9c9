// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// TestPolicyCheckAgreesWithAttach: `policy check` passes a file if and only
// if an attach accepts it, for every shipped example (each also valid and
// warning-free, the fleet and CrowdSec examples given their password and
// key files) and every
// broken policy of the policy package's tests (policy/testdata/broken);
// a refused file gets the same first error from both.
func TestPolicyCheckAgreesWithAttach(t *testing.T) {
	testutil.RequireRoot(t)
	examples, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("examples: %v, %v", examples, err)
	}
	broken, err := filepath.Glob("../../policy/testdata/broken/*.yaml")
	if err != nil || len(broken) == 0 {
		t.Fatalf("broken policies: %v, %v", broken, err)
	}
	withLocalSecrets(t, examples)
	v := testutil.NewUniqueVethPair(t, "xpas", "xpar")
	// A host set up for every example: the syncookie one needs these, and
	// attach checks them (a host check, which policy check cannot make).
	for k, val := range map[string]string{"net.ipv4.tcp_syncookies": "2", "net.ipv4.tcp_timestamps": "2"} {
		if err := v.PeerNS.SetSysctl(k, val); err != nil {
			t.Fatal(err)
		}
	}
	attach := func(path string) error {
		var a *agent.Agent
		err := v.PeerNS.Do(func() (err error) {
			a, err = agent.Start(context.Background(), agent.Config{Interface: v.PeerName, Policy: path,
				Mode: loader.ModeNative, MaxSources: 1 << 12, MaxBans: 64, DetachOnExit: true})
			return err
		})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := a.Run(ctx); err != nil {
			t.Errorf("%s: stopping the agent: %v", path, err)
		}
		return nil
	}
	for _, c := range []struct {
		files []string
		valid bool
	}{{examples, true}, {broken, false}} {
		for _, f := range c.files {
			// Absolute, as attach makes it: both name the file alike.
			f, _ = filepath.Abs(f)
			t.Run(filepath.Base(f), func(t *testing.T) {
				_, stderr, code := runCLI("policy", "check", "-q", "--strict", f)
				err := attach(f)
				switch {
				case (code == 0) != (err == nil):
					t.Fatalf("policy check: exit %d, %q; attach: %v", code, stderr, err)
				case (code == 0) != c.valid:
					t.Fatalf("both say valid %v, want %v: %q", code == 0, c.valid, stderr)
				case err != nil:
					first, _, _ := strings.Cut(err.Error(), "\n")
					if !strings.Contains(stderr, first) {
						t.Errorf("attach refused with %q, policy check said %q", first, stderr)
					}
				}
			})
		}
	}
	if _, err := os.Stat(filepath.Join(loader.PinRoot, v.PeerName)); !os.IsNotExist(err) {
		t.Errorf("pins left: %v", err)
	}
}

// withLocalSecrets points the fleet and CrowdSec examples at their secret
// files, written where a test may write: each such example is replaced by
// a copy that names them.
func withLocalSecrets(t *testing.T, examples []string) {
	dir := t.TempDir()
	secrets := map[string]string{"/etc/xdplimit/redis.pw": "secret\n", "/etc/xdplimit/crowdsec.key": "0123456789abcdef\n"}
	for i, e := range examples {
		b, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		for name, content := range secrets {
			if !strings.Contains(string(b), name) {
				continue
			}
			local := filepath.Join(dir, filepath.Base(name))
			if err := os.WriteFile(local, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			examples[i] = filepath.Join(dir, filepath.Base(e))
			b = []byte(strings.ReplaceAll(string(b), name, local))
			if err := os.WriteFile(examples[i], b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
