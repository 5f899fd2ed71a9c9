// SPDX-License-Identifier: Apache-2.0

// Package command runs external programs with a hard time limit. The tests
// (through internal/testkit/testutil) and the benchmark program use it; production
// does not.
package command

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrTimeout is wrapped by Run's error when the command was killed.
var ErrTimeout = errors.New("command timed out")

// Run runs an external command with a hard time limit and returns
// its combined stdout and stderr. The command starts in a process group of
// its own, and on timeout SIGKILL goes to exactly that group (whose id is
// the pid we started), so its children die too and nothing else does:
// tools such as trafgen ignore SIGINT while busy, hence KILL.
//
// Called inside netns.Netns.Do, the command runs in that network namespace: a
// child inherits the namespace of the thread that forks it.
func Run(timeout time.Duration, name string, args ...string) ([]byte, error) {
	return RunCmd(timeout, exec.Command(name, args...))
}

// RunCmd is Run for a command the caller prepared (its Dir, its Env); Run
// sets its output and process attributes.
func RunCmd(timeout time.Duration, cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	name := cmd.Args[0]
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that left the group and kept our stdout open must not
	// block Wait forever.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pgid := cmd.Process.Pid

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-timer.C:
		// Negative pid: the whole group we created, and only it.
		_ = unix.Kill(-pgid, unix.SIGKILL)
		<-done
		return out.Bytes(), fmt.Errorf("%s after %v: %w", name, timeout, ErrTimeout)
	}
}
