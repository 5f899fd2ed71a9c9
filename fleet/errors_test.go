// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// logLines collects what an engine logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// engineFor loads the program with a fleet policy naming url and returns
// an engine that dials from ns. Its sync is 250 ms: a failed sync's first
// retry waits twice that, and the tests' next Sync call must come within
// it. With 10 ms (20 ms of backoff) the 6.1 VM once made that call after
// the backoff had run out, its emulated CPU starved between two lines.
// The dial and read deadlines (ten syncs, at least a second) are 2.5 s.
func engineFor(t *testing.T, ns *testutil.Netns, url, password string, log *logLines) *fleet.Engine {
	t.Helper()
	src := fmt.Sprintf("fleet: {redis: '%s', sync: 250ms}\nrules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 10/s, burst: 5, scope: fleet}\n", url)
	img, p := xdpltest.CompilePolicy(t, src)
	l := xdpltest.LoadImage(t, maps.Options{Clock: maps.ClockKtime, MaxSources: 1 << 10}, img)
	e, err := fleet.New(fleet.Options{Fleet: p.Fleet, Password: password, Interface: "t", Logf: log.logf,
		Dialer: testutil.DialIn(ns)}, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// selfSigned is a TLS server configuration with a certificate no client
// trusts.
func selfSigned(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// notRedis answers every connection with an HTTP error, as a web server on
// the wrong port would.
func notRedis(t *testing.T, ns *testutil.Netns, addr string, conf *tls.Config) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if conf != nil {
		ln = tls.NewListener(ln, conf)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				bufio.NewReader(c).ReadString('\n')
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			}()
		}
	}()
}

// Each misconfiguration fails the sync with an error of its kind, and the
// one line logged names the setting to look at; the datapath is never
// touched by a failed sync, and a sync that works again says so once.
func TestSyncErrorsNameTheSetting(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetns(t)
	r := testutil.StartRedis(t, ns, testutil.RedisConfig{Addr: netip.MustParseAddrPort("127.0.0.1:6379"), Password: "right"})
	notRedis(t, ns, "127.0.0.1:8080", nil)
	notRedis(t, ns, "127.0.0.1:6443", selfSigned(t))
	for _, tc := range []struct {
		name, url, password string
		kind                fleet.ErrorKind
		setting             string
	}{
		{"wrong password", "redis://" + r.Addr(), "wrong", fleet.KindAuth, "fleet.password_file / REDIS_PASSWORD"},
		{"no password", "redis://" + r.Addr(), "", fleet.KindAuth, "fleet.password_file / REDIS_PASSWORD"},
		{"TLS to a plain server", "rediss://" + r.Addr(), "right", fleet.KindTimeout, "rediss://: does the server speak TLS"},
		{"TLS, untrusted certificate", "rediss://127.0.0.1:6443", "", fleet.KindTLS, "fleet.redis (rediss://)"},
		{"not a Redis", "redis://127.0.0.1:8080", "", fleet.KindProtocol, "does not answer as a Redis"},
		{"nothing listening", "redis://127.0.0.1:6390", "", fleet.KindConnect, "cannot reach the server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log logLines
			e := engineFor(t, ns, tc.url, tc.password, &log)
			// The first sync fails; the next ones wait for the retry's
			// backoff (no exchange, nothing logged).
			for i := range 3 {
				res := e.Sync(context.Background())
				if i == 0 && (res.Err == nil || res.Kind != tc.kind) {
					t.Fatalf("sync: kind %q err %v, want kind %q", res.Kind, res.Err, tc.kind)
				}
				if i > 0 && !res.Skipped {
					t.Fatalf("sync %d: %+v, want skipped until the retry", i, res)
				}
			}
			lines := log.all()
			if len(lines) != 1 || !strings.Contains(lines[0], tc.setting) {
				t.Fatalf("logged %q, want one line naming %q", lines, tc.setting)
			}
			if strings.Contains(strings.Join(lines, "\n"), "right") && tc.password == "right" {
				t.Fatalf("the password is in the log: %q", lines)
			}
			if st := e.Status(); st.Up || st.ErrorKind != tc.kind {
				t.Fatalf("status %+v", st)
			}
		})
	}
	t.Run("recovers", func(t *testing.T) {
		var log logLines
		e := engineFor(t, ns, "redis://"+r.Addr(), "wrong", &log)
		e.Sync(context.Background())
		e2 := engineFor(t, ns, "redis://"+r.Addr(), "right", &log)
		for range 3 {
			if res := e2.Sync(context.Background()); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		lines := log.all()
		if len(lines) != 2 || !strings.Contains(lines[1], "Redis answers") {
			t.Fatalf("logged %q", lines)
		}
	})
}
