package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testutil"
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

func TestParseSentinel(t *testing.T) {
	tests := []struct {
		line   string
		ok     bool
		kind   string
		fields map[string]string
		rest   string
	}{
		{testMarker + " RESULT name=a.test exit=0", true, "RESULT", map[string]string{"name": "a.test", "exit": "0"}, "name=a.test exit=0"},
		// Test output without a trailing newline glued in front.
		{"ok  \tpkg 0.1s" + testMarker + " RESULT name=a.test exit=1", true, "RESULT", map[string]string{"name": "a.test", "exit": "1"}, "name=a.test exit=1"},
		{testMarker + " SETUP-FAIL mount -t bpf bpf /sys/fs/bpf", true, "SETUP-FAIL", map[string]string{}, "mount -t bpf bpf /sys/fs/bpf"},
		{testMarker, false, "", nil, ""},
		// Another run's marker is not ours.
		{"@@xdplimit-vm:ffffffffffff@@ DONE total=1 failed=0", false, "", nil, ""},
		{"--- PASS: TestX (0.00s)", false, "", nil, ""},
	}
	for _, tt := range tests {
		ev, ok := parseSentinel(tt.line, testMarker)
		if ok != tt.ok {
			t.Errorf("%q: ok=%v, want %v", tt.line, ok, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		if ev.Kind != tt.kind || !reflect.DeepEqual(ev.Fields, tt.fields) || ev.Rest != tt.rest {
			t.Errorf("%q: got %q %v %q, want %q %v %q", tt.line, ev.Kind, ev.Fields, ev.Rest, tt.kind, tt.fields, tt.rest)
		}
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct {
		raw  string
		want []string
	}{
		{"plain\r", []string{"plain"}},
		{"", []string{""}},
		{"\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2)\r", []string{"SeaBIOS (version 1.16.2)"}},
		{"Booting from ROM..\x1bc\x1b[?7l\x1b[2J" + testMarker + " BOOT uptime=1.7\r", []string{"Booting from ROM..", testMarker + " BOOT uptime=1.7"}},
		{"\x1b[1;31mred\x1b[0m", []string{"red"}},
	}
	for _, tt := range tests {
		if got := sanitize(tt.raw); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("sanitize(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestParseKernelDepends(t *testing.T) {
	control := "Package: linux-image-cloud-amd64\nVersion: 6.1.192-2\n" +
		"Depends: linux-image-6.1.0-56-cloud-amd64 (= 6.1.192-2)\nDescription: x\n"
	pkg, version, ok := parseKernelDepends("linux-image-cloud-amd64", control)
	if !ok || pkg != "linux-image-6.1.0-56-cloud-amd64" || version != "6.1.192-2" {
		t.Fatalf("got %q %q %v", pkg, version, ok)
	}
	pkg, version, ok = parseKernelDepends("linux-image-cloud-amd64", "Depends: kmod, linux-image-6.1.0-57-cloud-amd64 | linux-image-6.1.0-56-cloud-amd64\n")
	if !ok || pkg != "linux-image-6.1.0-57-cloud-amd64" || version != "" {
		t.Fatalf("unpinned: got %q %q %v", pkg, version, ok)
	}
	if _, _, ok := parseKernelDepends("linux-image-cloud-amd64", "Depends: kmod, linux-base\n"); ok {
		t.Fatal("found a kernel in a record without one")
	}
	if v := controlField(control, "Version"); v != "6.1.192-2" {
		t.Fatalf("Version %q", v)
	}
}

func TestImagePackage(t *testing.T) {
	for name, want := range map[string]bool{
		"linux-image-6.1.0-56-cloud-amd64":                true,
		"linux-image-6.12.107+deb12-cloud-amd64-unsigned": true,
		"linux-image-6.12.117+deb12-cloud-amd64":          true,
		"linux-image-cloud-amd64":                         false,
		"linux-image-6.12-cloud-amd64":                    false,
		"linux-image-amd64":                               false,
		"linux-headers-6.1.0-56-cloud-amd64":              false,
	} {
		if got := imagePackage.MatchString(name); got != want {
			t.Errorf("%s: image package %v, want %v", name, got, want)
		}
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"/x/kernel/drivers/net/veth.ko":     "veth",
		"nf-tables.ko.xz":                   "nf_tables",
		"kernel/net/sched/sch_netem.ko.zst": "sch_netem",
		"veth":                              "veth",
	} {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
}

// elfBytes is content that passes decompressModule's ELF check.
var elfBytes = append([]byte("\x7fELF"), bytes.Repeat([]byte("module body "), 100)...)

func TestDecompressModule(t *testing.T) {
	dir := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(elfBytes)
	zw.Close()
	srcs := map[string][]byte{
		"plain.ko":   elfBytes,
		"gzip.ko.gz": gz.Bytes(),
	}
	for _, tool := range []struct{ bin, ext string }{{"xz", ".ko.xz"}, {"zstd", ".ko.zst"}} {
		if _, err := exec.LookPath(tool.bin); err != nil {
			t.Logf("%s not installed, not testing %s", tool.bin, tool.ext)
			continue
		}
		cmd := exec.Command(tool.bin, "-c")
		cmd.Stdin = bytes.NewReader(elfBytes)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", tool.bin, err)
		}
		srcs[tool.bin+tool.ext] = out
	}
	for name, data := range srcs {
		src := filepath.Join(dir, name)
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, "out", name+".out")
		if err := decompressModule(src, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, _ := os.ReadFile(dst)
		if !bytes.Equal(got, elfBytes) {
			t.Errorf("%s: content differs after decompression", name)
		}
	}
	bad := filepath.Join(dir, "bad.ko")
	os.WriteFile(bad, []byte("not elf"), 0o644)
	if err := decompressModule(bad, filepath.Join(dir, "bad.out")); err == nil {
		t.Error("accepted a module that is not ELF")
	}
}

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
		Tests:       []testBinary{{Name: "a.test"}, {Name: "b.test"}},
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
		"run a.test '/tests/a.test' '-test.v' '-test.timeout' '10m0s' '-test.run' 'TestA|TestB' 'it'\\''s'",
		"must insmod '/lib/modules/6.1.0-56-cloud-amd64/veth.ko'",
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

func TestEvaluate(t *testing.T) {
	tests := []testBinary{{Name: "a.test"}, {Name: "b.test"}}
	ev := func(kind, rest string) event {
		e, ok := parseSentinel(testMarker+" "+kind+" "+rest, testMarker)
		if !ok {
			t.Fatalf("bad event %s %s", kind, rest)
		}
		return e
	}
	full := func(exitA, exitB string, failed int) []event {
		return []event{
			ev("BOOT", "uptime=1.7"),
			ev("START", "name=a.test"), ev("RESULT", "name=a.test exit="+exitA),
			ev("START", "name=b.test"), ev("RESULT", "name=b.test exit="+exitB),
			ev("DONE", fmt.Sprintf("total=2 failed=%d setup_failed=0", failed)),
		}
	}
	cases := []struct {
		name   string
		res    vmResult
		passes bool
		reason string // part of one failure reason
	}{
		{"all pass", vmResult{Events: full("0", "0", 0)}, true, ""},
		{"one fails", vmResult{Events: full("0", "1", 1)}, false, "b.test: exit status 1"},
		{"signal", vmResult{Events: full("0", "137", 1)}, false, "exit status 137"},
		{"no DONE", vmResult{Events: full("0", "0", 0)[:5]}, false, "no DONE"},
		{"died in b", vmResult{Events: full("0", "0", 0)[:4]}, false, "b.test: started but reported no exit status"},
		{"never booted", vmResult{}, false, "no BOOT"},
		{"timeout", vmResult{Events: full("0", "0", 0)[:4], TimedOut: true}, false, "timed out"},
		{"panic", vmResult{Events: full("0", "0", 0)[:4], PanicLine: "Kernel panic - not syncing: sysrq triggered crash"}, false, "Kernel panic"},
		{"count mismatch", vmResult{Events: full("0", "0", 1)}, false, "DONE reports 1 failed"},
		{"setup failed", vmResult{Events: append([]event{ev("SETUP-FAIL", "mount -t bpf bpf /sys/fs/bpf")}, full("0", "0", 0)...)}, false, "mount -t bpf"},
		{"unknown test", vmResult{Events: append(full("0", "0", 0), ev("RESULT", "name=c.test exit=0"))}, false, "unknown test"},
		{"no poweroff", vmResult{Events: full("0", "0", 0), KilledAfterFinal: true}, true, ""},
	}
	for _, c := range cases {
		rep := evaluate(tests, &c.res, time.Minute)
		if rep.ok() != c.passes {
			t.Errorf("%s: ok=%v, want %v (reasons %q)", c.name, rep.ok(), c.passes, rep.reasons)
			continue
		}
		if c.reason != "" && !strings.Contains(strings.Join(rep.reasons, "\n"), c.reason) {
			t.Errorf("%s: reasons %q lack %q", c.name, rep.reasons, c.reason)
		}
	}
}

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

// TestAddTestdata checks that a package's testdata/ lands in the binary's
// working directory in the archive, with symlinked files followed.
func TestAddTestdata(t *testing.T) {
	cpio := needTool(t, "cpio")
	pkg := t.TempDir()
	os.MkdirAll(filepath.Join(pkg, "testdata", "sub"), 0o755)
	os.WriteFile(filepath.Join(pkg, "testdata", "sub", "a.yaml"), []byte("a: 1\n"), 0o644)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	os.WriteFile(outside, []byte("linked"), 0o644)
	if err := os.Symlink(outside, filepath.Join(pkg, "testdata", "link.txt")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	if err := addTestdata(c, testBinary{Name: "p.test", PkgDir: pkg}); err != nil {
		t.Fatal(err)
	}
	c.close()
	archive := filepath.Join(t.TempDir(), "a.cpio")
	os.WriteFile(archive, buf.Bytes(), 0o644)
	out, err := exec.Command(cpio, "-it", "--quiet", "-F", archive).Output()
	if err != nil {
		t.Fatalf("cpio -it: %v", exitDetail(err))
	}
	want := "tests\ntests/p.test.d\ntests/p.test.d/testdata\ntests/p.test.d/testdata/link.txt\n" +
		"tests/p.test.d/testdata/sub\ntests/p.test.d/testdata/sub/a.yaml\n"
	if string(out) != want {
		t.Fatalf("archive holds\n%s\nwant\n%s", out, want)
	}
	content, err := exec.Command(cpio, "-i", "--quiet", "--to-stdout", "-F", archive, "tests/p.test.d/testdata/link.txt").Output()
	if err != nil || string(content) != "linked" {
		t.Fatalf("link.txt: %q %v", content, err)
	}
}

// TestRunQEMU drives runQEMU with a shell script in qemu's place, to check
// the kill paths without booting anything.
func TestRunQEMU(t *testing.T) {
	needTool(t, "sh")
	m := testMarker
	cases := []struct {
		name   string
		script string
		check  func(t *testing.T, r *vmResult)
	}{
		{"complete run", `
			printf 'SeaBIOS\r\n\033c\033[2J` + m + ` BOOT uptime=1.2\r\n'
			echo "` + m + ` START name=a.test"
			printf 'no newline at the end of test output'
			echo "` + m + ` RESULT name=a.test exit=0"
			echo "` + m + ` DONE total=1 failed=0 setup_failed=0"
			echo "[    3.1] WARNING: CPU: 1 PID: 77 at net/core/filter.c:1 xdp_do_redirect"`,
			func(t *testing.T, r *vmResult) {
				var kinds []string
				for _, e := range r.Events {
					kinds = append(kinds, e.Kind)
				}
				if strings.Join(kinds, " ") != "BOOT START RESULT DONE" {
					t.Errorf("events %v", kinds)
				}
				if r.BootHung != "" || r.TimedOut || r.KilledAfterFinal || r.WaitErr != nil {
					t.Errorf("unexpected state %+v", r)
				}
				if len(r.KernelSplats) != 1 {
					t.Errorf("splats %q", r.KernelSplats)
				}
			}},
		{"stall before boot", `
			echo "[   23.6] rcu: INFO: rcu_preempt self-detected stall on CPU"
			exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if !strings.Contains(r.BootHung, "self-detected stall") || r.TimedOut {
					t.Errorf("BootHung %q TimedOut %v", r.BootHung, r.TimedOut)
				}
			}},
		{"silent boot", `exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if !strings.Contains(r.BootHung, "no BOOT sentinel") {
					t.Errorf("BootHung %q", r.BootHung)
				}
			}},
		{"hang in a test", `
			echo "` + m + ` BOOT uptime=1.2"
			echo "[   40.0] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [a.test:80]"
			exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if r.BootHung != "" || !r.TimedOut {
					t.Errorf("BootHung %q TimedOut %v: a stall after boot must not count as a boot hang", r.BootHung, r.TimedOut)
				}
				if len(r.KernelSplats) != 1 {
					t.Errorf("splats %q", r.KernelSplats)
				}
			}},
		{"no poweroff", `
			echo "` + m + ` BOOT uptime=1.2"
			echo "` + m + ` DONE total=0 failed=0 setup_failed=0"
			exec sleep 30`,
			func(t *testing.T, r *vmResult) {
				if !r.KilledAfterFinal || r.TimedOut {
					t.Errorf("KilledAfterFinal %v TimedOut %v", r.KilledAfterFinal, r.TimedOut)
				}
			}},
	}
	defer func(old string) { qemuBinary = old }(qemuBinary)
	qemuBinary = "sh"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			start := time.Now()
			res, err := runQEMU(context.Background(), runSpec{
				Args:          []string{"-c", c.script},
				Out:           &out,
				Marker:        m,
				Timeout:       3 * time.Second,
				BootKind:      "BOOT",
				BootTimeout:   time.Second,
				FinalKind:     "DONE",
				PoweroffGrace: 200 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v: a kill did not end the run", d)
			}
			if strings.Contains(out.String(), "\033") || strings.Contains(out.String(), "\r") {
				t.Errorf("console copy not sanitised: %q", out.String())
			}
			c.check(t, res)
		})
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
