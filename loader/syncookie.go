// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xdplimit/xdplimit/conversation"
	"github.com/xdplimit/xdplimit/maps"
)

// procSys is where the sysctls are read: /proc/sys resolves the network
// namespace of the thread that opens a file under net/ (tests point it
// elsewhere).
var procSys = "/proc/sys"

// sysctl reads a sysctl of the calling thread's network namespace, its
// whitespace-separated fields.
func sysctl(key string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(procSys, strings.ReplaceAll(key, ".", "/")))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

func sysctlInt(key string, field int) (int, error) {
	f, err := sysctl(key)
	if err != nil {
		return 0, err
	}
	if field >= len(f) {
		return 0, fmt.Errorf("%s: %d fields, no field %d", key, len(f), field+1)
	}
	v, err := strconv.Atoi(f[field])
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return v, nil
}

// ErrSynCookieHost says that the host's TCP settings rule out SYN cookies
// answered from XDP; attach and reload refuse such a policy, and never
// change the settings themselves.
var ErrSynCookieHost = errors.New("the host's TCP settings cannot take SYN cookies from XDP")

// hostSynAck reads what the stack of the calling thread's network
// namespace would offer in a SYN-ACK on an interface of MTU mtu, for the
// rules with action syncookie (named in rules), and refuses a namespace
// whose listeners would not accept the cookies' ACKs as sent.
func hostSynAck(iface string, mtu int, rules []string) (maps.SynAck, error) {
	named := fmt.Sprintf("rules %s use action syncookie", strings.Join(rules, ", "))
	if len(rules) == 1 {
		named = fmt.Sprintf("rule %s uses action syncookie", rules[0])
	}
	mode, err := sysctlInt("net.ipv4.tcp_syncookies", 0)
	if err != nil {
		return maps.SynAck{}, fmt.Errorf("%s: reading net.ipv4.tcp_syncookies: %w", named, err)
	}
	if mode != 2 {
		return maps.SynAck{}, fmt.Errorf("%w: %s, which needs net.ipv4.tcp_syncookies=2 in the network namespace of %s "+
			"(it is %d): the SYNs the rule answers never reach the stack, and only in mode 2 does a listener accept "+
			"a cookie's ACK without a SYN queue entry. Set it (sysctl -w net.ipv4.tcp_syncookies=2; xdplimit does "+
			"not change it for you), or use nftables' synproxy on a router (docs/policy.md)", ErrSynCookieHost, named, iface, mode)
	}
	ts, err := sysctlInt("net.ipv4.tcp_timestamps", 0)
	if err != nil {
		return maps.SynAck{}, fmt.Errorf("%s: reading net.ipv4.tcp_timestamps: %w", named, err)
	}
	if ts == 1 {
		return maps.SynAck{}, fmt.Errorf("%w: %s, which needs net.ipv4.tcp_timestamps=2 (or 0) in the network namespace "+
			"of %s (it is 1): with 1 the stack adds a per-connection random offset to timestamps, which only it knows, "+
			"and would read the window scale and SACK a cookie's timestamp carries as the wrong values. 2 keeps "+
			"timestamps without the random offsets; 0 turns them off, and connections opened by cookie then lose "+
			"window scaling and SACK", ErrSynCookieHost, named, iface)
	}
	s := maps.SynAck{TTL: 64, HopLimit: 64, Timestamps: ts == 2}
	if mtu < 576 || mtu > 65535 {
		return maps.SynAck{}, fmt.Errorf("%s: the MTU of %s is %d", named, iface, mtu)
	}
	s.MSS4, s.MSS6 = uint16(mtu-40), uint16(max(mtu-60, 1220))
	flag := func(key string) (bool, error) {
		v, err := sysctlInt(key, 0)
		return v != 0, err
	}
	if s.SACK, err = flag("net.ipv4.tcp_sack"); err != nil {
		return maps.SynAck{}, err
	}
	if s.WindowScaling, err = flag("net.ipv4.tcp_window_scaling"); err != nil {
		return maps.SynAck{}, err
	}
	if s.ECN, err = flag("net.ipv4.tcp_ecn"); err != nil {
		return maps.SynAck{}, err
	}
	if v, err := sysctlInt("net.ipv4.ip_default_ttl", 0); err == nil && v > 0 && v < 256 {
		s.TTL = uint8(v)
	}
	if v, err := sysctlInt("net.ipv6.conf."+iface+".hop_limit", 0); err == nil && v > 0 && v < 256 {
		s.HopLimit = uint8(v)
	}
	// The scale tcp_select_initial_window picks: the largest receive
	// buffer a connection may grow to, over the 16 bits of the window.
	space, err := sysctlInt("net.ipv4.tcp_rmem", 2)
	if err != nil {
		return maps.SynAck{}, err
	}
	// net.core is the initial namespace's: unreadable elsewhere on some
	// kernels, where the namespace's own tcp_rmem then decides.
	if v, err := sysctlInt("net.core.rmem_max", 0); err == nil {
		space = max(space, v)
	}
	s.WScale = uint8(min(max(bits.Len(uint(space))-1-15, 0), 14))
	return s, s.Check()
}

// synCookieRules names the rules of img with action syncookie.
func synCookieRules(img *maps.Image) []string {
	var names []string
	for _, r := range img.Rules {
		if r.SynCookie {
			names = append(names, r.Name)
		}
	}
	return names
}

// withHost returns img fitted to the host: the SYN-ACK its syncookie rules
// send, and for its conversation checks the local addresses; img itself
// when it needs neither.
func withHost(img *maps.Image, iface string, mtu int) (*maps.Image, error) {
	rules := synCookieRules(img)
	if len(rules) == 0 && !img.Conversations.Any() {
		return img, nil
	}
	fitted := *img
	if len(rules) > 0 {
		s, err := hostSynAck(iface, mtu, rules)
		if err != nil {
			return nil, err
		}
		fitted.SynAck = s
	}
	if img.Conversations.Any() {
		local, err := conversation.LocalPrefixes()
		if err != nil {
			return nil, err
		}
		// Never nil: Apply writes an empty table as such.
		fitted.Local = append(make([]netip.Prefix, 0, len(local)), local...)
	}
	return &fitted, nil
}
