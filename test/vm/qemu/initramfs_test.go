// SPDX-License-Identifier: Apache-2.0

// Building the guest's initramfs: the cpio writer against GNU cpio, the
// init script as shell, and a package's testdata/ in the archive.

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCPIO checks the archive writer against GNU cpio, an independent reader
// of the same format.
func TestCPIO(t *testing.T) {
	cpio := needTool(t, "cpio")
	dir := t.TempDir()
	hostFile := filepath.Join(dir, "payload")
	payload := bytes.Repeat([]byte("0123456789"), 1001) // not a multiple of 4
	if err := os.WriteFile(hostFile, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	steps := []error{
		c.charDev("dev/console", 0o600, 5, 1),
		c.hostFile("tests/a.test", 0o755, hostFile),
		c.bytesFile("init", 0o755, []byte("#!/bin/sh\n")),
		c.symlink("bin/sh", "/bin/busybox"),
		c.close(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	archive := filepath.Join(dir, "a.cpio")
	if err := os.WriteFile(archive, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	list := exec.Command(cpio, "-itv", "--quiet", "-F", archive)
	out, err := list.Output()
	if err != nil {
		t.Fatalf("cpio -itv: %v", exitDetail(err))
	}
	want := map[string]string{ // name -> mode column prefix
		"dev":          "drwxr-xr-x",
		"dev/console":  "crw-------",
		"tests":        "drwxr-xr-x",
		"tests/a.test": "-rwxr-xr-x",
		"init":         "-rwxr-xr-x",
		"bin":          "drwxr-xr-x",
		"bin/sh":       "lrwxrwxrwx",
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		name := f[len(f)-1]
		if len(f) > 2 && f[len(f)-2] == "->" {
			name = f[len(f)-3]
		}
		got[name] = f[0]
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("cpio lists\n%s\nwant %v", out, want)
	}

	extract := exec.Command(cpio, "-i", "--quiet", "--to-stdout", "-F", archive, "tests/a.test")
	content, err := extract.Output()
	if err != nil {
		t.Fatalf("cpio -i: %v", exitDetail(err))
	}
	if !bytes.Equal(content, payload) {
		t.Fatalf("extracted %d bytes, want the %d written", len(content), len(payload))
	}
}

// TestInitScript checks that the generated init script is valid shell and
// that arguments survive quoting.
func TestInitScript(t *testing.T) {
	sh := needTool(t, "sh")
	s := initramfsSpec{
		Release:     "6.1.0-56-cloud-amd64",
		Modules:     []string{"/cache/modules/veth.ko"},
		Tests:       []testBinary{{Name: "a.test"}, {Name: "b.test", PkgDir: "./b", Run: "^TestOnly$"}},
		TestArgs:    []string{"-test.run", "TestA|TestB", "it's"},
		TestTimeout: 10 * time.Minute,
		Env:         []string{"FOO=bar baz"},
		Marker:      testMarker,
	}
	script := initScript(s)
	path := filepath.Join(t.TempDir(), "init")
	os.WriteFile(path, []byte(script), 0o755)
	if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s\n%s", err, out, script)
	}
	for _, want := range []string{
		"run a.test '/tests/a.test.d' '/tests/a.test' '-test.v' '-test.timeout' '10m0s' '-test.run' 'TestA|TestB' 'it'\\''s'",
		"must insmod '/lib/modules/6.1.0-56-cloud-amd64/veth.ko'",
		// Its own filter comes before --test-args': the flag package
		// keeps the last, and a focused run's filter wins.
		"run b.test '/src/b' '/tests/b.test' '-test.v' '-test.timeout' '10m0s' '-test.run' '^TestOnly$' '-test.run' 'TestA|TestB' 'it'\\''s'",
		"export 'CI=true'",
		"export 'FOO=bar baz'",
		"DONE total=2 ",
		"poweroff -f",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("init script lacks %q:\n%s", want, script)
		}
	}
	// The quoted words must come back unchanged from a real shell.
	words := []string{"plain", "it's", "a b", "$HOME", `back\slash`, ""}
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, shQuote(w))
	}
	out, err := exec.Command(sh, "-c", `for w in `+strings.Join(quoted, " ")+`; do printf '<%s>\n' "$w"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, w := range words {
		want.WriteString("<" + w + ">\n")
	}
	if string(out) != want.String() {
		t.Fatalf("shell saw\n%s\nwant\n%s", out, want.String())
	}
}

// TestAddTree checks that a package's testdata/ lands in the binary's
// working directory in the archive, at the package's place in the
// repository, with symlinked files followed.
func TestAddTree(t *testing.T) {
	cpio := needTool(t, "cpio")
	pkg := t.TempDir()
	os.MkdirAll(filepath.Join(pkg, "testdata", "sub"), 0o755)
	os.WriteFile(filepath.Join(pkg, "testdata", "sub", "a.yaml"), []byte("a: 1\n"), 0o644)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	os.WriteFile(outside, []byte("linked"), 0o644)
	if err := os.Symlink(outside, filepath.Join(pkg, "testdata", "link.txt")); err != nil {
		t.Fatal(err)
	}
	bin := testBinary{Name: "p.test", PkgDir: "./cmd/p/"}
	if got := bin.workDir(); got != "src/cmd/p" {
		t.Fatalf("a package named relative to the repository runs in %q, want src/cmd/p", got)
	}
	for _, dir := range []string{pkg, "../elsewhere", ".", ""} {
		if got := (testBinary{Name: "p.test", PkgDir: dir}).workDir(); got != "tests/p.test.d" {
			t.Errorf("package dir %q: runs in %q, want tests/p.test.d", dir, got)
		}
	}
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	if err := addTree(c, filepath.Join(pkg, "testdata"), path.Join(bin.workDir(), "testdata")); err != nil {
		t.Fatal(err)
	}
	c.close()
	archive := filepath.Join(t.TempDir(), "a.cpio")
	os.WriteFile(archive, buf.Bytes(), 0o644)
	out, err := exec.Command(cpio, "-it", "--quiet", "-F", archive).Output()
	if err != nil {
		t.Fatalf("cpio -it: %v", exitDetail(err))
	}
	want := "src\nsrc/cmd\nsrc/cmd/p\nsrc/cmd/p/testdata\nsrc/cmd/p/testdata/link.txt\n" +
		"src/cmd/p/testdata/sub\nsrc/cmd/p/testdata/sub/a.yaml\n"
	if string(out) != want {
		t.Fatalf("archive holds\n%s\nwant\n%s", out, want)
	}
	content, err := exec.Command(cpio, "-i", "--quiet", "--to-stdout", "-F", archive, "src/cmd/p/testdata/link.txt").Output()
	if err != nil || string(content) != "linked" {
		t.Fatalf("link.txt: %q %v", content, err)
	}
	if err := checkTrees([]string{"../outside"}); err == nil {
		t.Error("--tree accepted a directory outside the repository")
	}
}
