// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/metrics"
)

// TestSourcesEndpoint: GET /v1/sources/ADDR answers what the limiter
// holds for the address, in the documented JSON (docs/json.md); a bad
// address is a 400, any method but GET a 405.
func TestSourcesEndpoint(t *testing.T) {
	l, _ := load(t, 1024, collectorPolicy)
	e := metrics.New(nil)
	if err := e.Add("test0", l, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // the source's burst of 2, and one refused
		xdpltest.Run(t, l, udp4("203.0.113.9", 53), t0)
	}
	if err := l.SetClock(uint64(t0 + 250*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	code, body := get("/v1/sources/203.0.113.9")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	// The fields, as documented: decoded into a map, not the Go type.
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	ifaces := raw["interfaces"].([]any)
	rep := ifaces[0].(map[string]any)
	rules := rep["rules"].([]any)
	dns := rules[0].(map[string]any)
	own := dns["levels"].([]any)[0].(map[string]any)
	want := map[string]any{"level": 0.0, "key": "src_ip", "prefix": "203.0.113.9/32", "algorithm": "token_bucket",
		"unit": "packets", "tracked": true, "sketch": false, "limit": 2.0, "remaining": 0.0,
		// 2 taken at t0 at 1/s: the next at t0 + 1 s, both back at t0 + 2 s.
		"retry_after": 0.75, "reset": 1.75}
	for k, v := range want {
		if own[k] != v {
			t.Errorf("level 0's %s = %v, want %v\n%s", k, own[k], v, body)
		}
	}
	if raw["address"] != "203.0.113.9" || rep["interface"] != "test0" || dns["rule"] != "dns" ||
		dns["action"] != "drop" || len(rules) != 2 {
		t.Errorf("answer %s", body)
	}
	if u := rep["undecided"].([]any); len(u) != 2 || u[0] != "protocol" || u[1] != "dst_ports" {
		t.Errorf("undecided %v", u)
	}

	if code, body := get("/v1/sources/192.0.2.9"); code != http.StatusOK || !strings.Contains(body, `"list":"allow"`) {
		t.Errorf("an allowed source: %d %s", code, body)
	}
	if code, body := get("/v1/sources/not-an-address"); code != http.StatusBadRequest ||
		!strings.Contains(body, `"error":"\"not-an-address\" is not an IP address"`) {
		t.Errorf("a bad address: %d %s", code, body)
	}
	if code, body := get("/v1/sources/203.0.113.9?port=0"); code != http.StatusBadRequest {
		t.Errorf("port 0: %d %s", code, body)
	}
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(method, srv.URL+"/v1/sources/203.0.113.9", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %s, want 405", method, resp.Status)
		}
	}
}
