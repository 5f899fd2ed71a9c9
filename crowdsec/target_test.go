package crowdsec

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBan is one ban a fakeTarget holds.
type fakeBan struct {
	d              time.Duration
	origin, reason string
}

// fakeTarget is an in-memory ban table that keeps the Target contract:
// Unban ends a ban only when the origin matches. It also checks what the
// Bouncer promises to send: masked prefixes, IPv4 never mapped, bounded
// printable origins and reasons.
type fakeTarget struct {
	t       testing.TB
	mu      sync.Mutex
	bans    map[netip.Prefix]fakeBan
	failBan map[netip.Prefix]bool
	calls   int
}

func newFakeTarget(t testing.TB) *fakeTarget {
	return &fakeTarget{t: t, bans: map[netip.Prefix]fakeBan{}, failBan: map[netip.Prefix]bool{}}
}

func (f *fakeTarget) checkArgs(p netip.Prefix, origin string) {
	if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
		f.t.Errorf("target got prefix %v: not masked, mapped or zoned", p)
	}
	if len(origin) > MaxOriginLen || !strings.HasPrefix(origin, "crowdsec/") || !printable(origin) {
		f.t.Errorf("target got origin %q", origin)
	}
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (f *fakeTarget) Ban(p netip.Prefix, d time.Duration, origin, reason string) error {
	f.checkArgs(p, origin)
	if d < DefaultMinDuration || d > DefaultMaxDuration || len(reason) > MaxReasonLen || !printable(reason) {
		f.t.Errorf("target got ban %v for %v, reason %q", p, d, reason)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failBan[p] {
		return fmt.Errorf("injected failure for %v", p)
	}
	f.bans[p] = fakeBan{d, origin, reason}
	return nil
}

func (f *fakeTarget) Unban(p netip.Prefix, origin string) (bool, error) {
	f.checkArgs(p, origin)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if b, ok := f.bans[p]; ok && b.origin == origin {
		delete(f.bans, p)
		return true, nil
	}
	return false, nil
}

// held is the banned prefixes, sorted, as strings.
func (f *fakeTarget) held() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for p := range f.bans {
		out = append(out, p.String())
	}
	sort.Strings(out)
	return out
}

func (f *fakeTarget) ban(p string) (fakeBan, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.bans[netip.MustParsePrefix(p)]
	return b, ok
}

func (f *fakeTarget) set(p string, b fakeBan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bans[netip.MustParsePrefix(p)] = b
}

// logBuffer is a slog text handler's output, safe to read while the
// bouncer writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// mustPoll polls once and fails the test on error.
func mustPoll(t *testing.T, b *Bouncer) PollResult {
	t.Helper()
	res, err := b.Poll(context.Background())
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	return res
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
