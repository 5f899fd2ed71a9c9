// SPDX-License-Identifier: Apache-2.0

// Package service tests xdplimit the way its systemd unit runs it: the
// shipped unit's own ExecStart and ExecReload lines (with %i, the binary
// and the policy directory put in place) started in a receiving network
// namespace of the test's own, stopped with SIGTERM as systemd stops the
// main process, started again; real traffic from the live-frames generator
// in a sending namespace, counted where it arrives by the kernel's own SNMP
// counters. systemd itself does not run here (not PID 1), so the tests do
// what it would do with the unit's lines.
package service

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// unitFile is the shipped unit, from this package's directory.
const unitFile = "../../deploy/systemd/xdplimit@.service"

// Where the unit expects the binary and the policies; the tests put theirs.
const (
	unitBin = "/usr/sbin/xdplimit"
	unitEtc = "/etc/xdplimit/"
)

// unitLine is the unit's command for key (ExecStart, ExecReload) as systemd
// would run it for instance iface, with bin for the binary and etc for the
// policy directory. The shipped lines have no quoting or specifiers other
// than %i.
func unitLine(t *testing.T, key, iface, bin, etc string) []string {
	t.Helper()
	f, err := os.Open(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), key+"=")
		if !ok {
			continue
		}
		line = strings.ReplaceAll(line, "%i", iface)
		line = strings.ReplaceAll(line, unitEtc, strings.TrimSuffix(etc, "/")+"/")
		argv := strings.Fields(line)
		if len(argv) == 0 || argv[0] != unitBin {
			t.Fatalf("%s=%s: want it to run %s", key, line, unitBin)
		}
		argv[0] = bin
		return argv
	}
	t.Fatalf("%s has no %s line", unitFile, key)
	return nil
}

// instance is one run of the unit's main process.
type instance struct {
	argv []string
	cmd  *exec.Cmd
	out  *testutil.SyncBuffer
	done chan struct{}
	err  error // the exit status, once done is closed
}

// start runs argv (an ExecStart line) in ns. A child forked from a thread
// inside a namespace is born in it and keeps the host's mounts, as a unit
// does; the cleanup stops it as systemd would, if the test did not.
func start(t *testing.T, ns *testutil.Netns, argv []string) *instance {
	t.Helper()
	p := &instance{argv: argv, out: &testutil.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		err := ns.Do(func() error {
			if err := p.cmd.Start(); err != nil {
				return err
			}
			started <- nil
			p.err = p.cmd.Wait()
			close(p.done)
			return nil
		})
		if err != nil {
			started <- err
		}
	}()
	if err := <-started; err != nil {
		t.Fatalf("starting %v: %v", argv, err)
	}
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%v:\n%s", argv, p.out)
		}
	})
	return p
}

// stop does what systemd's stop does with the unit (KillMode=mixed,
// TimeoutStopSec=30): SIGTERM to the main process, SIGKILL if it is still
// there after 30 s (a test failure). It returns the exit status.
func (p *instance) stop(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(testutil.MachineWait):
		t.Errorf("%v ignored SIGTERM for %v; killed", p.argv, testutil.MachineWait)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// waitFor waits until the process has logged s, failing if it exits first.
func (p *instance) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	testutil.WaitLogged(t, fmt.Sprint(p.argv), p.out, func() (bool, error) {
		select {
		case <-p.done:
			return true, p.err
		default:
			return false, nil
		}
	}, s, timeout)
}

// run runs a command line of bin (a CLI command, or the unit's ExecReload)
// to its end, in the test's own namespace: the commands that read pins or
// the control socket need none other.
func run(t *testing.T, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.MachineWait)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

// cleanPins removes what the tests' interfaces leave: the limiter (the unit
// leaves it attached on purpose), the lock and the control socket.
func cleanPins(t *testing.T, ifaces ...string) {
	t.Cleanup(func() {
		for _, iface := range ifaces {
			if err := loader.Detach(iface); err != nil && !errors.Is(err, loader.ErrNotAttached) {
				t.Errorf("detach %s: %v", iface, err)
			}
			os.Remove(filepath.Join(loader.RunDir(), iface+".ctl"))
		}
	})
}

// xdpWatch polls the XDP program of iface in ns until stopped and counts
// the polls that found none: a restart must never leave the interface
// without its program, even for one poll.
type xdpWatch struct {
	polls, missing atomic.Uint64
	ids            sync.Map // program ids seen
	stop           chan struct{}
	done           chan error
}

func watchXDP(t *testing.T, ns *testutil.Netns, iface string) *xdpWatch {
	t.Helper()
	w := &xdpWatch{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		w.done <- ns.Do(func() error {
			for {
				select {
				case <-w.stop:
					return nil
				default:
				}
				l, err := netlink.LinkByName(iface)
				if err != nil {
					return err
				}
				w.polls.Add(1)
				if x := l.Attrs().Xdp; x == nil || !x.Attached {
					w.missing.Add(1)
				} else {
					w.ids.Store(x.ProgId, true)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}()
	t.Cleanup(func() { w.end(t) })
	return w
}

// end stops the watch and returns the polls made, the polls that found no
// program, and how many program ids were seen.
func (w *xdpWatch) end(t *testing.T) (polls, missing uint64, programs int) {
	t.Helper()
	select {
	case <-w.stop:
	default:
		close(w.stop)
		if err := <-w.done; err != nil {
			t.Errorf("watching the XDP program: %v", err)
		}
	}
	w.ids.Range(func(any, any) bool { programs++; return true })
	return w.polls.Load(), w.missing.Load(), programs
}

// banJSON is one line of `xdplimit bans --json`.
type banJSON struct {
	Prefix  string `json:"prefix"`
	Origin  string `json:"origin"`
	Reason  string `json:"reason"`
	Dropped uint64 `json:"packets_dropped"`
}

// bans lists the bans in force on iface with bin.
func bans(t *testing.T, bin, iface string) []banJSON {
	t.Helper()
	out, err := exec.Command(bin, "bans", iface, "--json").Output()
	if err != nil {
		t.Fatalf("bans %s: %v\n%s", iface, err, out)
	}
	var b []banJSON
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("bans %s: %v\n%s", iface, err, out)
	}
	return b
}

// get fetches a URL from ns.
func get(t *testing.T, ns *testutil.Netns, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: testutil.DialIn(ns)}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually polls cond every 50 ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// writePolicy writes the policy of interface iface into etc.
func writePolicy(t *testing.T, etc, iface, body string) string {
	t.Helper()
	path := filepath.Join(etc, iface+".yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func must(t *testing.T, err error, what ...any) {
	t.Helper()
	if err != nil {
		t.Fatal(fmt.Sprint(what...), ": ", err)
	}
}

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
