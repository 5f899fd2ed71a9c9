// SPDX-License-Identifier: Apache-2.0

package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestBuildWithoutCToolchain: `go install .../cmd/xdplimit@VERSION` must work
// on a machine with Go alone. It cannot be run against a published version
// here, so this builds the checkout the way go install would: a PATH with
// go and git only (no clang, no C compiler, so cgo switches itself off), no
// GOFLAGS or other go env settings, no -ldflags. gen/ is committed, so nothing runs bpf2go.
func TestBuildWithoutCToolchain(t *testing.T) {
	requireTools(t, map[string]string{"git": "git"})
	root := repoRoot(t)
	pathDir := t.TempDir()
	git, _ := exec.LookPath("git")
	for name, target := range map[string]string{"go": filepath.Join(runtime.GOROOT(), "bin", "go"), "git": git} {
		if err := os.Symlink(target, filepath.Join(pathDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, kv := range cleanEnv() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "GOFLAGS", "CGO_ENABLED", "CC", "CXX", "BPF2GO_CC", "GOENV", "GOTOOLCHAIN":
			continue
		}
		env = append(env, kv)
	}
	// GOENV=off: none of this machine's go env -w settings (such as
	// GOFLAGS=-buildvcs=false) either; GOTOOLCHAIN=local: never a download.
	env = append(env, "PATH="+pathDir, "GOENV=off", "GOTOOLCHAIN=local")
	bin := filepath.Join(t.TempDir(), "xdplimit")
	run(t, root, env, 20*time.Minute, "go", "build", "-o", bin, "./cmd/xdplimit")

	checkStatic(t, bin, false)
	out := run(t, root, nil, time.Minute, bin, "version")
	// Unstamped: what Go recorded stands in. In a clone, that is the commit
	// and a version made from it (the tag, or a pseudo-version naming the
	// commit). In a git worktree or submodule, whose .git is a file, Go
	// records nothing: "dev", commit unknown.
	version, commit := "dev", "unknown"
	if st, err := os.Stat(filepath.Join(root, ".git")); err == nil && st.IsDir() {
		commit = strings.TrimSpace(run(t, root, cleanEnv(), time.Minute, "git", "rev-parse", "HEAD"))
		version = commit[:12]
		if tag, err := runErr(root, cleanEnv(), time.Minute, "git", "describe", "--tags", "--exact-match"); err == nil {
			version = strings.TrimSpace(tag)
		}
	}
	if !strings.HasPrefix(firstLine(out), "xdplimit ") || !strings.Contains(firstLine(out), version) ||
		!strings.Contains(out, "commit:     "+commit) {
		t.Errorf("version of a plain go build:\n%s\nwant a version with %q, commit %s", out, version, commit)
	}
}
