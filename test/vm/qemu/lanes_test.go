// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLanes runs the init script's test section under the VM's own shell
// (busybox) with stand-in binaries: every binary runs exactly once, in its
// directory, failures are counted, and each binary's output reaches the
// console whole between its START and RESULT, even while the other lane
// writes.
func TestLanes(t *testing.T) {
	busybox := needTool(t, "busybox")
	root := t.TempDir()
	var tests []testBinary
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("t%d.test", i)
		tests = append(tests, testBinary{Name: name})
		dir := filepath.Join(root, "tests", name+".d")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Odd ones fail. Each prints 200 numbered lines, slowly enough
		// that the two lanes overlap, and the directory it runs in.
		script := fmt.Sprintf("#!%s sh\nfor i in $(seq 1 200); do echo \"%s line $i\"; [ $((i %% 50)) -eq 0 ] && usleep 20000; done\necho \"%s pwd $(pwd)\"\nexit %d\n",
			busybox, name, name, i%2)
		if err := os.WriteFile(filepath.Join(root, "tests", name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, lanes := range []int{1, 2} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			s := initramfsSpec{Tests: tests, TestTimeout: time.Minute, Marker: testMarker, Lanes: lanes}
			// The section names VM paths; here they live under root.
			section := strings.ReplaceAll(runSection(s), "'/tests/", "'"+root+"/tests/")
			sh := "M=" + shQuote(testMarker) + "\n" + section + "echo \"$M DONE failed=$failed\"\n"
			out, err := exec.Command(busybox, "sh", "-c", sh).CombinedOutput()
			if err != nil {
				t.Fatalf("sh: %v\n%s", err, out)
			}
			checkLaneOutput(t, string(out), tests, root, lanes)
		})
	}
	// The third binary alone: it runs first, and nothing starts or ends
	// while it runs; the others still share the lanes.
	t.Run("lanes=2,alone", func(t *testing.T) {
		alone := slices.Clone(tests)
		alone[2].Alone = true
		s := initramfsSpec{Tests: alone, TestTimeout: time.Minute, Marker: testMarker, Lanes: 2}
		section := strings.ReplaceAll(runSection(s), "'/tests/", "'"+root+"/tests/")
		sh := "M=" + shQuote(testMarker) + "\n" + section + "echo \"$M DONE failed=$failed\"\n"
		out, err := exec.Command(busybox, "sh", "-c", sh).CombinedOutput()
		if err != nil {
			t.Fatalf("sh: %v\n%s", err, out)
		}
		var kinds []string
		for _, l := range strings.Split(string(out), "\n") {
			if rest, ok := strings.CutPrefix(l, testMarker+" "); ok {
				kinds = append(kinds, rest)
			}
		}
		if len(kinds) < 3 || kinds[0] != "START name=t2.test" || kinds[1] != "RESULT name=t2.test exit=0" ||
			!strings.HasPrefix(kinds[2], "START") || !strings.HasPrefix(kinds[3], "START") {
			t.Errorf("sentinels %q: want t2.test's START and RESULT first, then two lanes", kinds)
		}
		checkLaneOutput(t, string(out), alone, root, 2)
	})
}

func checkLaneOutput(t *testing.T, out string, tests []testBinary, root string, lanes int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var kinds []string
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, testMarker+" "); ok {
			kinds = append(kinds, strings.Fields(rest)[0])
		}
	}
	if got, want := strings.Join(kinds, " "), strings.Repeat("START RESULT ", len(tests))+"DONE"; lanes == 1 && got != want {
		t.Fatalf("sentinels %s, want %s", got, want)
	}
	if lanes > 1 && !strings.Contains(strings.Join(kinds, " "), "START START") {
		t.Errorf("sentinels %v: no binary started while another ran", kinds)
	}
	if kinds[len(kinds)-1] != "DONE" || !strings.HasSuffix(lines[len(lines)-1], "DONE failed=2") {
		t.Errorf("last line %q, want DONE failed=2", lines[len(lines)-1])
	}
	// Each binary's 201 lines come whole, just before its RESULT.
	for _, tb := range tests {
		i := indexOf(lines, testMarker+" START name="+tb.Name)
		r := indexOf(lines, testMarker+" RESULT name="+tb.Name+" exit=")
		if i < 0 || r < i+201 {
			t.Fatalf("%s: START at line %d, RESULT at %d:\n%s", tb.Name, i, r, out)
		}
		for j := 1; j <= 200; j++ {
			if want := fmt.Sprintf("%s line %d", tb.Name, j); lines[r-202+j] != want {
				t.Fatalf("line %d before %s's RESULT is %q, want %q:\n%s", 202-j, tb.Name, lines[r-202+j], want, out)
			}
		}
		if want := tb.Name + " pwd " + root + "/tests/" + tb.Name + ".d"; lines[r-1] != want {
			t.Errorf("%s ran in %q, want %q", tb.Name, lines[r-1], want)
		}
		if want := fmt.Sprintf("exit=%d", (tb.Name[1]-'0')%2); !strings.HasSuffix(lines[r], want) {
			t.Errorf("%s: %q, want %s", tb.Name, lines[r], want)
		}
	}
}

func indexOf(lines []string, prefix string) int {
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return i
		}
	}
	return -1
}
