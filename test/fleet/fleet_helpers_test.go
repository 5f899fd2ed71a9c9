// SPDX-License-Identifier: Apache-2.0

package fleet

// The fleet of a test: one real `xdplimit attach` per lab host, on the
// host's Eth0, with a policy whose fleet: section points at the lab's
// Redis. The readings the tests make of it are in fleet_readings_test.go,
// the floods they send in fleet_spread_test.go.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/fleetlab"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// fleetYAML is a policy's fleet: section for the given Redis URLs (several
// URLs: the seeds of a cluster), under a namespace unique to the call, so
// fleets of several tests sharing one Redis never see each other's keys.
func fleetYAML(sync string, cluster bool, urls ...string) string {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	var b strings.Builder
	fmt.Fprintf(&b, "fleet:\n  redis: [%s]\n  namespace: e2e-%s\n  sync: %s\n",
		strings.Join(urls, ", "), hex.EncodeToString(id), sync)
	if cluster {
		b.WriteString("  cluster: true\n")
	}
	return b.String()
}

// redisURL is the URL of the lab's single server.
func redisURL(l *fleetlab.Lab) string { return "redis://" + l.RedisAddr() + "/0" }

// clusterURLs are the seed URLs of a cluster.
func clusterURLs(c *testutil.RedisCluster) []string {
	var urls []string
	for _, a := range c.Addrs() {
		urls = append(urls, "redis://"+a)
	}
	return urls
}

// fleetOptions tune startFleet.
type fleetOptions struct {
	// Hosts are the lab hosts that run attach (default: all).
	Hosts []int
	// WaitUp waits until every process has logged its first successful
	// exchange with Redis ("Redis answers"); else only until it attached.
	WaitUp bool
	// Args are extra attach flags; Env extra environment (REDIS_PASSWORD=).
	Args []string
	Env  []string
}

// fleetRun is the attach processes of one test, by host index.
type fleetRun struct {
	lab    *fleetlab.Lab
	policy string // the policy file's path
	opts   fleetOptions
	procs  []*attachProc
}

// startFleet writes policy to a file and starts `xdplimit attach` with it
// on every chosen host at once, and waits until each is attached (and, with
// WaitUp, has reached Redis). Every process is stopped in t.Cleanup, which
// runs before the lab's (registered earlier), even when the test fails.
func startFleet(t *testing.T, l *fleetlab.Lab, policy string, o fleetOptions) *fleetRun {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if o.Hosts == nil {
		for i := range l.Hosts() {
			o.Hosts = append(o.Hosts, i)
		}
	}
	f := &fleetRun{lab: l, policy: path, opts: o, procs: make([]*attachProc, l.Hosts())}
	for _, i := range o.Hosts {
		f.procs[i] = f.start(t, i)
	}
	for _, i := range o.Hosts {
		f.procs[i].waitReady(t, o.WaitUp)
	}
	return f
}

// proc is host i's attach process (nil if that host runs none).
func (f *fleetRun) proc(i int) *attachProc { return f.procs[i] }

// attachProc is one `xdplimit attach` in a host's namespace.
type attachProc struct {
	host *fleetlab.Host
	args []string
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan struct{} // closed once the process is reaped
	err  error         // its exit status, set before done closes
}

// start forks attach from a thread inside host i's namespace: the child is
// born there and keeps the machine's mounts (unlike `ip netns exec`), so its
// pins are where loader.Open looks. The thread stays locked in Netns.Do
// until the child is reaped, so Pdeathsig kills the child only if the test
// binary dies, not when some thread exits.
func (f *fleetRun) start(t *testing.T, i int) *attachProc {
	t.Helper()
	h := f.lab.Host(i)
	// A small state table: three processes with the default million
	// entries would pin ~300 MB for one source.
	// --detach-on-exit: the cleanup's SIGTERM removes what it attached.
	args := append([]string{"attach", h.Eth0, "--policy", f.policy, "--max-sources", "65536", "--detach-on-exit"}, f.opts.Args...)
	p := &attachProc{host: h, args: args, out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(testutil.XdplimitBin(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(os.Environ(), f.opts.Env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL}
	started := make(chan error, 1)
	go func() {
		defer close(p.done)
		err := h.NS.Do(func() error {
			if err := p.cmd.Start(); err != nil {
				return err
			}
			started <- nil
			p.err = p.cmd.Wait()
			return nil
		})
		if err != nil {
			started <- err
		}
	}()
	if err := <-started; err != nil {
		t.Fatalf("host %d: start xdplimit %v: %v", i, args, err)
	}
	t.Cleanup(func() {
		if !p.exited() {
			// SIGTERM detaches and removes the pins (--detach-on-exit);
			// SIGKILL if it hangs.
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(testutil.MachineWait):
				t.Errorf("host %d: xdplimit ignored SIGTERM for %v; killed", i, testutil.MachineWait)
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("host %d: xdplimit %v output:\n%s", i, args, p.output())
		}
		// Whatever happened, leave no pins and no run-time files: the
		// lock and fleet status are removed only by a clean exit.
		_ = os.RemoveAll(loader.PinRoot + "/" + h.Eth0)
		for _, suffix := range []string{".lock", ".fleet.json", ".fleet.json.tmp"} {
			_ = os.Remove(filepath.Join(loader.RunDir(), h.Eth0+suffix))
		}
	})
	return p
}

func (p *attachProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *attachProc) output() string { return p.out.String() }

// waitReady waits until the process has attached and started its fleet
// sync, and with up until it has reached Redis.
func (p *attachProc) waitReady(t *testing.T, up bool) {
	t.Helper()
	p.waitFor(t, "msg=attached ", testutil.MachineWait)
	p.waitFor(t, "fleet sync started", testutil.MachineWait)
	if up {
		p.waitFor(t, "Redis answers", testutil.MachineWait)
	}
}

// waitFor waits until the process has logged s, failing if it exits first.
func (p *attachProc) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	testutil.WaitLogged(t, fmt.Sprintf("host %d: xdplimit", p.host.Index), p.out, func() (bool, error) {
		if !p.exited() {
			return false, nil
		}
		return true, p.err // set before done is closed
	}, s, timeout)
}
