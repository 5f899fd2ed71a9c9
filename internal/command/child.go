// SPDX-License-Identifier: Apache-2.0

// Servers the tests and the benchmark run as children (redis-server, the
// CrowdSec LAPI): started from a thread of the caller's choosing, which
// decides their network namespace, with their output kept in a log file.

package command

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartChild starts cmd from inside do, which runs its function on a locked
// thread (netns.Netns.Do, cpupin.Locked): children inherit the forking
// thread's network namespace. do's thread is held until the child is
// reaped, and the child gets Pdeathsig, which fires when the forking thread
// exits: so it dies with this process, and not before. Its output is
// appended to logPath, a file rather than a pipe: nothing to copy while it
// runs, and every run of a restarted server appends to the same log. done
// is closed when the child has exited and been reaped; the exit status is
// not reported, as the caller ends the child (a kill is not a failure).
func StartChild(do func(func() error) error, cmd *exec.Cmd, logPath string) (done chan struct{}, err error) {
	out, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL}
	done = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		defer close(done)
		err := do(func() error {
			if err := cmd.Start(); err != nil {
				return err
			}
			started <- nil
			_ = cmd.Wait()
			return nil
		})
		if err != nil {
			started <- err
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// ChildLog is what a child started with StartChild logged so far (every
// run), or why it cannot be read: for failure messages.
func ChildLog(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
