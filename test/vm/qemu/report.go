// SPDX-License-Identifier: Apache-2.0

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
	rep.judgeRun(res, timeout)
	starts, results := rep.sentinels(tests, res)
	failed := rep.judgeTests(tests, starts, results)
	rep.judgeDone(res, len(tests), failed)
	if res.KilledAfterFinal {
		rep.warnings = append(rep.warnings, "the VM did not power off after DONE and was killed")
	}
	if res.WaitErr != nil && !res.TimedOut && !res.KilledAfterFinal && !res.Interrupted && res.BootHung == "" {
		rep.fail("qemu failed: %v", res.WaitErr)
	}
	return rep
}

func (r *report) fail(format string, a ...any) {
	r.reasons = append(r.reasons, fmt.Sprintf(format, a...))
}

// judgeRun fails a run that did not end by itself or never reached init.
func (r *report) judgeRun(res *vmResult, timeout time.Duration) {
	if res.Interrupted {
		r.fail("interrupted")
	}
	if res.TimedOut {
		r.fail("timed out after %v; qemu killed", timeout)
	}
	if res.PanicLine != "" {
		r.fail("kernel: %s", res.PanicLine)
	}
	if res.BootHung != "" {
		r.fail("VM boot hung: %s", res.BootHung)
	}
	if _, ok := res.find("BOOT"); !ok {
		r.fail("no BOOT sentinel: init did not start or died during setup")
	}
	for _, e := range res.Events {
		if e.Kind == "SETUP-FAIL" {
			r.fail("VM setup step failed: %s", e.Rest)
		}
	}
}

// sentinels are each test's START and RESULT; one for a test not given,
// or reported twice, fails the run.
func (r *report) sentinels(tests []testBinary, res *vmResult) (starts, results map[string]event) {
	known := map[string]bool{}
	for _, t := range tests {
		known[t.Name] = true
	}
	starts, results = map[string]event{}, map[string]event{}
	for _, e := range res.Events {
		name := e.Fields["name"]
		switch e.Kind {
		case "START", "RESULT":
			if !known[name] {
				r.fail("sentinel %s for unknown test %q", e.Kind, name)
				continue
			}
			target := starts
			if e.Kind == "RESULT" {
				target = results
			}
			if _, dup := target[name]; dup {
				r.fail("%s reported %s twice", name, e.Kind)
			}
			target[name] = e
		}
	}
	return starts, results
}

// judgeTests writes a line for each test and returns how many failed.
func (r *report) judgeTests(tests []testBinary, starts, results map[string]event) (failed int) {
	for _, t := range tests {
		start, started := starts[t.Name]
		result, done := results[t.Name]
		switch {
		case !started:
			r.lines = append(r.lines, fmt.Sprintf("NOT RUN %s", t.Name))
			r.fail("%s: never started", t.Name)
			failed++
		case !done:
			r.lines = append(r.lines, fmt.Sprintf("NO RESULT %s (started, no exit status)", t.Name))
			r.fail("%s: started but reported no exit status", t.Name)
			failed++
		case result.Fields["exit"] != "0":
			r.lines = append(r.lines, fmt.Sprintf("FAIL %s (exit %s, %.1fs)", t.Name, result.Fields["exit"], (result.At-start.At).Seconds()))
			r.fail("%s: exit status %s", t.Name, result.Fields["exit"])
			failed++
		default:
			r.lines = append(r.lines, fmt.Sprintf("PASS %s (%.1fs)", t.Name, (result.At-start.At).Seconds()))
		}
	}
	return failed
}

// judgeDone checks init's DONE against the tests given and the failures
// counted from their RESULTs.
func (r *report) judgeDone(res *vmResult, total, failed int) {
	done, ok := res.find("DONE")
	if !ok {
		r.fail("no DONE sentinel: the VM stopped before init finished")
		return
	}
	if done.Fields["total"] != fmt.Sprint(total) {
		r.fail("DONE reports %s tests, %d were given", done.Fields["total"], total)
	}
	// The init script counts failures itself; a mismatch means sentinel
	// lines were lost or garbled on the console, so nothing is trusted.
	if done.Fields["failed"] != fmt.Sprint(failed) {
		r.fail("DONE reports %s failed tests, the RESULT sentinels %d", done.Fields["failed"], failed)
	}
	if done.Fields["setup_failed"] != "0" {
		r.fail("DONE reports setup_failed=%s", done.Fields["setup_failed"])
	}
}

// log writes the summary's lines: the boot, each binary, the kernel's
// warnings, the report's warnings and the failures.
func (r *report) log(logf func(string, ...any), res *vmResult) {
	if boot, ok := res.find("BOOT"); ok {
		logf("boot: init started %.1fs after qemu start (guest uptime %ss)", boot.At.Seconds(), boot.Fields["uptime"])
	}
	for _, l := range r.lines {
		logf("%s", l)
	}
	for _, s := range res.KernelSplats {
		logf("warning: kernel: %s", s)
	}
	for _, w := range r.warnings {
		logf("warning: %s", w)
	}
	for _, reason := range r.reasons {
		logf("FAIL: %s", reason)
	}
}

// verdict is the run's one word: PASS or FAIL.
func (r *report) verdict() string {
	if !r.ok() {
		return "FAIL"
	}
	return "PASS"
}

// exitCode is the runner's exit status for the run: 130 when interrupted,
// 1 on a failure, 0 when every binary passed.
func (r *report) exitCode(res *vmResult) int {
	if res.Interrupted {
		return 130
	}
	if !r.ok() {
		return 1
	}
	return 0
}
