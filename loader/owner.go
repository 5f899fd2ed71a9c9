// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// OwnerAlive reports whether pid, the attach process recorded in an
// interface's metadata, still runs and is an xdplimit process. Signal 0 is
// not enough: pids get reused, and a recycled pid would make status report a
// dead attach as running and reload signal a stranger.
//
// A process is taken as xdplimit when its executable is the one running here
// (so a renamed binary still matches itself) or is named xdplimit*; when its
// executable cannot be read (another user's process), its command name
// decides. A zombie is not alive: it can no longer reload or detach.
//
// The process's start time is not compared with the metadata: the recorded
// attach time is the first attach's, kept when a later attach adopts the
// pinned state and records its own pid, so a legitimate owner may well have
// started after it.
func OwnerAlive(pid uint32) bool {
	return pid != 0 && procIsXdplimit(fmt.Sprintf("/proc/%d", pid))
}

// procIsXdplimit judges the process of a /proc/PID directory.
func procIsXdplimit(dir string) bool {
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return false
	}
	comm, state, ok := parseProcStat(stat)
	if !ok || state == 'Z' || state == 'X' {
		return false
	}
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		return isXdplimitExe(exe)
	}
	return strings.HasPrefix(comm, "xdplimit")
}

// parseProcStat returns the command name and state of /proc/PID/stat,
// "PID (COMM) S ...". The name may itself hold spaces and parentheses, so
// it ends at the last ')'.
func parseProcStat(b []byte) (comm string, state byte, ok bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || len(b) < end+3 {
		return "", 0, false
	}
	return string(b[open+1 : end]), b[end+2], true
}

// isXdplimitExe: exe (a /proc/PID/exe target) is this binary or an
// xdplimit one. A binary replaced while it runs reads as "PATH (deleted)"
// (os.Executable trims that suffix from its own).
func isXdplimitExe(exe string) bool {
	exe = strings.TrimSuffix(exe, " (deleted)")
	if self, err := os.Executable(); err == nil && self == exe {
		return true
	}
	return strings.HasPrefix(filepath.Base(exe), "xdplimit")
}
