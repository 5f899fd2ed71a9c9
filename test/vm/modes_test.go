// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// 802.1Q-tagged traffic is parsed and matched by VLAN id: xdplimit's own
// counts, on any kernel (frames tagged for a VLAN the receiver has no device
// for are dropped by its stack, after XDP).
func TestVLANTaggedTraffic(t *testing.T) {
	vlanFlood(t, false)
}

// What passes reaches the receiver's stack through its VLAN device. It needs
// 802.1Q devices (CONFIG_VLAN_8021Q): the VMs load 8021q and run it; a
// kernel without them fails it in CI, which is why the host's `make test-go`
// (whose kernel is built without 802.1Q) names it in its skip list.
func TestVLANTaggedTrafficReachesStack(t *testing.T) {
	vlanFlood(t, true)
}

func vlanFlood(t *testing.T, stack bool) {
	l := newLab(t, 1)
	vlanAddr := netip.MustParsePrefix("198.19.0.2/24")
	if stack {
		err := l.PeerNS.Do(func() error {
			vl := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "v100" + l.PeerName[2:6], ParentIndex: l.PeerIndex}, VlanId: 100}
			if err := netlink.LinkAdd(vl); err != nil {
				return err
			}
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: vlanAddr.Addr().AsSlice(), Mask: net.CIDRMask(24, 32)}}
			if err := netlink.AddrAdd(vl, addr); err != nil {
				return err
			}
			return netlink.LinkSetUp(vl)
		})
		testutil.Require(t, !errors.Is(err, unix.EOPNOTSUPP),
			"this kernel has no 802.1Q devices (CONFIG_VLAN_8021Q, module 8021q): the receiver's stack cannot count tagged frames")
		if err != nil {
			t.Fatalf("creating the VLAN device: %v", err)
		}
	}
	l.attach(t, `
rules:
  - name: vlan100
    match: {vlan: [100]}
    limit: {algorithm: token_bucket, rate: 2000/s, burst: 1000}
`)
	f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, VLANs: []pktgen.VLAN{{ID: 100}},
		Src: netip.MustParseAddr("198.19.0.1"), Dst: vlanAddr.Addr(), SrcPort: 40000, DstPort: 9, Payload: 18}
	before, lost0 := l.PeerNS.Snapshot(t), l.ringDrops(t)
	res := l.flood(t, f.MustBuild(), pktgen.Sources{}, floodCount(3_000_000))
	got, lost := l.PeerNS.Snapshot(t).Delta(before).IPReceives(), l.ringDrops(t)-lost0
	pass, drop, _ := l.ruleCounts(t, "vlan100")
	t.Logf("sent %v; passed %d, dropped %d, stack %d; veth dropped %d", res, pass, drop, got, lost)

	checkDelivered(t, pass+drop, res.Sent, lost)
	if stack {
		checkStack(t, got, pass)
	}
	checkAdmitted(t, "admitted", float64(pass), 1000+2000*res.Elapsed.Seconds(), res, 1)
}

// --mode auto falls back to generic XDP where the driver has none (a bridge
// has no native XDP), and logs why.
func TestGenericFallback(t *testing.T) {
	l := newLab(t, 1)
	name := "xb" + testutil.UniqueID(t, "xb")
	err := l.PeerNS.Do(func() error {
		d := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		if err := netlink.LinkAdd(d); err != nil {
			return err
		}
		return netlink.LinkSetUp(d)
	})
	if err != nil {
		t.Fatalf("creating a bridge: %v", err)
	}
	path := writePolicy(t, "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}\n")
	p := l.start(t, "attach", name, "--policy", path, "--detach-on-exit")
	t.Cleanup(func() { removePins(name) })
	p.waitAttached(t)
	p.waitFor(t, "mode=generic", time.Second)
	// It says why, and what generic mode costs.
	p.waitFor(t, "native XDP failed; running in generic mode", time.Second)
	p.waitFor(t, "native_err=", time.Second)
	var x *netlink.LinkXdp
	_ = l.PeerNS.Do(func() error {
		nl, err := netlink.LinkByName(name)
		if err == nil {
			x = nl.Attrs().Xdp
		}
		return err
	})
	if x == nil || !x.Attached || x.AttachMode != 2 {
		t.Fatalf("want a generic-mode program on %s, got %+v", name, x)
	}
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("attach: %v\n%s", err, p.out)
	}
	_ = l.PeerNS.Do(func() error {
		nl, err := netlink.LinkByName(name)
		if err == nil {
			x = nl.Attrs().Xdp
		}
		return err
	})
	if x != nil && x.Attached {
		t.Errorf("program still attached to %s after detach", name)
	}
}

// --mode generic attaches in generic (skb) mode and enforces there: a
// plain UDP send from the sender's stack is limited, and what the rule
// passes is what reaches the receiver's stack. The live-frames generator
// cannot feed it: its XDP_TX frames reach a veth peer only through a native
// program, and a native and a generic program cannot share an interface.
func TestGenericMode(t *testing.T) {
	l := newLab(t, 1)
	const burst, rate = 100, 1000
	p := l.attach(t, fmt.Sprintf("rules:\n  - name: r\n    match: {protocol: udp, src_cidrs: [%s/32], dst_ports: [9]}\n"+
		"    limit: {algorithm: token_bucket, rate: %d/s, burst: %d}\n", l.Addr, rate, burst), "--mode", "generic")
	if x := l.xdpAttached(t); x == nil || x.AttachMode != 2 {
		t.Fatalf("want a generic-mode program, got %+v", x)
	}
	out, err := l.run(t, "status", l.PeerName)
	if err != nil || !strings.Contains(out, "attached (generic)") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	before, lost0 := l.PeerNS.Snapshot(t), l.ringDrops(t)
	start := time.Now()
	sent := l.sendUDP(t, 4000)
	l.settle(t)
	elapsed := time.Since(start)
	stack, lost := l.PeerNS.Snapshot(t).Delta(before).IPReceives(), l.ringDrops(t)-lost0
	pass, drop, _ := l.ruleCounts(t, "r")
	t.Logf("sent %d datagrams in %v; passed %d, dropped %d; stack received %d; veth dropped %d", sent, elapsed, pass, drop, stack, lost)
	checkDelivered(t, pass+drop, sent, lost)
	checkStack(t, stack, pass)
	// The bucket starts full and the send outruns it: the burst passes, and
	// at most the refill over the whole measured span (the send and the
	// wait for the stack) on top; everything else is dropped.
	if most := burst + uint64(rate*elapsed.Seconds()) + 1; pass < burst || pass > most {
		t.Errorf("generic mode passed %d of %d: want %d to %d", pass, sent, burst, most)
	}
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	l.requireClean(t)
}
