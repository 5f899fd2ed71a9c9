// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The broken policies of the parse cases are also files in testdata/broken,
// one per case, so that tests outside this package run them through every
// command that reads a policy (cmd/xdplimit checks that `policy check` and
// an attach refuse each alike). Each case compares its file with its text;
// `go test ./policy -update-broken` rewrites them, and a full run fails on
// a file no case has.

var updateBroken = flag.Bool("update-broken", false, "rewrite testdata/broken from the parse cases")

const brokenDir = "testdata/broken"

var brokenSeen = struct {
	sync.Mutex
	files map[string]string // file name → the case's full name
}{files: map[string]string{}}

var unsafeName = regexp.MustCompile(`[^a-z0-9]+`)

// checkBrokenFixture compares the file of a broken case with its text.
func checkBrokenFixture(t *testing.T, src string) {
	t.Helper()
	name := strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-") + ".yaml"
	brokenSeen.Lock()
	other, dup := brokenSeen.files[name]
	brokenSeen.files[name] = t.Name()
	brokenSeen.Unlock()
	if dup && other != t.Name() {
		t.Fatalf("%s and %s both make %s: rename one", other, t.Name(), name)
	}
	path := filepath.Join(brokenDir, name)
	if *updateBroken {
		if err := os.MkdirAll(brokenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, []byte(src)) {
		t.Fatalf("%s is not this case's policy (%v): run go test ./policy -update-broken", path, err)
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	// Only a run of every test saw every case.
	if f := flag.Lookup("test.run"); code == 0 && f != nil && f.Value.String() == "" {
		ents, _ := os.ReadDir(brokenDir)
		for _, e := range ents {
			brokenSeen.Lock()
			_, ok := brokenSeen.files[e.Name()]
			brokenSeen.Unlock()
			switch {
			case ok:
			case *updateBroken:
				os.Remove(filepath.Join(brokenDir, e.Name()))
			default:
				fmt.Fprintf(os.Stderr, "%s/%s: no parse case makes it: run go test ./policy -update-broken\n", brokenDir, e.Name())
				code = 1
			}
		}
	}
	os.Exit(code)
}
