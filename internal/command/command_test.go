// SPDX-License-Identifier: Apache-2.0

package command

import (
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
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

// A child started with StartChild logs to its file, runs on the thread do
// locked, and closes done once it is killed and reaped.
func TestStartChild(t *testing.T) {
	log := filepath.Join(t.TempDir(), "child.log")
	cmd := exec.Command("sh", "-c", "echo started; exec sleep 30")
	var ran bool
	do := func(fn func() error) error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ran = true
		return fn()
	}
	done, err := StartChild(do, cmd, log)
	if err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Error("the child was not started inside do")
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(ChildLog(log), "started"); {
		if time.Now().After(deadline) {
			t.Fatalf("the child's output never reached its log: %q", ChildLog(log))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := StartChild(do, exec.Command("/nonexistent/binary"), log); err == nil {
		t.Error("starting a missing binary did not fail")
	}
	if got := ChildLog(filepath.Join(t.TempDir(), "none.log")); !strings.Contains(got, "no such file") {
		t.Errorf("ChildLog of a missing file: %q", got)
	}
}
