package command

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	out, err := Run(5*time.Second, "sh", "-c", "echo hi")
	if err != nil || strings.TrimSpace(string(out)) != "hi" {
		t.Fatalf("got %q, %v", out, err)
	}
	start := time.Now()
	// The grandchild sleep must die with the group, or Wait would hang.
	_, err = Run(200*time.Millisecond, "sh", "-c", "sleep 30 & sleep 30")
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %v to time out", el)
	}
}
