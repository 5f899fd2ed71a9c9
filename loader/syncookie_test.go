// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

// fakeSysctls points procSys at a directory holding the given sysctls.
func fakeSysctls(t *testing.T, values map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range values {
		path := filepath.Join(dir, strings.ReplaceAll(k, ".", "/"))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := procSys
	procSys = dir
	t.Cleanup(func() { procSys = old })
}

func hostSysctls(overrides map[string]string) map[string]string {
	m := map[string]string{
		"net.ipv4.tcp_syncookies":      "2",
		"net.ipv4.tcp_timestamps":      "2",
		"net.ipv4.tcp_sack":            "1",
		"net.ipv4.tcp_window_scaling":  "1",
		"net.ipv4.tcp_ecn":             "2",
		"net.ipv4.tcp_rmem":            "4096\t131072\t6291456",
		"net.core.rmem_max":            "212992",
		"net.ipv4.ip_default_ttl":      "64",
		"net.ipv6.conf.eth0.hop_limit": "64",
	}
	for k, v := range overrides {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

func TestHostSynAck(t *testing.T) {
	for _, c := range []struct {
		name      string
		overrides map[string]string
		mtu       int
		want      maps.SynAck
		err       string
	}{
		{"defaults", nil, 1500, maps.SynAck{MSS4: 1460, MSS6: 1440, TTL: 64, HopLimit: 64, WScale: 7,
			Timestamps: true, SACK: true, WindowScaling: true, ECN: true}, ""},
		// The window scale follows the largest receive buffer: 32 MiB.
		{"large buffers, jumbo frames", map[string]string{"net.ipv4.tcp_rmem": "4096 131072 33554432",
			"net.ipv4.ip_default_ttl": "100", "net.ipv6.conf.eth0.hop_limit": "200"}, 9000,
			maps.SynAck{MSS4: 8960, MSS6: 8940, TTL: 100, HopLimit: 200, WScale: 10,
				Timestamps: true, SACK: true, WindowScaling: true, ECN: true}, ""},
		{"no timestamps, SACK or ECN", map[string]string{"net.ipv4.tcp_timestamps": "0",
			"net.ipv4.tcp_sack": "0", "net.ipv4.tcp_ecn": "0", "net.core.rmem_max": ""}, 1500,
			maps.SynAck{MSS4: 1460, MSS6: 1440, TTL: 64, HopLimit: 64, WScale: 7, WindowScaling: true}, ""},
		{"cookies when the queue overflows", map[string]string{"net.ipv4.tcp_syncookies": "1"}, 1500, maps.SynAck{},
			"rule syn uses action syncookie, which needs net.ipv4.tcp_syncookies=2 in the network namespace of eth0 (it is 1)"},
		{"timestamps with random offsets", map[string]string{"net.ipv4.tcp_timestamps": "1"}, 1500, maps.SynAck{},
			"needs net.ipv4.tcp_timestamps=2 (or 0) in the network namespace of eth0 (it is 1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fakeSysctls(t, hostSysctls(c.overrides))
			got, err := hostSynAck("eth0", c.mtu, []string{"syn"})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrSynCookieHost) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestWithHost: only a policy with syncookie rules reads the host.
func TestWithHost(t *testing.T) {
	fakeSysctls(t, hostSysctls(map[string]string{"net.ipv4.tcp_syncookies": "1"}))
	plain := &maps.Image{Rules: []maps.RuleSpec{{Name: "r"}}}
	if img, err := withHost(plain, "eth0", 1500); err != nil || img != plain {
		t.Errorf("a policy without syncookie: %v, %v", img, err)
	}
	cookie := &maps.Image{Rules: []maps.RuleSpec{{Name: "a", SynCookie: true}, {Name: "b", SynCookie: true}}}
	if _, err := withHost(cookie, "eth0", 1500); err == nil || !strings.Contains(err.Error(), "rules a, b use action syncookie") {
		t.Errorf("error %v, want one naming rules a and b", err)
	}
}
