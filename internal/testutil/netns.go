package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	// NetnsDir is where named namespaces are bind-mounted, the directory
	// `ip netns` and `nsenter --net=` use, so a developer can inspect a
	// namespace while its test is paused.
	NetnsDir = "/var/run/netns"

	// NetnsPrefix starts the name of every namespace the tests create, so
	// CleanupStale can find the ones a killed run left behind.
	NetnsPrefix = "xdpltest-"
)

// Netns is a named network namespace owned by one test.
type Netns struct {
	name string
	path string
	// f keeps the namespace alive independently of the bind mount and is
	// the handle Do passes to setns.
	f *os.File
}

// Name is the namespace's name as `ip netns list` shows it.
func (n *Netns) Name() string { return n.name }

// Path is the bind mount, usable with `nsenter --net=PATH` and with
// pktgen.Generator.Send.
func (n *Netns) Path() string { return n.path }

// String returns the name, for test logs.
func (n *Netns) String() string { return n.name }

var (
	// runID makes names unique per process; the pid lets CleanupStale tell
	// a live run's namespaces from a dead run's.
	runID   = fmt.Sprintf("%d-%s", os.Getpid(), randomHex(3))
	nsCount atomic.Uint64

	registry = struct {
		sync.Mutex
		live map[string]*Netns
	}{live: map[string]*Netns{}}

	setupOnce sync.Once
)

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// NewNetns creates a named network namespace with loopback up, and deletes
// it in tb.Cleanup, which runs even when the test fails. The first call in a
// process also sweeps namespaces left by dead test processes (CleanupStale)
// and installs a SIGINT/SIGTERM/SIGHUP handler that deletes this process's
// namespaces before the signal's default action kills it. A test binary
// killed by SIGKILL or by `go test -timeout` (which panics) cannot clean up;
// the next run's sweep removes what it left.
func NewNetns(tb testing.TB) *Netns {
	tb.Helper()
	RequireRoot(tb)
	setupOnce.Do(func() {
		if removed, err := CleanupStale(NetnsPrefix); err != nil {
			tb.Logf("sweeping stale namespaces: %v", err)
		} else if len(removed) > 0 {
			tb.Logf("removed namespaces left by dead test runs: %v", removed)
		}
		cleanupOnSignal()
	})

	n, err := createNetns(fmt.Sprintf("%s%s-%d", NetnsPrefix, runID, nsCount.Add(1)))
	if err != nil {
		tb.Fatalf("create network namespace: %v", err)
	}
	tb.Cleanup(func() {
		if err := n.remove(); err != nil {
			tb.Errorf("delete network namespace %s: %v", n.name, err)
		}
	})
	if err := n.Do(setLoopbackUp); err != nil {
		tb.Fatalf("netns %s: %v", n.name, err)
	}
	return n
}

func createNetns(name string) (*Netns, error) {
	if err := prepareNetnsDir(); err != nil {
		return nil, err
	}
	path := filepath.Join(NetnsDir, name)
	// The mount point must exist as a file; O_EXCL catches a name clash.
	mp, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, err
	}
	mp.Close()

	n := &Netns{name: name, path: path}
	registry.Lock()
	registry.live[name] = n
	registry.Unlock()

	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread moved to the new namespace ends with
		// this goroutine instead of running other goroutines there.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind-mount %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		n.remove()
		return nil, err
	}

	n.f, err = os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		n.remove()
		return nil, err
	}
	return n, nil
}

// prepareNetnsDir creates NetnsDir and, as `ip netns add` does, tries to
// make it a shared mount point so namespaces created later also appear in
// mount namespaces copied from this one (`ip netns exec`, unshare -m).
// Sharing is a convenience: where it fails (an initramfs root in a VM) the
// namespaces still work, so only creating the directory is an error.
func prepareNetnsDir() error {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: bind it onto itself, then share it.
		if unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, "") == nil {
			_ = unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	return nil
}

// remove deletes the name; the kernel destroys the namespace (and the
// devices in it) once the last socket, fd and thread referring to it is gone.
func (n *Netns) remove() error {
	registry.Lock()
	delete(registry.live, n.name)
	registry.Unlock()

	var errs []error
	if n.f != nil {
		errs = append(errs, n.f.Close())
		n.f = nil
	}
	if err := unix.Unmount(n.path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount: %w", err))
	}
	if err := os.Remove(n.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Do runs fn on an OS thread that is in the namespace. Only fn's own
// goroutine is in the namespace: goroutines fn starts run elsewhere. Sockets,
// netlink handles and BPF links fn creates stay bound to the namespace after
// Do returns. The thread is never returned to the Go scheduler: it exits
// with Do's goroutine, so fn may also change other per-thread state (CPU
// affinity, further setns) without leaking it.
//
// A panic in fn is re-raised in the caller, and t.FailNow (t.Fatal) in fn
// ends the caller's goroutine too, as if fn had run there.
func (n *Netns) Do(fn func() error) error {
	if n.f == nil {
		return fmt.Errorf("netns %s: already deleted", n.name)
	}
	type result struct {
		err    error
		panic  any
		goexit bool
	}
	done := make(chan result, 1)
	go func() {
		returned := false
		defer func() {
			if !returned {
				// recover returns nil under runtime.Goexit.
				if p := recover(); p != nil {
					done <- result{panic: p}
				} else {
					done <- result{goexit: true}
				}
			}
		}()
		runtime.LockOSThread()
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			returned = true
			done <- result{err: fmt.Errorf("setns %s: %w", n.name, err)}
			return
		}
		err := fn()
		returned = true
		done <- result{err: err}
	}()
	r := <-done
	switch {
	case r.panic != nil:
		panic(fmt.Sprintf("in netns %s: %v", n.name, r.panic))
	case r.goexit:
		runtime.Goexit()
	}
	return r.err
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

// CleanupStale deletes namespaces in NetnsDir named prefix<pid>-... whose
// process no longer exists, and returns their names. Namespaces of running
// processes (parallel `go test` packages) and names without a pid are kept.
func CleanupStale(prefix string) ([]string, error) {
	entries, err := os.ReadDir(NetnsDir)
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
		stale := &Netns{name: name, path: filepath.Join(NetnsDir, name)}
		if err := stale.remove(); err != nil {
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

// cleanupOnSignal deletes this process's namespaces on an interrupt and then
// lets the signal's default action end the process, so Ctrl-C during
// `go test` leaves nothing in NetnsDir.
func cleanupOnSignal() {
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
			n.remove()
		}
		fmt.Fprintf(os.Stderr, "testutil: %v: deleted %d network namespaces\n", sig, len(live))
		signal.Reset(sig)
		unix.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
}
