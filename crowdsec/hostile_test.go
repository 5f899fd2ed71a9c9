// SPDX-License-Identifier: Apache-2.0

package crowdsec

// Hostile answers a real LAPI cannot be made to send: garbage, truncated
// and oversized bodies, unparsable values, redirects. Everything a real
// server can do is tested against one (lapi_test.go); a fake server is
// used here only.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/banfeed"
)

// fakeLAPI answers every request with the handler's answer and records
// the queries it got.
func fakeLAPI(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Value) {
	var last atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last.Store(r.URL.RawQuery)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

func answer(body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}
}

func newTestBouncer(t *testing.T, url string, tgt Target, mod func(*Config)) (*Bouncer, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg := Config{URL: url, APIKey: "key", Log: logs.logger(), Interval: 20 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, Timeout: 5 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg, tgt)
	if err != nil {
		t.Fatal(err)
	}
	return b, logs
}

func pollKind(t *testing.T, b *Bouncer) ErrorKind {
	t.Helper()
	_, err := b.Poll(context.Background())
	var pe *PollError
	if !errors.As(err, &pe) {
		t.Fatalf("poll error %v, want a *PollError", err)
	}
	return pe.Kind
}

func TestHostileAnswersApplyNothing(t *testing.T) {
	good := `{"new":[{"id":1,"duration":"1h","scope":"Ip","type":"ban","value":"192.0.2.1"}]`
	huge := `{"new":[{"id":1,"duration":"1h","scope":"Ip","type":"ban","value":"192.0.2.1","scenario":"` +
		strings.Repeat("x", 2<<20) + `"}]}`
	for _, c := range []struct {
		name string
		h    func(w http.ResponseWriter, r *http.Request)
		kind ErrorKind
	}{
		{"not JSON", answer(`<html>Bad Gateway</html>`), KindDecode},
		{"truncated", answer(good), KindDecode},
		{"trailing garbage", answer(good + `}}`), KindDecode},
		{"empty 200", answer(``), KindDecode},
		{"huge body", answer(huge), KindTooLarge},
		{"huge announced", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000000000")
			w.WriteHeader(200)
		}, KindTooLarge},
		{"too many", answer(`{"new":[` + strings.Repeat(`{"id":1},`, 200) + `null]}`), KindTooMany},
		{"500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "db locked", 500) }, KindStatus},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://192.0.2.1/steal", http.StatusFound)
		}, KindStatus},
		{"slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		}, KindTimeout},
		{"connection cut mid-answer", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(200)
			fmt.Fprint(w, `{"new":[`)
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}, KindConnect},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := fakeLAPI(t, c.h)
			tgt := newFakeTarget(t)
			b, _ := newTestBouncer(t, srv.URL, tgt, func(cfg *Config) {
				cfg.MaxBytes, cfg.MaxDecisions = 1<<20, 100
				if c.kind == KindTimeout {
					cfg.Timeout = 200 * time.Millisecond
				}
			})
			if k := pollKind(t, b); k != c.kind {
				t.Fatalf("kind %q, want %q", k, c.kind)
			}
			if n := tgt.tableCalls(); n != 0 {
				t.Fatalf("%d ban table calls after a failed poll", n)
			}
			if st := b.Stats(); st.PollErrors[c.kind] != 1 || !st.LastSuccess.IsZero() {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestPollCanceled(t *testing.T) {
	srv, _ := fakeLAPI(t, answer(`{}`))
	b, _ := newTestBouncer(t, srv.URL, newFakeTarget(t), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Poll(ctx)
	var pe *PollError
	if !errors.As(err, &pe) || pe.Kind != KindCanceled {
		t.Fatalf("%v", err)
	}
}

// One answer full of bad decisions: each kind is skipped (by the bouncer)
// or refused (by the ban table's gate) and counted, the logs say so once
// per kind, a ban the table refuses skips that decision only, and the good
// decisions around them are applied, their hostile scenario escaped.
func TestBadDecisionsSkippedOncePerKind(t *testing.T) {
	var list []string
	for i := range 50 {
		list = append(list,
			fmt.Sprintf(`{"id":%d,"duration":"1h","scope":"Ip","type":"ban","value":"not-an-ip-%d"}`, i, i),
			fmt.Sprintf(`{"id":%d,"duration":"forever","scope":"Ip","type":"ban","value":"192.0.2.%d"}`, i, i),
			fmt.Sprintf(`{"id":%d,"duration":"-5s","scope":"Ip","type":"ban","value":"192.0.2.%d"}`, i, i),
			fmt.Sprintf(`{"id":%d,"duration":"1h","scope":"Country","type":"ban","value":"FR"}`, i),
			fmt.Sprintf(`{"id":%d,"duration":"1h","scope":"Range","type":"ban","value":"%d.0.0.0/6"}`, i, i),
			fmt.Sprintf(`{"id":%d,"duration":"1h","scope":"Ip","type":"captcha","value":"192.0.2.%d"}`, i, i),
			`{"id":"x"}`,
			fmt.Sprintf(`{"id":%d,"duration":"1h","scope":"Ip","type":"ban","value":"198.51.100.%d","origin":"crowdsec","scenario":"s\u0000\n"}`, i, i),
		)
	}
	srv, _ := fakeLAPI(t, answer(`{"deleted":null,"new":[`+strings.Join(list, ",")+`]}`))
	tgt := newFakeTarget(t)
	tgt.failBan[mustPrefix("198.51.100.7/32")] = true
	b, logs := newTestBouncer(t, srv.URL, tgt, nil)
	res := mustPoll(t, b)
	want := map[SkipReason]int{SkipValue: 50, SkipDuration: 100, SkipScope: 50, SkipType: 50, SkipMalformed: 50}
	for r, n := range want {
		if res.Skipped[r] != n {
			t.Errorf("skipped %q: %d, want %d", r, res.Skipped[r], n)
		}
	}
	for k, n := range map[banfeed.Kind]int{banfeed.TooWide: 50, banfeed.Datapath: 1} {
		if got := tgt.refused(t, k); got != n {
			t.Errorf("refused %s: %d, want %d", k, got, n)
		}
	}
	if res.Banned != 49 || len(tgt.held()) != 49 {
		t.Errorf("applied %d, held %d, want 49", res.Banned, len(tgt.held()))
	}
	if b, ok := tgt.ban("198.51.100.8/32"); !ok || b.Reason != `crowdsec: crowdsec/s\x00\n: ban 8` {
		t.Errorf("ban %+v", b)
	}
	gl := tgt.gateLog.String()
	for _, k := range []string{"(too_wide: ", "(datapath: ", "stored escaped"} {
		if n := strings.Count(gl, k); n != 1 {
			t.Errorf("gate logged %q %d times, want once:\n%s", k, n, gl)
		}
	}
	out := logs.String()
	for _, r := range []SkipReason{SkipValue, SkipDuration, SkipScope, SkipMalformed} {
		if n := strings.Count(out, "reason="+string(r)+" "); n != 1 {
			t.Errorf("reason %s logged %d times, want once:\n%s", r, n, out)
		}
	}
	if strings.Contains(out, "reason=type") {
		t.Errorf("configured-out types are not worth a warning:\n%s", out)
	}
	if st := b.Stats(); st.Applied != 49 || st.Skipped[SkipDuration] != 100 || st.Resyncs != 1 {
		t.Errorf("stats %+v", st)
	}
}

// The filters the LAPI applies go into the query; a resync follows every
// failure, and Run backs off and comes back.
func TestQueryAndResyncAfterFailure(t *testing.T) {
	var fail atomic.Bool
	srv, last := fakeLAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", 503)
			return
		}
		answer(`{"new":null,"deleted":null}`)(w, r)
	})
	b, _ := newTestBouncer(t, srv.URL, newFakeTarget(t), func(c *Config) {
		c.Origins = []string{"crowdsec", "cscli"}
		c.ScenariosContaining = []string{"ssh"}
		c.ScenariosNotContaining = []string{"test"}
		c.Scopes = []string{"Ip"}
	})
	want := "origins=crowdsec%2Ccscli&scenarios_containing=ssh&scenarios_not_containing=test&scopes=ip&startup=true&type=ban"
	if res := mustPoll(t, b); !res.Startup || last.Load() != want {
		t.Fatalf("first poll: startup %v, query %v, want %s", res.Startup, last.Load(), want)
	}
	if res := mustPoll(t, b); res.Startup || !strings.Contains(last.Load().(string), "startup=false") {
		t.Fatalf("second poll: startup %v, query %v", res.Startup, last.Load())
	}
	fail.Store(true)
	if k := pollKind(t, b); k != KindStatus {
		t.Fatalf("kind %s", k)
	}
	fail.Store(false)
	if res := mustPoll(t, b); !res.Startup {
		t.Fatal("no resync after a failed poll")
	}

	// Run: failures back off, the first success after them resyncs.
	fail.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.Run(ctx) }()
	waitFor(t, func() bool { return b.Stats().PollErrors[KindStatus] >= 4 })
	resyncs := b.Stats().Resyncs
	fail.Store(false)
	waitFor(t, func() bool { return b.Stats().Resyncs == resyncs+1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
