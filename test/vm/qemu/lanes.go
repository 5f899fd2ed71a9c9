// SPDX-License-Identifier: Apache-2.0

// The part of the init script that runs the test binaries: one after the
// other with their output live on the console, or in lanes, several at once.

package main

import (
	"fmt"
	"strings"
)

// runSection is the shell that runs s.Tests and leaves the number that
// failed in $failed. Each binary is announced by a START sentinel and ends
// with a RESULT one; the runner times and judges them from those alone.
//
// Under emulation one test binary keeps about one of the VM's CPUs busy (the
// verifier, the Go runtime and one flood at a time), so with two lanes the
// same binaries take about half as long. In lanes, a binary's output is kept
// in a file and printed whole, under a console lock, just before its RESULT:
// two binaries writing to the console at once would interleave mid-line, and
// a sentinel broken by another's output is a lost verdict. The binaries are
// taken from the list in its order by whichever lane is free (a claim is an
// atomic mkdir), so the longest should come first. A binary marked Alone
// runs before the lanes start, with nothing beside it: under emulation a
// flood that holds one CPU in softirq beside another binary patching
// kernel text on the other (every XDP attach and BPF_PROG_TEST_RUN updates
// the XDP dispatcher) has livelocked the guest.
func runSection(s initramfsSpec) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("failed=0")
	calls := make([]string, len(s.Tests))
	for i, t := range s.Tests {
		args := []string{"/tests/" + t.Name, "-test.v", "-test.timeout", s.TestTimeout.String()}
		if t.Run != "" {
			args = append(args, "-test.run", t.Run)
		}
		// Last, as the flag package keeps a flag's last value: a focused
		// run's -test.run wins over a binary's own.
		args = append(args, s.TestArgs...)
		for j := range args {
			args[j] = shQuote(args[j])
		}
		calls[i] = fmt.Sprintf("run %s %s %s", t.Name, shQuote("/"+t.workDir()), strings.Join(args, " "))
	}
	if s.Lanes <= 1 {
		w(`run() {`)
		w(`	name=$1; dir=$2; shift 2`)
		w(`	cd "$dir"`)
		w(`	echo "$M START name=$name"`)
		w(`	"$@" </dev/null`)
		w(`	rc=$?`)
		w(`	cd /`)
		w(`	echo "$M RESULT name=$name exit=$rc"`)
		w(`	[ "$rc" -eq 0 ] || failed=$((failed + 1))`)
		w(`}`)
		for _, c := range calls {
			w("%s", c)
		}
		return b.String()
	}
	w(`W=$(mktemp -d)`)
	w(`con_lock() { until mkdir "$W/console" 2>/dev/null; do usleep 20000; done; }`)
	w(`con_unlock() { rmdir "$W/console"; }`)
	w(`run() {`)
	w(`	name=$1; dir=$2; shift 2`)
	w(`	con_lock; echo "$M START name=$name"; con_unlock`)
	w(`	(cd "$dir" && exec "$@") </dev/null >"$W/$name.out" 2>&1`)
	w(`	rc=$?`)
	w(`	con_lock; cat "$W/$name.out"; echo "$M RESULT name=$name exit=$rc"; con_unlock`)
	w(`	rm -f "$W/$name.out"`)
	w(`	[ "$rc" -eq 0 ] || echo "$name" >>"$W/failed"`)
	w(`}`)
	var ks []string
	for i, c := range calls {
		w("test_%d() { %s; }", i+1, c)
		if s.Tests[i].Alone {
			w("test_%d", i+1)
		} else {
			ks = append(ks, fmt.Sprint(i+1))
		}
	}
	w(`lane() { for k in %s; do mkdir "$W/claim.$k" 2>/dev/null && "test_$k"; done; }`, strings.Join(ks, " "))
	for i := 0; i < s.Lanes; i++ {
		w("lane &")
	}
	w("wait")
	w(`[ -f "$W/failed" ] && failed=$(($(wc -l <"$W/failed")))`)
	return b.String()
}
