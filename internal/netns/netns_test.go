// SPDX-License-Identifier: Apache-2.0

package netns_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// newNS is a namespace deleted when the test ends (testutil's wrapper).
func newNS(t *testing.T) *netns.Netns { return testutil.NewNetns(t).Netns }

// netnsInode identifies the namespace the calling thread is in.
func netnsInode() (uint64, error) {
	var st unix.Stat_t
	err := unix.Stat("/proc/thread-self/ns/net", &st)
	return st.Ino, err
}

func mounted(path string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 && fields[4] == path {
			return true
		}
	}
	return false
}

// realPath resolves the directory part (/var/run is usually a symlink to
// /run, and mountinfo shows the resolved path).
func realPath(t *testing.T, path string) string {
	dir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, filepath.Base(path))
}

// TestNewDoClose creates a namespace, runs code in it, checks that no
// thread of the process other than Do's own is left in it, and that Close
// removes the name and the mount.
func TestNewDoClose(t *testing.T) {
	testutil.RequireRoot(t)
	host, err := netnsInode()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New(testutil.NetnsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() }) // on failure; a second Close is harmless
	if !mounted(realPath(t, ns.Path())) {
		t.Errorf("%s is not a mount point", ns.Path())
	}

	var inner uint64
	for range 20 {
		if err := ns.Do(func() error {
			inner, err = netnsInode()
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if inner == host {
		t.Fatal("Do ran in the host namespace")
	}
	var st unix.Stat_t
	if err := unix.Stat(ns.Path(), &st); err != nil || st.Ino != inner {
		t.Fatalf("bind mount shows namespace %d, want %d (err %v)", st.Ino, inner, err)
	}
	// Neither the caller's thread nor any thread the scheduler hands out
	// afterwards may be in the namespace.
	if now, _ := netnsInode(); now != host {
		t.Fatal("Do moved the calling thread")
	}
	var wg sync.WaitGroup
	var leaked sync.Map
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if ino, _ := netnsInode(); ino != host {
				leaked.Store(ino, true)
			}
		})
	}
	wg.Wait()
	leaked.Range(func(k, _ any) bool { t.Errorf("a pooled thread is in namespace %v", k); return true })

	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ns.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after Close (err %v)", ns.Path(), err)
	}
	if mounted(realPath(t, ns.Path())) {
		t.Errorf("%s still mounted after Close", ns.Path())
	}
	if err := ns.Do(func() error { return nil }); err == nil {
		t.Error("Do on a closed namespace succeeded")
	}
}

// TestNewAnonymous: Do runs in a namespace of its own, which has no name.
func TestNewAnonymous(t *testing.T) {
	testutil.RequireRoot(t)
	host, err := netnsInode()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.NewAnonymous()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var inner uint64
	if err := ns.Do(func() (err error) { inner, err = netnsInode(); return err }); err != nil {
		t.Fatal(err)
	}
	if inner == host || ns.Path() != "" {
		t.Errorf("anonymous namespace %d (host %d) at path %q", inner, host, ns.Path())
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDoAt(t *testing.T) {
	ns := newNS(t)
	var inner uint64
	if err := netns.DoAt(ns.Path(), func() (err error) { inner, err = netnsInode(); return err }); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(ns.Path(), &st); err != nil || st.Ino != inner {
		t.Fatalf("DoAt ran in namespace %d, want %d (err %v)", inner, st.Ino, err)
	}
	host, _ := netnsInode()
	if err := netns.DoAt("", func() (err error) { inner, err = netnsInode(); return err }); err != nil || inner != host {
		t.Fatalf(`DoAt("") ran in namespace %d, want the caller's %d (err %v)`, inner, host, err)
	}
}

func TestDoPanicAndGoexit(t *testing.T) {
	ns := newNS(t)
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "boom") {
				t.Errorf("recovered %v, want the panic from fn", r)
			}
		}()
		ns.Do(func() error { panic("boom") })
	}()

	// runtime.Goexit in fn (what t.FailNow does) ends the caller too.
	finished := make(chan bool, 1)
	go func() {
		defer func() { finished <- false }()
		ns.Do(func() error { runtime.Goexit(); return nil })
		finished <- true
	}()
	if <-finished {
		t.Error("caller went on after fn called runtime.Goexit")
	}
}

