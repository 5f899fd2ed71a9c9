// SPDX-License-Identifier: Apache-2.0

package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/command"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// repoRoot is the checkout's root: this package's parent directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// requireTools stops the test (a failure in CI) unless every tool is on
// PATH; Debian's package for each is named in the reason.
func requireTools(t *testing.T, tools map[string]string) {
	t.Helper()
	for tool, pkg := range tools {
		_, err := exec.LookPath(tool)
		testutil.Require(t, err == nil, "%s not installed (Debian package %s; make deps)", tool, pkg)
	}
}

// run runs a command in dir with a hard time limit and returns its
// combined output, failing the test on a non-zero exit.
func run(t *testing.T, dir string, env []string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, env, timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// runErr is run that hands the error back.
func runErr(dir string, env []string, timeout time.Duration, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := command.RunCmd(timeout, cmd)
	return string(out), err
}

// cleanEnv is this process's environment without make's variables, so that
// a make started by a test started by make does not try to join the outer
// make's job server.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// gitDescribe is the version make dist stamps into the binary.
func gitDescribe(t *testing.T, root string) string {
	t.Helper()
	return strings.TrimSpace(run(t, root, cleanEnv(), time.Minute, "git", "describe", "--tags", "--always", "--dirty"))
}

// firstLine is what scripts read from `xdplimit --version`.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
