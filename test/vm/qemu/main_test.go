// SPDX-License-Identifier: Apache-2.0

// Helpers the tests share (host tools as independent references, the
// console marker) and the checks on what the command is asked to run.

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// needTool skips when a host tool used as an independent reference is
// missing, but fails under CI, where scripts/deps.sh has installed it.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	testutil.Require(t, err == nil, "%s not installed", name)
	return p
}

const testMarker = "@@xdplimit-vm:0123456789ab@@"

func TestCheckBinaries(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "x.test")
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	if _, err := checkBinaries([]string{notELF}); err == nil {
		t.Error("accepted a shell script")
	}
	if _, err := checkBinaries([]string{filepath.Join(dir, "bad name.test")}); err == nil {
		t.Error("accepted a name with a space")
	}
	// The test binary running this test is a real executable; whether it is
	// static depends on how it was built, so only the duplicate check is
	// asserted on it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkBinaries([]string{self, self}); err == nil {
		t.Error("accepted two binaries with the same name")
	}
}

func TestCheckFiles(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "helper.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)
	data := filepath.Join(dir, "policy.yaml")
	os.WriteFile(data, []byte("a: 1\n"), 0o644)

	files, err := checkFiles([]string{script, data + ":/etc/xdplimit/policy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	want := []extraFile{{script, "/usr/local/bin/helper.sh"}, {data, "/etc/xdplimit/policy.yaml"}}
	if !reflect.DeepEqual(files, want) {
		t.Fatalf("got %v, want %v", files, want)
	}
	for _, bad := range []string{
		data + ":relative/path",
		data + ":/tests/x",
		data + ":/a/../b",
		filepath.Join(dir, "missing"),
		dir, // a directory
	} {
		if _, err := checkFiles([]string{bad}); err == nil {
			t.Errorf("accepted --file %s", bad)
		}
	}
	// A dynamically linked executable cannot run in the VM.
	if sh, err := exec.LookPath("sh"); err == nil {
		if real, err := filepath.EvalSymlinks(sh); err == nil && isELF(real) && checkStaticBinary(real) != nil {
			if _, err := checkFiles([]string{real}); err == nil {
				t.Errorf("accepted dynamically linked %s", real)
			}
		}
	}
}
