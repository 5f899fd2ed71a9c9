// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/xdplimit/xdplimit/metrics"
)

// brokenPeer answers nothing.
type brokenPeer struct{ name string }

func (p brokenPeer) Interface() string { return p.name }
func (p brokenPeer) Gather(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errors.New("connection refused")
}
func (p brokenPeer) Health(context.Context) error { return errors.New("connection refused") }
func (p brokenPeer) Source(context.Context, netip.Addr, uint16) ([]metrics.SourceReport, error) {
	return nil, errors.New("connection refused")
}

// TestPeers: an exporter serves its peers' series beside its own, merged by
// family, every series (the Go runtime's too) labelled with its interface;
// /healthz has a line per interface; a peer that does not answer shows as
// xdplimit_up 0 and makes /healthz fail, without hiding the others.
func TestPeers(t *testing.T) {
	l0, _ := load(t, 1024, collectorPolicy)
	l1, _ := load(t, 1024, collectorPolicy)
	holder, other := metrics.New(nil), metrics.New(nil)
	if err := holder.Add("test0", l0, 0); err != nil {
		t.Fatal(err)
	}
	if err := other.Add("test1", l1, 0); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(other.LocalHandler())
	defer srv.Close()
	peers := []metrics.Peer{metrics.HTTPPeer{Name: "test1", Client: srv.Client(), URL: srv.URL}}
	holder.SetPeers(func(context.Context) []metrics.Peer { return peers })
	get, stop := serve(t, holder)
	defer stop()

	code, body := get("/metrics")
	for _, want := range []string{`xdplimit_up{interface="test0"} 1`, `xdplimit_up{interface="test1"} 1`,
		`go_goroutines{interface="test0"}`, `go_goroutines{interface="test1"}`,
		`xdplimit_policy_reloads_total{interface="test1",result="failure"} 0`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics: %d, no %s in:\n%s", code, want, body)
		}
	}
	if n := strings.Count(body, "# TYPE xdplimit_up gauge"); n != 1 {
		t.Errorf("xdplimit_up declared %d times, want once (merged)", n)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\ntest0: ok\ntest1: ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	// What the peer serves on its own: its series alone, labelled.
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	fams, err := metrics.Decode(resp.Body, resp.Header.Get("Content-Type"))
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			if iface := labelOf(m, "interface"); iface != "test1" {
				t.Errorf("%s served by the peer with interface %q", mf.GetName(), iface)
			}
		}
	}

	peers = append(peers, brokenPeer{"test2"})
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `xdplimit_up{interface="test2"} 0`) ||
		!strings.Contains(body, `xdplimit_up{interface="test1"} 1`) {
		t.Errorf("/metrics with a peer down: %d\n%s", code, body)
	}
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable ||
		body != "unhealthy\ntest0: ok\ntest1: ok\ntest2: connection refused\n" {
		t.Errorf("/healthz with a peer down: %d %q", code, body)
	}
	// One source: every interface answers, the peer's own through it, and
	// the one that does not answer says so.
	code, body = get("/v1/sources/10.1.2.3")
	var s metrics.Sources
	if err := json.Unmarshal([]byte(body), &s); err != nil || code != http.StatusOK {
		t.Fatalf("/v1/sources: %d %v\n%s", code, err, body)
	}
	var got []string
	for _, r := range s.Interfaces {
		got = append(got, fmt.Sprintf("%s %d %q", r.Interface, len(r.Rules), r.Error))
	}
	if want := []string{`test0 2 ""`, `test1 2 ""`, `test2 0 "connection refused"`}; !slices.Equal(got, want) {
		t.Errorf("/v1/sources through the holder: %v, want %v", got, want)
	}
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
