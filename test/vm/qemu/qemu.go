package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
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
	args := []string{
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
		"-append", strings.TrimSpace("console=ttyS0 panic=-1 quiet " + c.Append),
		"-no-reboot",
	}
	if c.Accel == "kvm" {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		// thread=multi gives each vCPU its own host thread; -cpu max exposes
		// every feature TCG can emulate instead of the dated qemu64 model.
		args = append(args, "-accel", "tcg,thread=multi", "-cpu", "max")
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
	// KilledAfterFinal: the final sentinel arrived but qemu did not power off
	// within the grace period and was killed. Results are still complete.
	KilledAfterFinal bool
	PanicLine        string
	WaitErr          error
}

func (r *vmResult) find(kind string) (event, bool) {
	for _, e := range r.Events {
		if e.Kind == kind {
			return e, true
		}
	}
	return event{}, false
}

// runQEMU boots one VM, copies its console line by line (sanitised) to out,
// collects the sentinel lines carrying marker, and returns when qemu exits.
// qemu is killed by PID when timeout passes, when ctx is cancelled, or when
// finalKind has been seen and qemu has not exited 15 s later.
func runQEMU(ctx context.Context, args []string, timeout time.Duration, out io.Writer, marker, finalKind string) (*vmResult, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
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

	res := &vmResult{}
	lines := make(chan string)
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(pr, 64<<10)
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

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var grace <-chan time.Time
	done := ctx.Done()
	kill := func() {
		// Kill only the process started here, by its PID; an error means it
		// has exited already.
		_ = cmd.Process.Kill()
	}
	for lines != nil {
		select {
		case line, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			io.WriteString(out, line+"\n")
			if strings.Contains(line, "Kernel panic - not syncing") && res.PanicLine == "" {
				res.PanicLine = strings.TrimSpace(line)
			}
			if ev, ok := parseSentinel(line, marker); ok {
				ev.At = time.Since(start)
				res.Events = append(res.Events, ev)
				if ev.Kind == finalKind && grace == nil {
					grace = time.After(15 * time.Second)
				}
			}
		case <-timer.C:
			res.TimedOut = true
			kill()
		case <-grace:
			res.KilledAfterFinal = true
			kill()
		case <-done:
			done = nil // closed channels stay ready; act once
			res.Interrupted = true
			kill()
		}
	}
	pr.Close()
	res.WaitErr = cmd.Wait()
	res.Elapsed = time.Since(start)
	var ee *exec.ExitError
	if res.WaitErr != nil && !errors.As(res.WaitErr, &ee) {
		return res, res.WaitErr
	}
	return res, nil
}
