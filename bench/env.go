// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/loader"
)

// env is what the benchmark steps share: the run's context, its log, and a
// stack of cleanups that close when the run ends. The namespaces and veth
// pairs come from internal/netns, as the tests' do, with the same cleanup
// guarantees: deleted when the run ends, on SIGINT, SIGTERM and SIGHUP
// (netns.CloseOnSignal), and swept by pid on the next run after a SIGKILL.
type env struct {
	ctx context.Context
	log *log.Logger

	mu       sync.Mutex
	cleanups []func()
}

// nsPrefix starts the names of the run's namespaces, for
// netns.CleanupStale.
const nsPrefix = "xdplbench-"

func newEnv(ctx context.Context, w io.Writer) *env {
	return &env{ctx: ctx, log: log.New(w, "bench: ", log.Ltime)}
}

func (e *env) Logf(format string, args ...any) { e.log.Printf(format, args...) }

// atClose registers f to run when the run ends.
func (e *env) atClose(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

// close runs the cleanups, last registered first.
func (e *env) close() {
	e.mu.Lock()
	cs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		if err := try(func() error { cs[i](); return nil }); err != nil {
			e.log.Printf("cleanup: %v", err)
		}
	}
}

// try runs fn and returns its panic, if any, as an error, so that one
// broken measurement does not end the run.
func try(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn()
}

var sweepOnce sync.Once

// newNetns creates a namespace that is deleted when the run ends. The first
// call sweeps namespaces of dead runs and installs netns.CloseOnSignal.
func (e *env) newNetns() (*netns.Netns, error) {
	sweepOnce.Do(func() { netns.Prepare(nsPrefix, e.Logf) })
	n, err := netns.New(nsPrefix)
	if err != nil {
		return nil, err
	}
	e.atClose(func() {
		if err := n.Close(); err != nil {
			e.Logf("delete network namespace %s: %v", n, err)
		}
	})
	return n, nil
}

// ifPrefix starts the name of every interface the loader pins state for
// (pins live in the host's bpffs, keyed by interface name, whatever the
// namespace), followed by our pid so that sweepPins can tell a dead run's.
const ifPrefix = "xb"

// attachIfname is the receiving interface of the control-plane veth: unique
// to this process because loader pins and locks are global.
func attachIfname() string { return fmt.Sprintf("%s%dr", ifPrefix, os.Getpid()) }

var pinName = regexp.MustCompile(`^` + ifPrefix + `([0-9]+)r$`)

// sweepPins removes the loader pins and lock files a killed benchmark run
// left behind: its namespaces are gone (newNetns sweeps them), but pins in
// bpffs outlive them.
func sweepPins(l *log.Logger) {
	for _, dir := range []string{loader.PinRoot, "/run/xdplimit"} {
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			name := ent.Name()
			if filepath.Ext(name) == ".lock" {
				name = name[:len(name)-len(".lock")]
			}
			m := pinName.FindStringSubmatch(name)
			if m == nil {
				continue
			}
			pid, _ := strconv.Atoi(m[1])
			if err := unix.Kill(pid, 0); err == nil || errors.Is(err, unix.EPERM) {
				continue // a live run
			}
			if err := os.RemoveAll(filepath.Join(dir, ent.Name())); err != nil {
				l.Printf("removing stale %s: %v", filepath.Join(dir, ent.Name()), err)
			} else {
				l.Printf("removed %s left by a dead benchmark run", filepath.Join(dir, ent.Name()))
			}
		}
	}
	_ = os.Remove(loader.PinRoot) // only when empty
}

// vethPair creates two namespaces and a two-queue veth pair between them;
// they are deleted when the run ends.
func (e *env) vethPair(name, peer string, subnet int) (*netns.Veth, error) {
	ns, err := e.newNetns()
	if err != nil {
		return nil, err
	}
	peerNS, err := e.newNetns()
	if err != nil {
		return nil, err
	}
	return netns.NewVeth(ns, peerNS, netns.VethConfig{
		Name: name, PeerName: peer, Queues: 2,
		Addr:      prefix("198.18.%d.1/24", subnet),
		PeerAddr:  prefix("198.18.%d.2/24", subnet),
		Addr6:     prefix("2001:2:0:%d::1/64", subnet),
		PeerAddr6: prefix("2001:2:0:%d::2/64", subnet),
	})
}
