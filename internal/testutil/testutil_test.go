package testutil

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
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

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

func TestNetnsLifecycle(t *testing.T) {
	RequireRoot(t)
	host, err := netnsInode()
	if err != nil {
		t.Fatal(err)
	}

	var ns *Netns
	var inner uint64
	t.Run("create", func(t *testing.T) {
		ns = NewNetns(t)
		if !strings.HasPrefix(ns.Name(), NetnsPrefix) {
			t.Errorf("name %q lacks prefix %q", ns.Name(), NetnsPrefix)
		}
		if !mounted(realPath(t, ns.Path())) {
			t.Errorf("%s is not a mount point", ns.Path())
		}
		if err := ns.Do(func() error {
			var err error
			inner, err = netnsInode()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if inner == host {
			t.Fatal("Do ran in the host namespace")
		}
		// The caller's thread must not have moved.
		if now, _ := netnsInode(); now != host {
			t.Fatal("Do moved the calling thread")
		}
		var st unix.Stat_t
		if err := unix.Stat(ns.Path(), &st); err != nil || st.Ino != inner {
			t.Fatalf("bind mount shows namespace %d, want %d (err %v)", st.Ino, inner, err)
		}
	})
	// The subtest's cleanup has run: nothing may be left.
	if _, err := os.Stat(ns.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after cleanup (err %v)", ns.Path(), err)
	}
	if mounted(realPath(t, ns.Path())) {
		t.Errorf("%s still mounted after cleanup", ns.Path())
	}
	if err := ns.Do(func() error { return nil }); err == nil {
		t.Error("Do on a deleted namespace succeeded")
	}
}

func TestDoPanicAndGoexit(t *testing.T) {
	ns := NewNetns(t)
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

func TestDoErrorAndThreadState(t *testing.T) {
	ns := NewNetns(t)
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
	RequireRoot(t)
	live := NewNetns(t)
	// A namespace named after a pid that cannot exist (above pid_max) is
	// stale; one named after this process is live and must survive. Test
	// binaries of other packages sweep concurrently and may delete the
	// stale one first, even while it is being created: retry that.
	var stale *Netns
	for i := 0; stale == nil; i++ {
		n, err := createNetns(fmt.Sprintf("%s4194305-%s-%d", NetnsPrefix, randomHex(3), i))
		if err != nil && i < 5 {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		stale = n
	}
	stale.f.Close()
	stale.f = nil
	t.Cleanup(func() { stale.remove() })

	removed, err := CleanupStale(NetnsPrefix)
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

func TestVethPair(t *testing.T) {
	// a outlives the subtest; b and the pair die with the subtest. The
	// pair's end in a vanishing proves b was destroyed, not just unnamed:
	// a leaked fd or socket would keep b, and so the pair, alive.
	a := NewNetns(t)
	var v *Veth
	t.Run("up", func(t *testing.T) {
		v = NewVeth(t, a, NewNetns(t), VethConfig{Queues: 2})
		check := func(ns *Netns, name string, addrs ...netip.Addr) {
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
		check(v.NS, v.Name, v.Addr, v.Addr6)
		check(v.PeerNS, v.PeerName, v.PeerAddr, v.PeerAddr6)
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

// TestCountersMove sends UDP datagrams over real sockets from one namespace
// to the other and checks the receiver's counters see them and the
// sender's do not.
func TestCountersMove(t *testing.T) {
	v := NewVethPair(t, VethConfig{})
	const n = 20

	for _, tc := range []struct {
		name string
		dst  netip.Addr
		get  func(Counters) (received, noPorts uint64)
	}{
		{"IPv4", v.PeerAddr, func(c Counters) (uint64, uint64) { return c.IPInReceives, c.UDPNoPorts }},
		{"IPv6", v.PeerAddr6, func(c Counters) (uint64, uint64) { return c.IP6InReceives, c.UDP6NoPorts }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One datagram to a listening socket, the rest to a closed port.
			var conn *net.UDPConn
			if err := v.PeerNS.Do(func() error {
				var err error
				conn, err = net.ListenUDP("udp", &net.UDPAddr{IP: tc.dst.AsSlice(), Port: 9000})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			before := v.PeerNS.Snapshot(t)
			senderBefore := v.NS.Snapshot(t)
			if err := v.NS.Do(func() error {
				c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: tc.dst.AsSlice(), Port: 9000})
				if err != nil {
					return err
				}
				defer c.Close()
				if _, err := c.Write([]byte("hello")); err != nil {
					return err
				}
				// Unconnected: a connected socket would report the ICMP
				// port-unreachable replies as errors and drop later sends.
				unconn, err := net.ListenUDP("udp", nil)
				if err != nil {
					return err
				}
				defer unconn.Close()
				closed := &net.UDPAddr{IP: tc.dst.AsSlice(), Port: 9001}
				for i := 0; i < n-1; i++ {
					if _, err := unconn.WriteToUDP([]byte("x"), closed); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}

			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			m, _, err := conn.ReadFromUDP(buf)
			if err != nil || string(buf[:m]) != "hello" {
				t.Fatalf("read %q, %v", buf[:m], err)
			}

			d := v.PeerNS.Snapshot(t).Delta(before)
			received, noPorts := tc.get(d)
			t.Logf("receiver delta: received %d, no ports %d, datagrams %d/%d",
				received, noPorts, d.UDPInDatagrams, d.UDP6InDatagrams)
			if received < n {
				t.Errorf("receiver saw %d packets, want >= %d", received, n)
			}
			if noPorts != n-1 {
				t.Errorf("receiver counted %d datagrams to a closed port, want %d", noPorts, n-1)
			}
			if got := d.UDPInDatagrams + d.UDP6InDatagrams; got != 1 {
				t.Errorf("receiver read %d datagrams, want 1", got)
			}
			sd := v.NS.Snapshot(t).Delta(senderBefore)
			if sd.UDPNoPorts+sd.UDP6NoPorts != 0 {
				t.Errorf("sender counted UDP datagrams: %+v", sd)
			}
		})
	}
}

func TestParseSNMP(t *testing.T) {
	in := "Ip: Forwarding DefaultTTL InReceives\nIp: 2 64 42\nUdp: InDatagrams NoPorts\nUdp: 7 3\n"
	out := map[string]uint64{}
	if err := parseSNMP([]byte(in), out); err != nil {
		t.Fatal(err)
	}
	if out["Ip.InReceives"] != 42 || out["Udp.NoPorts"] != 3 || out["Udp.InDatagrams"] != 7 {
		t.Fatalf("parsed %v", out)
	}
	if err := parseSNMP([]byte("Ip: A B\nIp: 1\n"), out); err == nil {
		t.Fatal("mismatched lines accepted")
	}
	out6 := map[string]uint64{}
	if err := parseSNMP6([]byte("Ip6InReceives   \t 12\nUdp6NoPorts 4\n"), out6); err != nil {
		t.Fatal(err)
	}
	c := Counters{Raw: out6}
	c.fillFields()
	if c.IP6InReceives != 12 || c.UDP6NoPorts != 4 {
		t.Fatalf("parsed %+v", c)
	}
	d := c.Delta(Counters{Raw: map[string]uint64{"Ip6InReceives": 10, "Udp6NoPorts": 9}})
	if d.IP6InReceives != 2 || d.UDP6NoPorts != 0 {
		t.Fatalf("delta %+v", d)
	}
}

func TestRunTimeout(t *testing.T) {
	out, err := RunTimeout(5*time.Second, "sh", "-c", "echo hi")
	if err != nil || strings.TrimSpace(string(out)) != "hi" {
		t.Fatalf("got %q, %v", out, err)
	}
	start := time.Now()
	// The grandchild sleep must die with the group, or Wait would hang.
	_, err = RunTimeout(200*time.Millisecond, "sh", "-c", "sleep 30 & sleep 30")
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %v to time out", el)
	}
}

func TestRequireFailsInCI(t *testing.T) {
	// Run Require against a fake TB to observe Fatalf vs Skipf.
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		f := &fakeTB{TB: t}
		func() {
			defer func() { recover() }()
			Require(f, false, "reason %d", 1)
		}()
		if ci == "" && (!f.skipped || f.failed) {
			t.Errorf("CI unset: skipped=%v failed=%v, want a skip", f.skipped, f.failed)
		}
		if ci != "" && (!f.failed || f.skipped) {
			t.Errorf("CI set: skipped=%v failed=%v, want a failure", f.skipped, f.failed)
		}
		if !strings.Contains(f.msg, "reason 1") {
			t.Errorf("message %q lacks the reason", f.msg)
		}
	}
}

type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = true
	f.msg = fmt.Sprintf(format, args...)
	panic("skip")
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

func TestRequireLiveFrames(t *testing.T) {
	RequireLiveFrames(t)
}
