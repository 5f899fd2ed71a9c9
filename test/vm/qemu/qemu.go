// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// vmConfig is one qemu invocation.
type vmConfig struct {
	Kernel   string
	Initrd   string
	Accel    string // "kvm" or "tcg"
	MemoryMB int
	SMP      int
	Append   string // extra kernel command line
}

// qemuArgs builds the qemu command line.
func qemuArgs(c vmConfig) []string {
	cmdline := "console=" + guest.Console + " panic=-1 quiet loglevel=5"
	if c.Accel != "kvm" {
		// mitigations=off drops return thunks and barriers that cost
		// emulated time; root's loads bypass the verifier's speculation
		// checks either way, so nothing a test loads is verified
		// differently.
		cmdline = strings.TrimSpace(cmdline + " mitigations=off " + guest.TCGAppend)
	}
	args := append(slices.Clone(guest.MachineArgs),
		"-nographic",
		// No NIC at all: qemu would otherwise add an e1000 on user-mode
		// networking, and nothing in the VM may reach the outside.
		"-nic", "none",
		"-m", strconv.Itoa(c.MemoryMB),
		"-smp", strconv.Itoa(c.SMP),
		"-kernel", c.Kernel,
		"-initrd", c.Initrd,
		// panic=-1 reboots at once on a panic (init dying included) and
		// -no-reboot turns that reboot into a qemu exit, so a crashed guest
		// ends the run instead of waiting for the timeout.
		// quiet keeps the boot short on a slow serial console; loglevel=5
		// after it still lets warnings through (WARN(), "Illegal XDP return
		// value"), which quiet alone would hide while the tests run.
		"-append", strings.TrimSpace(cmdline+" "+c.Append),
		"-no-reboot",
	)
	if c.Accel == "kvm" {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		// thread=multi gives each vCPU its own host thread; -cpu max exposes
		// every feature TCG can emulate instead of the dated qemu64 model
		// (with the guest's own tuning: arch.go).
		args = append(args, "-accel", "tcg,thread=multi", "-cpu", guest.TCGCPU)
	}
	return args
}

// event is one sentinel line from the guest.
type event struct {
	Kind   string            // BOOT, SETUP-FAIL, START, RESULT, DONE, PROBE-OK
	Fields map[string]string // key=value words after the kind
	Rest   string            // everything after the kind, verbatim
	At     time.Duration     // host time since qemu started
}

// parseSentinel finds a sentinel in one console line. The marker is looked
// for anywhere in the line, not only at its start: a test that ends its output
// without a newline, or a kernel message printed concurrently, can put text in
// front of it.
func parseSentinel(line, marker string) (event, bool) {
	i := strings.Index(line, marker)
	if i < 0 {
		return event{}, false
	}
	words := strings.Fields(line[i+len(marker):])
	if len(words) == 0 {
		return event{}, false
	}
	ev := event{Kind: words[0], Fields: map[string]string{}}
	ev.Rest = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line[i+len(marker):]), words[0]))
	for _, w := range words[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			ev.Fields[k] = v
		}
	}
	return ev, true
}

// escapes matches terminal control sequences. SeaBIOS and the kernel's boot
// stub write "ESC c" (full terminal reset) and clear-screen to the serial
// console, which would wipe the terminal of whoever runs make and clutter
// the log file.
var escapes = regexp.MustCompile(`\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-~])`)

// sanitize turns one raw console line into printable lines. A terminal reset
// starts a new screen, so it becomes a line break: without one, the first
// line init prints would be glued to SeaBIOS's "Booting from ROM..".
func sanitize(raw string) []string {
	raw = strings.ReplaceAll(raw, "\x1bc", "\n")
	raw = strings.ReplaceAll(escapes.ReplaceAllString(raw, ""), "\r", "")
	parts := strings.Split(raw, "\n")
	if len(parts) == 1 {
		return parts
	}
	var lines []string
	for _, p := range parts {
		if p != "" { // the breaks made from resets, not blank lines of output
			lines = append(lines, p)
		}
	}
	return lines
}

// vmResult is what one qemu run produced.
type vmResult struct {
	Events      []event
	Elapsed     time.Duration
	TimedOut    bool
	Interrupted bool
	// BootHung is set, with the evidence, when the guest kernel stalled or
	// stayed silent before the boot sentinel and qemu was killed: no test had
	// started, so the run can be repeated.
	BootHung string
	// KilledAfterFinal: the final sentinel arrived but qemu did not power off
	// within the grace period and was killed. Results are still complete.
	KilledAfterFinal bool
	PanicLine        string
	// KernelSplats are kernel BUG/WARNING/Oops lines seen after boot, up to
	// maxSplats; reported, since a test may pass while the kernel complains.
	KernelSplats []string
	WaitErr      error
}

const maxSplats = 10

func (r *vmResult) find(kind string) (event, bool) {
	for _, e := range r.Events {
		if e.Kind == kind {
			return e, true
		}
	}
	return event{}, false
}

// runSpec is one qemu run.
type runSpec struct {
	Args    []string
	Out     io.Writer // receives the sanitised console, line by line
	Marker  string
	Timeout time.Duration // hard limit for the whole run
	// BootKind is the sentinel that ends the boot; if BootTimeout passes
	// first, or the kernel reports a stall before it, the boot counts as
	// hung. Empty: no boot watch.
	BootKind    string
	BootTimeout time.Duration
	// FinalKind is the last sentinel; qemu gets PoweroffGrace (default 15 s)
	// to power off after it.
	FinalKind     string
	PoweroffGrace time.Duration
}

