// SPDX-License-Identifier: Apache-2.0

// Package container runs the image `make image` builds the way a container
// runtime would: rootful podman, with the DaemonSet's arguments, its
// capabilities only and the host's bpffs, against a veth in namespaces the
// test creates. Podman keeps everything it stores in a directory of the
// test's own, removed at the end with every container.
package container

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// podman runs podman against a store of the test's own: images, containers,
// run-time state, events and network configuration all live under dir, and
// no systemd is asked for anything (cgroupfs, a file for events).
type podman struct {
	dir    string
	global []string
	// made are the directories outside dir that podman and runc create
	// where none existed, and leave behind: runc's state directory (empty
	// once its containers are gone; podman's --runtime-flag root=DIR
	// would move it, but the cleanup process conmon starts when a
	// container exits is not given that flag) and podman's cache of blob
	// locations, /var/lib/containers/cache, which podman load writes
	// whatever --root says. They are removed at the end; ones that
	// existed before are someone else's, and stay.
	made []string
}

// requireTools: podman and runc in PATH (make deps installs both). In CI a
// missing one fails the test.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	testutil.RequireRoot(t)
	for _, tool := range tools {
		_, err := exec.LookPath(tool)
		testutil.Require(t, err == nil, "%s not installed (make deps installs it)", tool)
	}
}

// newPodman makes the store and removes it, with every container in it,
// when the test ends, also when it fails.
func newPodman(t *testing.T) *podman {
	t.Helper()
	requireTools(t, "podman", "runc")
	dir, err := os.MkdirTemp("", "xdpltest-podman-")
	if err != nil {
		t.Fatal(err)
	}
	p := &podman{dir: dir}
	for _, d := range []string{runcRoot, containersLib} {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			p.made = append(p.made, d)
		}
	}
	for _, d := range []string{"root", "runroot", "tmp", "networks"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// runc rather than Debian 12's crun, which refuses hosts with hybrid
	// cgroups (v1 controllers beside v2), as this one has.
	p.global = []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--network-config-dir", filepath.Join(dir, "networks"),
		"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "file", "--runtime", "runc"}
	t.Cleanup(func() { p.remove(t) })
	return p
}

// remove removes every container (killing what runs), then the store. A
// mount podman left under the store (a container's /dev/shm) is unmounted
// first, or removing the directory would fail on it.
func (p *podman) remove(t *testing.T) {
	if out, err := p.run(time.Minute, "rm", "--force", "--all", "--time", "0"); err != nil {
		t.Errorf("podman rm --all: %v\n%s", err, out)
	}
	if out, err := p.run(time.Minute, "system", "reset", "--force"); err != nil {
		t.Logf("podman system reset: %v\n%s", err, out)
	}
	unmountUnder(t, p.dir)
	if err := os.RemoveAll(p.dir); err != nil {
		t.Errorf("removing podman's store: %v", err)
	}
	for _, d := range p.made {
		if d == containersLib {
			_ = os.RemoveAll(filepath.Join(d, "cache"))
		}
		// Fails, harmlessly, while another user keeps state there.
		_ = os.Remove(d)
	}
}

// runcRoot is where runc keeps the state of the containers it runs, as
// root; containersLib where podman keeps what --root does not cover.
const (
	runcRoot      = "/run/runc"
	containersLib = "/var/lib/containers"
)

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	var points []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", points[i], err)
		}
	}
}

// run runs podman with args, bounded by timeout, and returns its combined
// output.
func (p *podman) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", append(append([]string{}, p.global...), args...)...)
	// A podman stuck past the timeout gets SIGKILL; its conmon is its
	// container's and goes with rm --force.
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (podman %s took over %v)", err, args[0], timeout)
	}
	return out.String(), err
}

// must is run failing the test on error.
func (p *podman) must(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, err := p.run(timeout, args...)
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// ulimits gives the container limits within this process's own: podman
// otherwise asks for more open files than the hard limit, and a host
// without CAP_SYS_RESOURCE (as this one) refuses. A limit on processes as
// high as this process's own was refused too; the agent runs one process
// of a few dozen threads.
func ulimits(t *testing.T) []string {
	t.Helper()
	var args []string
	for _, l := range []struct {
		name     string
		resource int
		most     uint64
	}{{"nofile", unix.RLIMIT_NOFILE, 1 << 16}, {"nproc", unix.RLIMIT_NPROC, 4096}} {
		var r unix.Rlimit
		if err := unix.Getrlimit(l.resource, &r); err != nil {
			t.Fatal(err)
		}
		n := min(r.Cur, l.most)
		args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, n, n))
	}
	return args
}

// logs is what the container has written so far (stdout and stderr).
func (p *podman) logs(t *testing.T, name string) string {
	t.Helper()
	out, err := p.run(time.Minute, "logs", name)
	if err != nil {
		t.Fatalf("podman logs %s: %v\n%s", name, err, out)
	}
	return out
}

// waitLog waits until the container has logged every one of want, failing
// when it exits first or after timeout.
func (p *podman) waitLog(t *testing.T, name string, timeout time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := p.logs(t, name)
		missing := ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		state, _ := p.run(time.Minute, "inspect", "--format", "{{.State.Status}}", name)
		if s := strings.TrimSpace(state); s != "running" {
			t.Fatalf("container %s is %s before logging %s:\n%s", name, s, missing, out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s from container %s after %v:\n%s", missing, name, timeout, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
