// SPDX-License-Identifier: Apache-2.0

// What the runner writes for a person to read: the console log file (one per
// run, the newest kept), whole-line writes shared by the console reader and the
// runner, and command lines and module lists in a form that can be pasted back
// into a shell. Kept apart from main.go so that the run's steps read without
// the bookkeeping of where their output goes.

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// lineWriter serialises whole-line writes from the console reader and the
// runner's own messages onto stdout and the log file.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// openLog creates the console log. By default every run gets its own file
// under <cache>/logs (the newest 20 are kept) and logs/latest.log points to it,
// so that concurrent runs never write into each other's log.
func openLog(cacheDir, explicit string) (*os.File, string, error) {
	if explicit != "" {
		f, err := os.Create(explicit)
		return f, explicit, err
	}
	dir := filepath.Join(cacheDir, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "run-*.log"))
	sort.Strings(old) // names sort by time
	for len(old) >= 20 {
		os.Remove(old[0])
		old = old[1:]
	}
	name := fmt.Sprintf("run-%s-%d.log", time.Now().Format("20060102-150405"), os.Getpid())
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		return nil, "", err
	}
	latest := filepath.Join(dir, "latest.log")
	os.Remove(latest)
	_ = os.Symlink(name, latest) // a convenience only
	return f, p, nil
}

// commandLine renders a command so that it can be pasted into a shell, for
// rerunning a VM by hand.
func commandLine(name string, args []string) string {
	words := []string{name}
	for _, a := range args {
		if strings.ContainsAny(a, " '\"$|&;<>()*?") {
			a = shQuote(a)
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

func moduleNames(paths []string) string {
	var names []string
	for _, p := range paths {
		names = append(names, moduleName(p))
	}
	return strings.Join(names, ",")
}
