// SPDX-License-Identifier: Apache-2.0

package packaging_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// wantsDir is where `systemctl enable xdplimit@IFACE` puts its link.
const wantsDir = "/etc/systemd/system/multi-user.target.wants"

// attachAsUnit leaves a limiter the way an enabled, then stopped, unit
// instance does: the installed binary attaches it on a veth of the test's
// own with the installed example policy, SIGTERM ends the process and the
// limiter stays attached and pinned. It returns the interface's namespace
// and name.
func attachAsUnit(t *testing.T) (*testutil.Netns, string) {
	t.Helper()
	veth := testutil.NewUniqueVethPair(t, "xdpk", "xdpj")
	iface := veth.Name
	enabled := filepath.Join(wantsDir, "xdplimit@"+iface+".service")
	if err := os.MkdirAll(wantsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/systemd/system/xdplimit@.service", enabled); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(enabled)
		if _, err := os.Stat(filepath.Join(loader.PinRoot, iface)); err == nil {
			if err := loader.Detach(iface); err != nil {
				t.Errorf("cleanup: detach %s: %v", iface, err)
			}
		}
	})

	cmd := exec.Command("/usr/sbin/xdplimit", "attach", iface, "--policy", "/etc/xdplimit/example.yaml", "--metrics-addr", "")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The child inherits the namespace of the thread that starts it.
	if err := veth.NS.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "msg=attached") {
				done <- nil
				for sc.Scan() { // keep draining until the process exits
				}
				return
			}
		}
		done <- errors.New("attach exited before attaching")
	}()
	// A hard bound, not a timing assertion: attach takes seconds, and a
	// hung one must not hold the test until go test's own timeout.
	timer := time.AfterFunc(testutil.MachineWait, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	if err := <-done; err != nil {
		cmd.Wait()
		t.Fatalf("%v:\n%s", err, log.String())
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("attach after SIGTERM: %v", err)
	}
	if veth.NS.XDPProgID(t, iface) == 0 {
		t.Fatalf("%s: no XDP program after the attach process stopped (the unit's stop keeps it)", iface)
	}
	return veth.NS, iface
}
