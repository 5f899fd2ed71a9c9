// SPDX-License-Identifier: Apache-2.0

package crowdsecproc_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/crowdsecproc"
)

func stream(t *testing.T, s *crowdsecproc.Server, key string, startup bool) (int, map[string][]map[string]any) {
	t.Helper()
	q := "false"
	if startup {
		q = "true"
	}
	req, _ := http.NewRequest("GET", s.URL()+"/v1/decisions/stream?startup="+q, nil)
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string][]map[string]any
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
	}
	return resp.StatusCode, out
}

// The helper's whole life cycle: a bouncer, a decision, a crash, a restart
// on the same port and database, a stop that leaves no process behind.
func TestServerLifecycle(t *testing.T) {
	s := crowdsecproc.Start(t)
	ctx := context.Background()
	key, err := s.AddBouncer(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, crowdsecproc.Decision{Value: "198.51.100.7", Duration: 2 * time.Minute, Reason: "why"}); err != nil {
		t.Fatal(err)
	}
	code, out := stream(t, s, key, true)
	if code != 200 || len(out["new"]) != 1 || out["new"][0]["value"] != "198.51.100.7" || out["new"][0]["scenario"] != "why" {
		t.Fatalf("startup stream: %d %v", code, out)
	}
	if code, _ := stream(t, s, "not-a-key", true); code != http.StatusForbidden {
		t.Errorf("bad key: status %d, want 403", code)
	}

	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("pid %d still alive after Kill", pid)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	// Same database: the key still works, the decision is still there.
	if code, out := stream(t, s, key, true); code != 200 || len(out["new"]) != 1 {
		t.Fatalf("after restart: %d %v", code, out)
	}
	pid = s.PID()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("pid %d still alive after Stop", pid)
	}
}
