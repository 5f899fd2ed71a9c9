// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestOwnerAlive needs no root: it judges this process and children it
// starts, some of them copies of system binaries named like xdplimit.
func TestOwnerAlive(t *testing.T) {
	for _, c := range []struct {
		name string
		pid  func(t *testing.T) int
		want bool
	}{
		{"no pid recorded", func(*testing.T) int { return 0 }, false},
		{"this process (same binary)", func(*testing.T) int { return os.Getpid() }, true},
		{"exited and reaped", func(t *testing.T) int {
			cmd := exec.Command("true")
			if err := cmd.Run(); err != nil {
				t.Fatal(err)
			}
			return cmd.Process.Pid
		}, false},
		// What a recycled pid looks like: alive, but not xdplimit.
		{"running, not xdplimit", func(t *testing.T) int { return start(t, "sleep", "sleep") }, false},
		{"init", func(*testing.T) int { return 1 }, false},
		{"running binary named xdplimit", func(t *testing.T) int { return start(t, "sleep", "xdplimit") }, true},
		{"zombie named xdplimit", func(t *testing.T) int {
			pid := start(t, "true", "xdplimit")
			waitState(t, pid, 'Z')
			return pid
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pid := c.pid(t)
			if got := OwnerAlive(uint32(pid)); got != c.want {
				t.Errorf("OwnerAlive(%d) = %v, want %v", pid, got, c.want)
			}
		})
	}
}

// start runs a copy of the system binary bin named name (sleep sleeps for
// a minute), unreaped until the test ends, and returns its pid.
func start(t *testing.T, bin, name string) int {
	t.Helper()
	src, err := exec.LookPath(bin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Until the child has exec'd, /proc/PID/exe is this test binary, which
	// OwnerAlive rightly takes for xdplimit's (seen once in the 6.1 VM).
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && exe == path {
			return pid
		}
		// A copy of true can exec and exit before the first look: a
		// zombie has no exe link, and it can only be one after its exec
		// (cmd.Start returned, so the exec did not fail). Seen on a
		// loaded 2-CPU machine.
		if b, serr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); serr == nil {
			if _, s, ok := parseProcStat(b); ok && s == 'Z' {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never ran %s (exe %q, %v)", pid, path, exe, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitState waits until pid is in the given /proc state.
func waitState(t *testing.T, pid int, state byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if _, s, ok := parseProcStat(b); ok && s == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never reached state %c: %s", pid, state, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProcIsXdplimit covers what root cannot meet for real: another user's
// process, whose exe link cannot be read, and a binary replaced while it
// runs. The /proc directories are fakes.
func TestProcIsXdplimit(t *testing.T) {
	for _, c := range []struct {
		name, stat, exe string // exe "": no link, as when it cannot be read
		want            bool
	}{
		{"exe unreadable, named xdplimit", "7 (xdplimit) S 1", "", true},
		{"exe unreadable, another name", "7 (sshd) S 1", "", false},
		{"exe unreadable, zombie", "7 (xdplimit) Z 1", "", false},
		{"replaced binary", "7 (xdplimit) S 1", "/usr/sbin/xdplimit (deleted)", true},
		{"renamed process, xdplimit binary", "7 (worker) S 1", "/opt/xdplimit-1.2/bin/xdplimit", true},
		{"a script named xdplimit: exe decides", "7 (xdplimit) S 1", "/usr/bin/python3", false},
		{"unreadable stat", "", "", false},
	} {
		dir := t.TempDir()
		if c.stat != "" {
			if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(c.stat), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if c.exe != "" {
			if err := os.Symlink(c.exe, filepath.Join(dir, "exe")); err != nil {
				t.Fatal(err)
			}
		}
		if got := procIsXdplimit(dir); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	for _, c := range []struct {
		in    string
		comm  string
		state byte
		ok    bool
	}{
		{"42 (xdplimit) S 1 42", "xdplimit", 'S', true},
		{"42 (a) b (c)) Z 1 42", "a) b (c)", 'Z', true},
		{"42 (x)", "", 0, false},
		{"garbage", "", 0, false},
	} {
		comm, state, ok := parseProcStat([]byte(c.in))
		if comm != c.comm || state != c.state || ok != c.ok {
			t.Errorf("parseProcStat(%q) = %q, %q, %v; want %q, %q, %v", c.in, comm, state, ok, c.comm, c.state, c.ok)
		}
	}
}
