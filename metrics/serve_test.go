// SPDX-License-Identifier: Apache-2.0

package metrics_test

// The exporter's HTTP server: /healthz and /metrics, shutdown, a taken
// address.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/metrics"
)

// serve runs e on a loopback port until the test ends; get fetches a path.
func serve(t *testing.T, e *metrics.Exporter) (get func(path string) (int, string), stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.ServeListener(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	get = func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	stop = func() error {
		cancel()
		select {
		case err := <-served:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("ServeListener did not return after cancel")
		}
	}
	return get, stop
}

// TestHealthz checks /healthz and /metrics with a readable interface and
// after its maps are gone.
func TestHealthz(t *testing.T) {
	l, _ := load(t, 1024, collectorPolicy)
	e := metrics.New(nil)
	get, stop := serve(t, e)
	defer stop()
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\ntest0: ok\n" {
		t.Errorf("healthy: %d %q", code, body)
	}
	code, body := get("/metrics")
	if code != http.StatusOK || !strings.Contains(body, `xdplimit_up{interface="test0"} 1`) {
		t.Errorf("/metrics: %d, xdplimit_up missing:\n%s", code, body)
	}
	l.Close() // the maps' descriptors are gone: unreadable
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "unhealthy\ntest0: ") {
		t.Errorf("unreadable maps: %d %q", code, body)
	}
	code, body = get("/metrics")
	if code != http.StatusOK || !strings.Contains(body, `xdplimit_up{interface="test0"} 0`) {
		t.Errorf("/metrics with unreadable maps: %d, want xdplimit_up 0:\n%s", code, body)
	}
	if strings.Contains(body, `xdplimit_packets_total{interface="test0"`) {
		t.Error("counters exported for an interface whose maps cannot be read")
	}
}

// TestServeShutdown: with no interface /healthz is 503, and the server
// stops when its context is cancelled.
func TestServeShutdown(t *testing.T) {
	e := metrics.New(nil)
	get, stop := serve(t, e)
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no interface") {
		t.Errorf("no interface: %d %q", code, body)
	}
	if code, _ := get("/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
	if code, _ := get("/nosuch"); code != http.StatusNotFound {
		t.Errorf("/nosuch: %d", code)
	}
	if err := stop(); err != nil {
		t.Fatalf("ServeListener after cancel: %v", err)
	}
}

// TestServeAddrInUse: a taken address is an error at once, not a hang.
func TestServeAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = metrics.New(nil).Serve(context.Background(), ln.Addr().String())
	if err == nil {
		t.Fatal("no error serving on a taken address")
	}
}