// qemuBinary is a variable so that the tests can put a script in its place.
var qemuBinary = "qemu-system-x86_64"

// stallLine matches the kernel's reports of a CPU that stopped making
// progress. Under TCG on an overloaded host (load 11 on 2 cores) a boot once
// hung that way in kernel init before running /init, repeating these lines
// until the 20-minute timeout; it did not recur on an idle host.
var stallLine = regexp.MustCompile(`soft lockup|hard LOCKUP|rcu: INFO: \S+ (self-)?detected stall`)

// splatLine matches kernel reports worth surfacing in the summary: a test
// can pass while the kernel warns about what the XDP program did.
var splatLine = regexp.MustCompile(`^\[ *[0-9]+\.[0-9]+\] .*(BUG: |WARNING: |Oops: |general protection fault|kernel BUG at|Illegal XDP return value)`)

// runQEMU boots one VM, copies its console to spec.Out, collects the sentinel
// lines carrying spec.Marker, and returns when qemu exits. qemu is killed by
// PID when the timeout passes, when the boot hangs, when ctx is cancelled, or
// when the final sentinel has been seen and qemu has not exited soon after.
func runQEMU(ctx context.Context, spec runSpec) (*vmResult, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(qemuBinary, spec.Args...)
	// qemu's own warnings (stderr) go into the same stream as the console so
	// that the log shows them in order.
	cmd.Stdout, cmd.Stderr = pw, pw
	// If the runner itself is killed, qemu must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close() // qemu holds the only write end now: EOF means qemu is gone

	w := &consoleWatch{spec: spec, cmd: cmd, start: start, res: &vmResult{}}
	w.watch(ctx, consoleLines(pr))
	pr.Close()
	res := w.res
	res.WaitErr = cmd.Wait()
	res.Elapsed = time.Since(start)
	var ee *exec.ExitError
	if res.WaitErr != nil && !errors.As(res.WaitErr, &ee) {
		return res, res.WaitErr
	}
	return res, nil
}

// consoleLines sends the console's lines, sanitised, until r ends.
func consoleLines(r io.Reader) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			s, err := br.ReadString('\n')
			if s != "" {
				for _, l := range sanitize(strings.TrimSuffix(s, "\n")) {
					lines <- l
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return lines
}

// consoleWatch follows one qemu run's console and its clocks, and kills
// qemu when the run must end.
type consoleWatch struct {
	spec      runSpec
	cmd       *exec.Cmd
	start     time.Time
	res       *vmResult
	booting   bool
	bootTimer <-chan time.Time
	grace     <-chan time.Time
	killed    bool
}

// kill kills only the process started here, by its PID; an error means it
// has exited already.
func (w *consoleWatch) kill() {
	_ = w.cmd.Process.Kill()
	w.killed = true
}

// watch copies the console to spec.Out until qemu closes it, acting on
// each line and on the timeouts, the final sentinel's grace and ctx.
func (w *consoleWatch) watch(ctx context.Context, lines <-chan string) {
	spec, res := w.spec, w.res
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	w.booting = spec.BootKind != ""
	if w.booting && spec.BootTimeout > 0 {
		t := time.NewTimer(spec.BootTimeout)
		defer t.Stop()
		w.bootTimer = t.C
	}
	done := ctx.Done()
	for lines != nil {
		select {
		case line, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			w.line(line)
		case <-w.bootTimer:
			w.bootTimer = nil
			res.BootHung = fmt.Sprintf("no %s sentinel within %v", spec.BootKind, spec.BootTimeout)
			w.kill()
		case <-timer.C:
			res.TimedOut = true
			w.kill()
		case <-w.grace:
			res.KilledAfterFinal = true
			w.kill()
		case <-done:
			done = nil // closed channels stay ready; act once
			res.Interrupted = true
			w.kill()
		}
	}
}

// line copies one console line and records what it says: a panic, a
// stall during the boot, a kernel splat after it, a sentinel.
func (w *consoleWatch) line(line string) {
	spec, res := w.spec, w.res
	io.WriteString(spec.Out, line+"\n")
	if strings.Contains(line, "Kernel panic - not syncing") && res.PanicLine == "" {
		res.PanicLine = strings.TrimSpace(line)
		// Before init reported, no test has run: a panic there (seen
		// on 6.12 under TCG, an int3 oops while module loading patched
		// kernel text) is the emulated boot's, retried like a stall.
		if w.booting && !w.killed {
			res.BootHung = "kernel panicked during boot: " + res.PanicLine
			w.kill()
		}
	}
	if w.booting && !w.killed && stallLine.MatchString(line) {
		res.BootHung = "kernel stalled during boot: " + strings.TrimSpace(line)
		w.kill()
	}
	if !w.booting && splatLine.MatchString(line) && len(res.KernelSplats) < maxSplats {
		res.KernelSplats = append(res.KernelSplats, strings.TrimSpace(line))
	}
	if ev, ok := parseSentinel(line, spec.Marker); ok {
		ev.At = time.Since(w.start)
		res.Events = append(res.Events, ev)
		if ev.Kind == spec.BootKind {
			w.booting, w.bootTimer = false, nil
		}
		if ev.Kind == spec.FinalKind && w.grace == nil {
			d := spec.PoweroffGrace
			if d == 0 {
				d = 15 * time.Second
			}
			w.grace = time.After(d)
		}
	}
}
