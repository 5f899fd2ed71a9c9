// The verdict on a run, drawn from the init script's sentinel lines alone,
// and the per-boot marker that keeps test output from being taken for them.
// Kept apart from the runner so that the rules for PASS can be read, and unit
// tested, without a VM.

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// newMarker returns a sentinel prefix unique to one boot, so that neither an
// earlier run's output nor a test printing sentinel-like text can be mistaken
// for the init script's report.
func newMarker() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return "@@xdplimit-vm:" + hex.EncodeToString(b) + "@@"
}

// report is the verdict on one run.
type report struct {
	lines    []string // per-test results
	reasons  []string // why the run failed; empty means it passed
	warnings []string
}

func (r *report) ok() bool { return len(r.reasons) == 0 }

// evaluate judges a run from its sentinel lines only. Every test binary must
// have reported START and RESULT with exit 0, the init script must have
// reported DONE with a matching count and no failed setup step, and the run
// must have ended by itself.
func evaluate(tests []testBinary, res *vmResult, timeout time.Duration) *report {
	rep := &report{}
	fail := func(format string, a ...any) { rep.reasons = append(rep.reasons, fmt.Sprintf(format, a...)) }
	if res.Interrupted {
		fail("interrupted")
	}
	if res.TimedOut {
		fail("timed out after %v; qemu killed", timeout)
	}
	if res.PanicLine != "" {
		fail("kernel: %s", res.PanicLine)
	}
	if res.BootHung != "" {
		fail("VM boot hung: %s", res.BootHung)
	}
	if _, ok := res.find("BOOT"); !ok {
		fail("no BOOT sentinel: init did not start or died during setup")
	}
	for _, e := range res.Events {
		if e.Kind == "SETUP-FAIL" {
			fail("VM setup step failed: %s", e.Rest)
		}
	}

	known := map[string]bool{}
	for _, t := range tests {
		known[t.Name] = true
	}
	starts := map[string]event{}
	results := map[string]event{}
	for _, e := range res.Events {
		name := e.Fields["name"]
		switch e.Kind {
		case "START", "RESULT":
			if !known[name] {
				fail("sentinel %s for unknown test %q", e.Kind, name)
				continue
			}
			target := starts
			if e.Kind == "RESULT" {
				target = results
			}
			if _, dup := target[name]; dup {
				fail("%s reported %s twice", name, e.Kind)
			}
			target[name] = e
		}
	}
	failed := 0
	for _, t := range tests {
		start, started := starts[t.Name]
		result, done := results[t.Name]
		switch {
		case !started:
			rep.lines = append(rep.lines, fmt.Sprintf("NOT RUN %s", t.Name))
			fail("%s: never started", t.Name)
			failed++
		case !done:
			rep.lines = append(rep.lines, fmt.Sprintf("NO RESULT %s (started, no exit status)", t.Name))
			fail("%s: started but reported no exit status", t.Name)
			failed++
		case result.Fields["exit"] != "0":
			rep.lines = append(rep.lines, fmt.Sprintf("FAIL %s (exit %s, %.1fs)", t.Name, result.Fields["exit"], (result.At-start.At).Seconds()))
			fail("%s: exit status %s", t.Name, result.Fields["exit"])
			failed++
		default:
			rep.lines = append(rep.lines, fmt.Sprintf("PASS %s (%.1fs)", t.Name, (result.At-start.At).Seconds()))
		}
	}

	if done, ok := res.find("DONE"); !ok {
		fail("no DONE sentinel: the VM stopped before init finished")
	} else {
		if done.Fields["total"] != fmt.Sprint(len(tests)) {
			fail("DONE reports %s tests, %d were given", done.Fields["total"], len(tests))
		}
		// The init script counts failures itself; a mismatch means sentinel
		// lines were lost or garbled on the console, so nothing is trusted.
		if done.Fields["failed"] != fmt.Sprint(failed) {
			fail("DONE reports %s failed tests, the RESULT sentinels %d", done.Fields["failed"], failed)
		}
		if done.Fields["setup_failed"] != "0" {
			fail("DONE reports setup_failed=%s", done.Fields["setup_failed"])
		}
	}
	if res.KilledAfterFinal {
		rep.warnings = append(rep.warnings, "the VM did not power off after DONE and was killed")
	}
	if res.WaitErr != nil && !res.TimedOut && !res.KilledAfterFinal && !res.Interrupted && res.BootHung == "" {
		fail("qemu failed: %v", res.WaitErr)
	}
	return rep
}
