// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/cpupin"
)

// Dir is where named namespaces are bind-mounted, the directory `ip netns`
// and `nsenter --net=` use, so a developer can inspect a namespace while
// the program that made it is paused.
const Dir = "/var/run/netns"

// Netns is a network namespace held by an open file: one this process
// created under Dir (New) or without a name (NewAnonymous), or one it
// opened by path (Open).
type Netns struct {
	name string
	path string
	// owned: Close also deletes the name (New made it).
	owned bool
	// f keeps the namespace alive independently of the bind mount and is
	// the handle Do passes to setns.
	f *os.File
}

// Name is the namespace's name as `ip netns list` shows it.
func (n *Netns) Name() string { return n.name }

// Path is the bind mount, usable with `nsenter --net=PATH` and with
// pktgen.Generator.Send; "" for an anonymous namespace.
func (n *Netns) Path() string { return n.path }

// String returns the name, for logs.
func (n *Netns) String() string { return n.name }

var (
	// runID makes names unique per process; the pid lets CleanupStale tell
	// a live process's namespaces from a dead one's.
	runID   = fmt.Sprintf("%d-%s", os.Getpid(), randomHex(3))
	nsCount atomic.Uint64

	registry = struct {
		sync.Mutex
		live map[string]*Netns
	}{live: map[string]*Netns{}}
)

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// New creates a network namespace named prefix<pid>-<random>-<n> under Dir,
// with loopback up. Close deletes it; the kernel destroys it, with the
// devices in it, once no file, socket or thread refers to it any more.
// CleanupStale finds the names by prefix and pid if the process dies first.
func New(prefix string) (*Netns, error) {
	n, err := create(fmt.Sprintf("%s%s-%d", prefix, runID, nsCount.Add(1)))
	if err != nil {
		return nil, fmt.Errorf("create network namespace: %w", err)
	}
	if err := n.Do(setLoopbackUp); err != nil {
		n.Close()
		return nil, fmt.Errorf("netns %s: %w", n.name, err)
	}
	return n, nil
}

// Open opens the namespace at path (a bind mount such as Dir/NAME, or
// /proc/PID/ns/net). Close only closes the file.
func Open(path string) (*Netns, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	return &Netns{name: filepath.Base(path), path: path, f: f}, nil
}

// NewAnonymous creates a network namespace without a name, kept only by
// the returned Netns: Close, or the process's exit, destroys it with the
// devices in it. Its loopback stays down. For private scratch namespaces
// that nothing outside the process needs to find.
func NewAnonymous() (*Netns, error) {
	n := &Netns{name: "anonymous network namespace"}
	err := cpupin.Locked(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		var err error
		n.f, err = os.OpenFile("/proc/thread-self/ns/net", os.O_RDONLY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create network namespace: %w", err)
	}
	return n, nil
}

func create(name string) (*Netns, error) {
	if err := prepareDir(); err != nil {
		return nil, err
	}
	path := filepath.Join(Dir, name)
	// The mount point must exist as a file; O_EXCL catches a name clash.
	mp, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, err
	}
	mp.Close()

	n := &Netns{name: name, path: path, owned: true}
	registry.Lock()
	registry.live[name] = n
	registry.Unlock()

	err = cpupin.Locked(func() error {
		// cpupin.Locked discards this thread afterwards, so it never runs other
		// goroutines in the new namespace.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount %s: %w", path, err)
		}
		return nil
	})
	if err == nil {
		n.f, err = os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// prepareDir creates Dir and, as `ip netns add` does, tries to make it a
// shared mount point so namespaces created later also appear in mount
// namespaces copied from this one (`ip netns exec`, unshare -m). Sharing is
// a convenience: where it fails (an initramfs root in a VM) the namespaces
// still work, so only creating the directory is an error.
func prepareDir() error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: bind it onto itself, then share it.
		if unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, "") == nil {
			_ = unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	return nil
}

// Close closes the namespace's file and, for a namespace New created,
// deletes its name. Closing twice is harmless.
func (n *Netns) Close() error {
	var errs []error
	if n.f != nil {
		errs = append(errs, n.f.Close())
		n.f = nil
	}
	if n.owned {
		errs = append(errs, n.unmount())
	}
	return errors.Join(errs...)
}

func (n *Netns) unmount() error {
	registry.Lock()
	delete(registry.live, n.name)
	registry.Unlock()

	var errs []error
	if err := unix.Unmount(n.path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount: %w", err))
	}
	if err := os.Remove(n.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Do runs fn on an OS thread that is in the namespace, with cpupin.Locked: only
// fn's own goroutine is in the namespace, goroutines fn starts run
// elsewhere, and the thread is discarded afterwards. Sockets, netlink
// handles and BPF links fn creates stay bound to the namespace after Do
// returns.
func (n *Netns) Do(fn func() error) error {
	if n.f == nil {
		return fmt.Errorf("netns %s: already closed", n.name)
	}
	return cpupin.Locked(func() error {
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns %s: %w", n.name, err)
		}
		return fn()
	})
}

// DialContext opens a connection from inside the namespace (net.Dialer's
// DialContext run in Do): the socket stays in the namespace, whichever
// thread then uses it.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.Do(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// DoAt runs fn like Do in the namespace at path, or in the caller's own
// namespace when path is "".
func DoAt(path string, fn func() error) error {
	if path == "" {
		return cpupin.Locked(fn)
	}
	n, err := Open(path)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Do(fn)
}

// SetSysctl writes a sysctl of the namespace, key in dotted form
// ("net.ipv4.conf.all.rp_filter"). /proc/sys/net resolves the namespace of
// the thread that opens it, so this runs inside Do.
func (n *Netns) SetSysctl(key, value string) error {
	return n.Do(func() error { return writeSysctl(key, value) })
}

func writeSysctl(key, value string) error {
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

func setLoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// CleanupStale deletes namespaces in Dir named prefix<pid>-... whose process
// no longer exists, and returns their names. Namespaces of running processes
// (parallel `go test` packages) and names without a pid are kept.
func CleanupStale(prefix string) ([]string, error) {
	entries, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(name, prefix), "-")
		if !strings.HasPrefix(name, prefix) || !ok {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		stale := &Netns{name: name, path: filepath.Join(Dir, name), owned: true}
		if err := stale.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// Prepare is what a program that creates namespaces under prefix does once,
// before the first: it deletes those of dead processes (CleanupStale),
// telling logf what it removed, and installs CloseOnSignal.
func Prepare(prefix string, logf func(format string, args ...any)) {
	if removed, err := CleanupStale(prefix); err != nil {
		logf("sweeping stale namespaces: %v", err)
	} else if len(removed) > 0 {
		logf("removed namespaces left by dead processes: %v", removed)
	}
	CloseOnSignal()
}

var signalOnce sync.Once

// CloseOnSignal makes SIGINT, SIGTERM and SIGHUP delete every namespace New
// made and not yet closed, before the signal's default action ends the
// process, so that Ctrl-C during `go test` leaves nothing in Dir. Programs
// that shut down through their own signal handling need not call it.
// Calling it again does nothing.
func CloseOnSignal() {
	signalOnce.Do(func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
		go func() {
			sig := <-c
			registry.Lock()
			live := make([]*Netns, 0, len(registry.live))
			for _, n := range registry.live {
				live = append(live, n)
			}
			registry.Unlock()
			for _, n := range live {
				n.unmount()
			}
			fmt.Fprintf(os.Stderr, "netns: %v: deleted %d network namespaces\n", sig, len(live))
			signal.Reset(sig)
			unix.Kill(os.Getpid(), sig.(syscall.Signal))
		}()
	})
}
