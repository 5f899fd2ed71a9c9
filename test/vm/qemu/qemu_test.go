// SPDX-License-Identifier: Apache-2.0

// Running QEMU and reading the guest's console: the sentinel lines the
// init script prints, the console's cleanup, the verdict drawn from them,
// and the kill paths of a run.

package main

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSentinel(t *testing.T) {
	tests := []struct {
		line   string
		ok     bool
		kind   string
		fields map[string]string
		rest   string
	}{
		{testMarker + " RESULT name=a.test exit=0", true, "RESULT", map[string]string{"name": "a.test", "exit": "0"}, "name=a.test exit=0"},
		// Test output without a trailing newline glued in front.
		{"ok  \tpkg 0.1s" + testMarker + " RESULT name=a.test exit=1", true, "RESULT", map[string]string{"name": "a.test", "exit": "1"}, "name=a.test exit=1"},
		{testMarker + " SETUP-FAIL mount -t bpf bpf /sys/fs/bpf", true, "SETUP-FAIL", map[string]string{}, "mount -t bpf bpf /sys/fs/bpf"},
		{testMarker, false, "", nil, ""},
		// Another run's marker is not ours.
		{"@@xdplimit-vm:ffffffffffff@@ DONE total=1 failed=0", false, "", nil, ""},
		{"--- PASS: TestX (0.00s)", false, "", nil, ""},
	}
	for _, tt := range tests {
		ev, ok := parseSentinel(tt.line, testMarker)
		if ok != tt.ok {
			t.Errorf("%q: ok=%v, want %v", tt.line, ok, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		if ev.Kind != tt.kind || !reflect.DeepEqual(ev.Fields, tt.fields) || ev.Rest != tt.rest {
			t.Errorf("%q: got %q %v %q, want %q %v %q", tt.line, ev.Kind, ev.Fields, ev.Rest, tt.kind, tt.fields, tt.rest)
		}
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct {
		raw  string
		want []string
	}{
		{"plain\r", []string{"plain"}},
		{"", []string{""}},
		{"\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2)\r", []string{"SeaBIOS (version 1.16.2)"}},
		{"Booting from ROM..\x1bc\x1b[?7l\x1b[2J" + testMarker + " BOOT uptime=1.7\r", []string{"Booting from ROM..", testMarker + " BOOT uptime=1.7"}},
		{"\x1b[1;31mred\x1b[0m", []string{"red"}},
	}
	for _, tt := range tests {
		if got := sanitize(tt.raw); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("sanitize(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestEvaluate(t *testing.T) {
	tests := []testBinary{{Name: "a.test"}, {Name: "b.test"}}
	ev := func(kind, rest string) event {
		e, ok := parseSentinel(testMarker+" "+kind+" "+rest, testMarker)
		if !ok {
			t.Fatalf("bad event %s %s", kind, rest)
		}
		return e
	}
	full := func(exitA, exitB string, failed int) []event {
		return []event{
			ev("BOOT", "uptime=1.7"),
			ev("START", "name=a.test"), ev("RESULT", "name=a.test exit="+exitA),
			ev("START", "name=b.test"), ev("RESULT", "name=b.test exit="+exitB),
			ev("DONE", fmt.Sprintf("total=2 failed=%d setup_failed=0", failed)),
		}
	}
	cases := []struct {
		name   string
		res    vmResult
		passes bool
		reason string // part of one failure reason
	}{
		{"all pass", vmResult{Events: full("0", "0", 0)}, true, ""},
		{"one fails", vmResult{Events: full("0", "1", 1)}, false, "b.test: exit status 1"},
		{"signal", vmResult{Events: full("0", "137", 1)}, false, "exit status 137"},
		{"no DONE", vmResult{Events: full("0", "0", 0)[:5]}, false, "no DONE"},
		{"died in b", vmResult{Events: full("0", "0", 0)[:4]}, false, "b.test: started but reported no exit status"},
		{"never booted", vmResult{}, false, "no BOOT"},
		{"timeout", vmResult{Events: full("0", "0", 0)[:4], TimedOut: true}, false, "timed out"},
		{"panic", vmResult{Events: full("0", "0", 0)[:4], PanicLine: "Kernel panic - not syncing: sysrq triggered crash"}, false, "Kernel panic"},
		{"count mismatch", vmResult{Events: full("0", "0", 1)}, false, "DONE reports 1 failed"},
		{"setup failed", vmResult{Events: append([]event{ev("SETUP-FAIL", "mount -t bpf bpf /sys/fs/bpf")}, full("0", "0", 0)...)}, false, "mount -t bpf"},
		{"unknown test", vmResult{Events: append(full("0", "0", 0), ev("RESULT", "name=c.test exit=0"))}, false, "unknown test"},
		{"no poweroff", vmResult{Events: full("0", "0", 0), KilledAfterFinal: true}, true, ""},
	}
	for _, c := range cases {
		rep := evaluate(tests, &c.res, time.Minute)
		if rep.ok() != c.passes {
			t.Errorf("%s: ok=%v, want %v (reasons %q)", c.name, rep.ok(), c.passes, rep.reasons)
			continue
		}
		if c.reason != "" && !strings.Contains(strings.Join(rep.reasons, "\n"), c.reason) {
			t.Errorf("%s: reasons %q lack %q", c.name, rep.reasons, c.reason)
		}
	}
}

// TestRunQEMU drives runQEMU with a shell script in qemu's place, to check
// the kill paths without booting anything.
func TestRunQEMU(t *testing.T) {
	needTool(t, "sh")
	m := testMarker
	cases := []struct {
		name   string
		script string
		check  func(t *testing.T, r *vmResult)
	}{
		{"complete run", `
			printf 'SeaBIOS\r\n\033c\033[2J` + m + ` BOOT uptime=1.2\r\n'
			echo "` + m + ` START name=a.test"
			printf 'no newline at the end of test output'
			echo "` + m + ` RESULT name=a.test exit=0"
			echo "` + m + ` DONE total=1 failed=0 setup_failed=0"
			echo "[    3.1] WARNING: CPU: 1 PID: 77 at net/core/filter.c:1 xdp_do_redirect"`,
			func(t *testing.T, r *vmResult) {
				var kinds []string
				for _, e := range r.Events {
					kinds = append(kinds, e.Kind)
				}
				if strings.Join(kinds, " ") != "BOOT START RESULT DONE" {
					t.Errorf("events %v", kinds)
				}
				if r.BootHung != "" || r.TimedOut || r.KilledAfterFinal || r.WaitErr != nil {
					t.Errorf("unexpected state %+v", r)
				}
				if len(r.KernelSplats) != 1 {
					t.Errorf("splats %q", r.KernelSplats)
				}
			}},
		{"stall before boot", `
			echo "[   23.6] rcu: INFO: rcu_preempt self-detected stall on CPU"
			exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if !strings.Contains(r.BootHung, "self-detected stall") || r.TimedOut {
					t.Errorf("BootHung %q TimedOut %v", r.BootHung, r.TimedOut)
				}
			}},
		{"panic before boot", `
			echo "[   13.5] Kernel panic - not syncing: Fatal exception in interrupt"
			exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if !strings.Contains(r.BootHung, "kernel panicked during boot") || r.PanicLine == "" || r.TimedOut {
					t.Errorf("BootHung %q PanicLine %q TimedOut %v", r.BootHung, r.PanicLine, r.TimedOut)
				}
			}},
		{"silent boot", `exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if !strings.Contains(r.BootHung, "no BOOT sentinel") {
					t.Errorf("BootHung %q", r.BootHung)
				}
			}},
		{"hang in a test", `
			echo "` + m + ` BOOT uptime=1.2"
			echo "[   40.0] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [a.test:80]"
			exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if r.BootHung != "" || !r.TimedOut {
					t.Errorf("BootHung %q TimedOut %v: a stall after boot must not count as a boot hang", r.BootHung, r.TimedOut)
				}
				if len(r.KernelSplats) != 1 {
					t.Errorf("splats %q", r.KernelSplats)
				}
			}},
		{"no poweroff", `
			echo "` + m + ` BOOT uptime=1.2"
			echo "` + m + ` DONE total=0 failed=0 setup_failed=0"
			exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if !r.KilledAfterFinal || r.TimedOut {
					t.Errorf("KilledAfterFinal %v TimedOut %v", r.KilledAfterFinal, r.TimedOut)
				}
			}},
	}
	defer func(old string) { qemuBinary = old }(qemuBinary)
	qemuBinary = "sh"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			start := time.Now()
			res, err := runQEMU(context.Background(), runSpec{
				Args:          []string{"-c", c.script},
				Out:           &out,
				Marker:        m,
				Timeout:       3 * time.Second,
				BootKind:      "BOOT",
				BootTimeout:   time.Second,
				FinalKind:     "DONE",
				PoweroffGrace: 200 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v: a kill did not end the run", d)
			}
			if strings.Contains(out.String(), "\033") || strings.Contains(out.String(), "\r") {
				t.Errorf("console copy not sanitised: %q", out.String())
			}
			c.check(t, res)
		})
	}
}
