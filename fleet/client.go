// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/xdplimit/xdplimit/internal/fileutil"
	"github.com/xdplimit/xdplimit/policy"
)

// Password returns the Redis password of a fleet: the first line of its
// password_file, else $REDIS_PASSWORD, else "". Errors name the setting and
// never include the password.
func Password(f *policy.Fleet) (string, error) {
	if f.PasswordFile == "" {
		return os.Getenv("REDIS_PASSWORD"), nil
	}
	data, err := fileutil.ReadRegular(f.PasswordFile, 4096)
	if err != nil {
		return "", fmt.Errorf("fleet.password_file: %w", err)
	}
	pw, _, _ := strings.Cut(string(data), "\n")
	pw = strings.TrimRight(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("fleet.password_file %s: the first line is empty", f.PasswordFile)
	}
	return pw, nil
}

// quiet silences go-redis's own logger, which writes to stderr once per
// failed dial: the engine logs one line per change of state (link.go) and
// counts every failure in its metrics, so an outage must not add a line per
// retry. The logger is global; the engine is go-redis's only user here.
var quiet sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// newClient makes the Redis client of a fleet: one server, or a cluster
// from its seed nodes. It does not connect: the engine does, and retries.
// Timeouts are ten sync intervals, 1 to 5 s: one Redis core exchanges about
// 70k keys a second (BENCHMARKS.md), so a sync of 100k keys at the default
// 100 ms interval takes over a second and must not time out; a slow or
// lost Redis stretches syncs, never the packet path. A call dials once: the
// engine retries with its own backoff, and go-redis's default of five dials
// 100 ms apart stretched every failed sync by half a second.
func newClient(f *policy.Fleet, password string, dial func(context.Context, string, string) (net.Conn, error)) (redis.UniversalClient, error) {
	quiet.Do(func() { redis.SetLogger(discardLogger{}) })
	timeout := min(max(10*f.Sync, time.Second), 5*time.Second)
	// Reads and writes are bounded by each sync's deadline (syncDeadline),
	// which grows with its keys; this is only the ceiling.
	const ioTimeout = 30 * time.Second
	var addrs []string
	var tlsConf *tls.Config
	db := 0
	user := ""
	for _, raw := range f.Redis {
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("fleet.redis %q: %w", raw, err)
		}
		addrs = append(addrs, o.Addr)
		if o.TLSConfig != nil {
			tlsConf = o.TLSConfig
		}
		db = o.DB
		if u, err := url.Parse(raw); err == nil {
			user = u.User.Username()
		}
	}
	if dial != nil && tlsConf != nil {
		// go-redis applies TLSConfig only in its own dialer.
		plain := dial
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := plain(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			conf := tlsConf.Clone()
			if conf.ServerName == "" {
				conf.ServerName, _, _ = net.SplitHostPort(addr)
			}
			tc := tls.Client(c, conf)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	if f.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, Username: user, Password: password, TLSConfig: tlsConf,
			DialTimeout: timeout, ReadTimeout: ioTimeout, WriteTimeout: ioTimeout,
			MaxRetries: -1, DialerRetries: 1, PoolSize: 4, MaxRedirects: 3, Dialer: dial,
			ContextTimeoutEnabled: true,
		}), nil
	}
	return redis.NewClient(&redis.Options{
		Addr: addrs[0], Username: user, Password: password, DB: db, TLSConfig: tlsConf,
		DialTimeout: timeout, ReadTimeout: ioTimeout, WriteTimeout: ioTimeout,
		MaxRetries: -1, DialerRetries: 1, PoolSize: 4, Dialer: dial,
		ContextTimeoutEnabled: true,
		// The engine checks the server itself (HELLO would fail against an
		// old server and fall back silently).
		Protocol: 2,
	}), nil
}

// ErrorKind sorts sync errors for metrics and for the one warning logged
// per change of state.
type ErrorKind string

const (
	KindConnect  ErrorKind = "connect"  // refused, unreachable, DNS
	KindTimeout  ErrorKind = "timeout"  // no answer within the deadline
	KindAuth     ErrorKind = "auth"     // wrong or missing password
	KindTLS      ErrorKind = "tls"      // handshake or certificate
	KindProtocol ErrorKind = "protocol" // not a Redis, or a reply we cannot read
	KindServer   ErrorKind = "server"   // a Redis error reply (OOM, cluster down, ...)
	KindDatapath ErrorKind = "datapath" // the local BPF side failed
)

// ErrorKinds lists every kind, for metrics that start at zero.
var ErrorKinds = []ErrorKind{KindConnect, KindTimeout, KindAuth, KindTLS, KindProtocol, KindServer, KindDatapath}

// classify names what went wrong, and which setting to look at. tlsOn: the
// URL is rediss://, where a server that does not speak TLS never answers
// the handshake.
func classify(err error, tlsOn bool) (ErrorKind, string) {
	var ne net.Error
	var tlsRec tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		if tlsOn {
			return KindTimeout, "fleet.redis: no answer in time (rediss://: does the server speak TLS on that port?)"
		}
		return KindTimeout, "fleet.redis: no answer in time"
	case strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") ||
		strings.Contains(msg, "invalid password") || strings.Contains(msg, "AUTH <password> called without"):
		return KindAuth, "fleet.password_file / REDIS_PASSWORD: Redis refused the credentials"
	case errors.As(err, &tlsRec) || errors.As(err, &certErr) || strings.Contains(msg, "tls:") ||
		strings.Contains(msg, "x509:"):
		return KindTLS, "fleet.redis (rediss://): the TLS handshake failed"
	case errors.Is(err, errNotRedis) || strings.Contains(msg, "redis: can't parse") ||
		strings.Contains(msg, "unknown command") || strings.Contains(msg, "got unexpected"):
		return KindProtocol, "fleet.redis: the server does not answer as a Redis"
	case isRedisError(err):
		return KindServer, "fleet.redis: Redis answered with an error"
	}
	return KindConnect, "fleet.redis: cannot reach the server"
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

var errNotRedis = errors.New("not a Redis reply")
