// SPDX-License-Identifier: Apache-2.0

// Per-binary test selection: --run NAME=REGEX gives one test binary its own
// -test.run, so that one VM boot can run a whole package beside a few tests
// of another (a smoke run picks the tests that load each build, attach and
// judge a flood out of suites that take far longer whole).

package main

import (
	"fmt"
	"regexp"
	"strings"
)

// applyRuns sets each --run filter on the test binary it names. A filter
// for a binary that is not run, a second filter for the same binary or a
// pattern that does not compile is an error before anything boots.
func applyRuns(tests []testBinary, runs []string) error {
	byName := testsByName(tests)
	for _, r := range runs {
		name, pattern, ok := strings.Cut(r, "=")
		if !ok || name == "" || pattern == "" {
			return fmt.Errorf("--run %q: want NAME=REGEX, NAME a test binary's base name", r)
		}
		t, found := byName[name]
		if !found {
			return fmt.Errorf("--run %s: no test binary named %s is run", r, name)
		}
		if t.Run != "" {
			return fmt.Errorf("--run %s: %s already runs only %s", r, name, t.Run)
		}
		// go test matches each level of a test's name (split at '/')
		// against the pattern's element at that level.
		for _, level := range strings.Split(pattern, "/") {
			if _, err := regexp.Compile(level); err != nil {
				return fmt.Errorf("--run %s: %w", r, err)
			}
		}
		t.Run = pattern
	}
	return nil
}

// applyAlone marks the test binaries that --alone names to run with no
// other beside them. A name that is not run is an error, as for --run.
func applyAlone(tests []testBinary, names []string) error {
	byName := testsByName(tests)
	for _, name := range names {
		t, found := byName[name]
		if !found {
			return fmt.Errorf("--alone %s: no test binary named %s is run", name, name)
		}
		t.Alone = true
	}
	return nil
}

// testsByName indexes the test binaries by base name, which checkBinaries
// keeps unique.
func testsByName(tests []testBinary) map[string]*testBinary {
	byName := map[string]*testBinary{}
	for i := range tests {
		byName[tests[i].Name] = &tests[i]
	}
	return byName
}