func TestDoErrorAndLoopback(t *testing.T) {
	ns := newNS(t)
	want := errors.New("boom")
	if err := ns.Do(func() error { return want }); !errors.Is(err, want) {
		t.Fatalf("Do returned %v, want %v", err, want)
	}
	// Loopback must be up in a new namespace.
	if err := ns.Do(func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		if lo.Flags&net.FlagUp == 0 {
			return errors.New("lo is down")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestCleanupStale(t *testing.T) {
	live := newNS(t)
	// A namespace named after a pid that cannot exist (above pid_max) is
	// stale; one named after this process is live and must survive. Test
	// binaries of other packages sweep concurrently and may delete the
	// stale one first, even while it is being created: retry that.
	var stale *netns.Netns
	for i := 0; stale == nil; i++ {
		n, err := netns.Create(fmt.Sprintf("%s4194305-%d-%d", testutil.NetnsPrefix, os.Getpid(), i))
		if err != nil && i < 5 {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		stale = n
	}
	t.Cleanup(func() { stale.Close() })

	removed, err := netns.CleanupStale(testutil.NetnsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range removed {
		if name == live.Name() {
			t.Errorf("CleanupStale removed live namespace %s", name)
		}
	}
	if _, err := os.Stat(stale.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists (removed %v)", stale.Name(), removed)
	}
	if _, err := os.Stat(live.Path()); err != nil {
		t.Errorf("live namespace: %v", err)
	}
}

// TestVeth checks that both ends are up, addressed and multi-queue, and that
// closing one namespace destroys the pair.
func TestVeth(t *testing.T) {
	// a outlives the subtest; b and the pair die with the subtest. The
	// pair's end in a vanishing proves b was destroyed, not just unnamed:
	// a leaked fd or socket would keep b, and so the pair, alive.
	a := newNS(t)
	var v *netns.Veth
	t.Run("up", func(t *testing.T) {
		var err error
		v, err = netns.NewVeth(a, newNS(t), netns.VethConfig{Queues: 2})
		if err != nil {
			t.Fatal(err)
		}
		checkLinkUp(t, v.NS, v.Name, v.Addr, v.Addr6)
		checkLinkUp(t, v.PeerNS, v.PeerName, v.PeerAddr, v.PeerAddr6)
		if len(v.PeerMAC) != 6 || v.PeerIndex == 0 {
			t.Errorf("peer MAC %v index %d", v.PeerMAC, v.PeerIndex)
		}
		if err := v.PeerNS.Do(func() error {
			b, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/rp_filter")
			if err == nil && strings.TrimSpace(string(b)) != "0" {
				t.Errorf("rp_filter is %s", b)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	})
	if v == nil {
		return
	}
	if _, err := os.Stat(v.PeerNS.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind", v.PeerNS.Path())
	}
	// Namespace teardown runs asynchronously in a kernel workqueue.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var gone bool
		if err := a.Do(func() error {
			_, err := net.InterfaceByName(v.Name)
			gone = err != nil
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists in %s: the peer namespace was not destroyed", v.Name, a)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkLinkUp: the link name in ns is up, has two queues each way and
// holds addrs.
func checkLinkUp(t *testing.T, ns *netns.Netns, name string, addrs ...netip.Addr) {
	t.Helper()
	err := ns.Do(func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		la := l.Attrs()
		if la.Flags&net.FlagUp == 0 {
			t.Errorf("%s is down", name)
		}
		if la.NumRxQueues != 2 || la.NumTxQueues != 2 {
			t.Errorf("%s has %d rx / %d tx queues, want 2", name, la.NumRxQueues, la.NumTxQueues)
		}
		have, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, want := range addrs {
			ok := false
			for _, ad := range have {
				if ip, _ := netip.AddrFromSlice(ad.IP); ip.Unmap() == want {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s lacks %s (has %v)", name, want, have)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
