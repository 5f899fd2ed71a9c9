// Command qemu runs statically linked Go test binaries inside a qemu VM booted
// from Debian's 6.1 LTS cloud kernel, so that the XDP code is tested against
// the oldest kernel the project supports rather than whatever the host runs.
//
//	go run ./test/vm/qemu [flags] -- a.test b.test:./pkg/dir ...
//
// Build the test binaries with CGO_ENABLED=0 (go test -c). Each one runs in the
// VM as "<bin> -test.v -test.timeout <test-timeout> <test-args>", as root,
// with CI=true in its environment, bpffs on /sys/fs/bpf and the veth module
// loaded. With ":<package dir>" after a binary, that package's testdata/ is
// copied in and the binary runs from its copy, as under go test; otherwise it
// runs in an empty directory. The VM's init reports every step as a sentinel line; the runner
// decides from those alone and exits 0 only if every binary reported exit
// status 0. Exit status 1 means a test failure or a broken run (timeout, no
// sentinel, kernel panic), 2 a usage or setup error on the host.
package main

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type options struct {
	cacheDir    string
	timeout     time.Duration
	bootTimeout time.Duration
	bootRetries int
	testTimeout time.Duration
	testArgs    string
	env         multiFlag
	files       multiFlag
	modules     multiFlag
	memoryMB    int
	smp         int
	appendArgs  string
	logPath     string
	kernelMeta  string
	binaries    []string
}

func main() {
	os.Exit(run())
}

func run() int {
	var o options
	fs := flag.NewFlagSet("qemu", flag.ContinueOnError)
	fs.StringVar(&o.cacheDir, "kernel-cache", ".cache/vm", "directory for the kernel, modules, KVM probe verdict and logs")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "hard limit for the whole VM run, boot included; qemu is killed after it")
	fs.DurationVar(&o.bootTimeout, "boot-timeout", 3*time.Minute, "a boot that has not reached init by then counts as hung")
	fs.IntVar(&o.bootRetries, "boot-retries", 2, "how often a hung boot (before any test started) is retried")
	fs.DurationVar(&o.testTimeout, "test-timeout", 10*time.Minute, "-test.timeout given to each test binary")
	fs.StringVar(&o.testArgs, "test-args", "", "extra arguments for every test binary, split at spaces (e.g. \"-test.run Smoke -test.count 1\")")
	fs.Var(&o.env, "env", "KEY=VALUE exported to the tests in the VM (repeatable)")
	fs.Var(&o.files, "file", "SRC[:DST] copies a host file into the VM, by default to /usr/local/bin/<name>, which is on PATH (repeatable)")
	fs.Var(&o.modules, "module", "extra kernel module to load, with its dependencies (repeatable; veth is always loaded)")
	fs.IntVar(&o.memoryMB, "memory", 2048, "VM memory in MiB (the test binaries live in it, in the initramfs)")
	fs.IntVar(&o.smp, "smp", 2, "VM CPUs")
	fs.StringVar(&o.appendArgs, "append", "", "extra kernel command line")
	fs.StringVar(&o.logPath, "log", "", "console log file (default <kernel-cache>/logs/run-<time>.log)")
	fs.StringVar(&o.kernelMeta, "kernel-meta", "linux-image-cloud-amd64", "Debian metapackage whose image package is booted")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./test/vm/qemu [flags] -- test-binary[:package-dir]...\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nenvironment: %s=kvm|tcg forces the accelerator (default: KVM if a probe boot works)\n", accelEnv)
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	o.binaries = fs.Args()
	if len(o.binaries) == 0 {
		fs.Usage()
		return 2
	}
	if o.timeout <= 0 || o.bootTimeout <= 0 || o.testTimeout <= 0 || o.bootRetries < 0 || o.memoryMB < 256 || o.smp < 1 {
		fmt.Fprintln(os.Stderr, "vm: timeouts must be positive, --boot-retries >= 0, --memory >= 256, --smp >= 1")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := runVM(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vm: %v\n", err)
	}
	return code
}

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

// runVM does one run and returns the process exit code. An error return is a
// host-side problem (exit 2); test failures are reported on out.
func runVM(ctx context.Context, o options) (code int, err error) {
	if _, err := accelFromEnv(); err != nil {
		return 2, err // before the download, not after it
	}
	tests, err := checkBinaries(o.binaries)
	if err != nil {
		return 2, err
	}
	if err := checkEnv(o.env); err != nil {
		return 2, err
	}
	files, err := checkFiles(o.files)
	if err != nil {
		return 2, err
	}
	cacheDir, err := filepath.Abs(o.cacheDir)
	if err != nil {
		return 2, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return 2, err
	}
	logFile, logPath, err := openLog(cacheDir, o.logPath)
	if err != nil {
		return 2, err
	}
	defer logFile.Close()
	defer func() {
		if err != nil { // the caller prints it; the log should have it too
			fmt.Fprintf(logFile, "vm: %v\n", err)
		}
	}()
	out := &lineWriter{w: io.MultiWriter(os.Stdout, logFile)}
	logf := func(format string, a ...any) { fmt.Fprintf(out, "vm: "+format+"\n", a...) }
	wallStart := time.Now()

	k, err := ensureKernel(cacheDir, o.kernelMeta, logf)
	if err != nil {
		return 2, err
	}
	logf("kernel %s %s (uname -r %s) from %s", k.Package, k.Version, k.Release, k.Dir)
	modules, err := k.modules(append([]string{"veth"}, o.modules...))
	k.close() // the unpacked package, if any; the modules are in the cache now
	if err != nil {
		return 2, err
	}
	busybox, applets, err := findBusybox()
	if err != nil {
		return 2, err
	}
	accel, why, err := chooseAccel(ctx, cacheDir, k, busybox, applets)
	if err != nil {
		return 2, err
	}
	logf("accelerator %s (%s)", accel, why)

	tmp, err := os.MkdirTemp("", "xdplimit-vm-")
	if err != nil {
		return 2, err
	}
	defer os.RemoveAll(tmp)
	marker := newMarker()
	initrd := filepath.Join(tmp, "initramfs.cpio.gz")
	t0 := time.Now()
	err = buildTestInitramfs(initrd, initramfsSpec{
		Busybox:     busybox,
		Applets:     applets,
		Release:     k.Release,
		Modules:     modules,
		Tests:       tests,
		TestArgs:    strings.Fields(o.testArgs),
		TestTimeout: o.testTimeout,
		Env:         o.env,
		Files:       files,
		Marker:      marker,
	})
	if err != nil {
		return 2, fmt.Errorf("initramfs: %w", err)
	}
	if st, err := os.Stat(initrd); err == nil {
		logf("initramfs %.1f MiB (%d test binaries, modules %s) built in %.1fs",
			float64(st.Size())/(1<<20), len(tests), moduleNames(modules), time.Since(t0).Seconds())
	}

	vm := vmConfig{Kernel: k.Vmlinuz, Initrd: initrd, Accel: accel, MemoryMB: o.memoryMB, SMP: o.smp, Append: o.appendArgs}
	// A boot that hangs before init runs is a flake of the emulator, not a
	// test result, and nothing has run yet: boot again, within the overall
	// deadline. Hangs after BOOT are never retried; they may be our bug.
	deadline := time.Now().Add(o.timeout)
	var (
		res   *vmResult
		boots int
	)
	for boots = 1; ; boots++ {
		args := qemuArgs(vm)
		logf("%s", commandLine("qemu-system-x86_64", args))
		res, err = runQEMU(ctx, runSpec{
			Args:        args,
			Out:         out,
			Marker:      marker,
			Timeout:     time.Until(deadline),
			BootKind:    "BOOT",
			BootTimeout: o.bootTimeout,
			FinalKind:   "DONE",
		})
		if err != nil {
			return 2, fmt.Errorf("qemu: %w", err)
		}
		if res.BootHung == "" || res.Interrupted || boots > o.bootRetries || time.Until(deadline) <= 0 {
			break
		}
		logf("boot %d hung (%s); booting again", boots, res.BootHung)
		if vm.Accel == "kvm" && os.Getenv(accelEnv) == "" {
			// The probe passed, but KVM is what hangs on nested hosts.
			vm.Accel = "tcg"
			logf("switching to TCG for the next boot")
		}
	}

	rep := evaluate(tests, res, o.timeout)
	logf("---- summary (%s %s, accel %s) ----", k.Package, k.Version, vm.Accel)
	if boot, ok := res.find("BOOT"); ok {
		logf("boot: init started %.1fs after qemu start (guest uptime %ss)", boot.At.Seconds(), boot.Fields["uptime"])
	}
	for _, l := range rep.lines {
		logf("%s", l)
	}
	for _, s := range res.KernelSplats {
		logf("warning: kernel: %s", s)
	}
	for _, w := range rep.warnings {
		logf("warning: %s", w)
	}
	for _, r := range rep.reasons {
		logf("FAIL: %s", r)
	}
	verdict := "PASS"
	if !rep.ok() {
		verdict = "FAIL"
	}
	logf("result %s: qemu ran %.1fs, %d boot(s), whole run %.1fs; log %s", verdict, res.Elapsed.Seconds(), boots, time.Since(wallStart).Seconds(), logPath)
	if res.Interrupted {
		return 130, nil
	}
	if !rep.ok() {
		return 1, nil
	}
	return 0, nil
}

// checkBinaries validates the test binaries ("bin" or "bin:pkgdir") and
// derives their VM names.
func checkBinaries(args []string) ([]testBinary, error) {
	var tests []testBinary
	seen := map[string]string{}
	for _, arg := range args {
		p, pkgDir, _ := strings.Cut(arg, ":")
		if pkgDir != "" {
			st, err := os.Stat(pkgDir)
			if err != nil {
				return nil, err
			}
			if !st.IsDir() {
				return nil, fmt.Errorf("%s: %s is not a package directory", arg, pkgDir)
			}
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(abs)
		if !validName.MatchString(name) {
			return nil, fmt.Errorf("%s: test binary names may only contain letters, digits and ._+-", p)
		}
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s and %s have the same name in the VM: give them distinct go test -o names", other, p)
		}
		seen[name] = p
		if err := checkStaticBinary(abs); err != nil {
			return nil, err
		}
		tests = append(tests, testBinary{Name: name, Path: abs, PkgDir: pkgDir})
	}
	return tests, nil
}

// checkFiles parses --file arguments. Executables among them must be static
// for the same reason as the test binaries.
func checkFiles(args []string) ([]extraFile, error) {
	var files []extraFile
	for _, arg := range args {
		src, dst, _ := strings.Cut(arg, ":")
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", arg, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("--file %s: not a regular file", arg)
		}
		if dst == "" {
			dst = "/usr/local/bin/" + filepath.Base(src)
		}
		if !filepath.IsAbs(dst) || filepath.Clean(dst) != dst || strings.HasPrefix(dst, "/tests/") {
			return nil, fmt.Errorf("--file %s: the VM path must be absolute, clean and outside /tests", arg)
		}
		if st.Mode().Perm()&0o111 != 0 && isELF(src) { // scripts run under busybox sh
			if err := checkStaticBinary(src); err != nil {
				return nil, err
			}
		}
		files = append(files, extraFile{Src: src, Dst: dst})
	}
	return files, nil
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	_, err = io.ReadFull(f, magic)
	return err == nil && string(magic) == elf.ELFMAG
}

func checkEnv(env []string) error {
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\n'\"$") {
			return fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
	}
	return nil
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

// newMarker returns a sentinel prefix unique to one boot, so that neither an
// earlier run's output nor a test printing sentinel-like text can be mistaken
// for the init script's report.
func newMarker() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return "@@xdplimit-vm:" + hex.EncodeToString(b) + "@@"
}

// report is the verdict on one run.
type report struct {
	lines    []string // per-test results
	reasons  []string // why the run failed; empty means it passed
	warnings []string
}

func (r *report) ok() bool { return len(r.reasons) == 0 }

// evaluate judges a run from its sentinel lines only. Every test binary must
// have reported START and RESULT with exit 0, the init script must have
// reported DONE with a matching count and no failed setup step, and the run
// must have ended by itself.
func evaluate(tests []testBinary, res *vmResult, timeout time.Duration) *report {
	rep := &report{}
	fail := func(format string, a ...any) { rep.reasons = append(rep.reasons, fmt.Sprintf(format, a...)) }
	if res.Interrupted {
		fail("interrupted")
	}
	if res.TimedOut {
		fail("timed out after %v; qemu killed", timeout)
	}
	if res.PanicLine != "" {
		fail("kernel: %s", res.PanicLine)
	}
	if res.BootHung != "" {
		fail("VM boot hung: %s", res.BootHung)
	}
	if _, ok := res.find("BOOT"); !ok {
		fail("no BOOT sentinel: init did not start or died during setup")
	}
	for _, e := range res.Events {
		if e.Kind == "SETUP-FAIL" {
			fail("VM setup step failed: %s", e.Rest)
		}
	}

	known := map[string]bool{}
	for _, t := range tests {
		known[t.Name] = true
	}
	starts := map[string]event{}
	results := map[string]event{}
	for _, e := range res.Events {
		name := e.Fields["name"]
		switch e.Kind {
		case "START", "RESULT":
			if !known[name] {
				fail("sentinel %s for unknown test %q", e.Kind, name)
				continue
			}
			target := starts
			if e.Kind == "RESULT" {
				target = results
			}
			if _, dup := target[name]; dup {
				fail("%s reported %s twice", name, e.Kind)
			}
			target[name] = e
		}
	}
	failed := 0
	for _, t := range tests {
		start, started := starts[t.Name]
		result, done := results[t.Name]
		switch {
		case !started:
			rep.lines = append(rep.lines, fmt.Sprintf("NOT RUN %s", t.Name))
			fail("%s: never started", t.Name)
			failed++
		case !done:
			rep.lines = append(rep.lines, fmt.Sprintf("NO RESULT %s (started, no exit status)", t.Name))
			fail("%s: started but reported no exit status", t.Name)
			failed++
		case result.Fields["exit"] != "0":
			rep.lines = append(rep.lines, fmt.Sprintf("FAIL %s (exit %s, %.1fs)", t.Name, result.Fields["exit"], (result.At-start.At).Seconds()))
			fail("%s: exit status %s", t.Name, result.Fields["exit"])
			failed++
		default:
			rep.lines = append(rep.lines, fmt.Sprintf("PASS %s (%.1fs)", t.Name, (result.At-start.At).Seconds()))
		}
	}

	if done, ok := res.find("DONE"); !ok {
		fail("no DONE sentinel: the VM stopped before init finished")
	} else {
		if done.Fields["total"] != fmt.Sprint(len(tests)) {
			fail("DONE reports %s tests, %d were given", done.Fields["total"], len(tests))
		}
		// The init script counts failures itself; a mismatch means sentinel
		// lines were lost or garbled on the console, so nothing is trusted.
		if done.Fields["failed"] != fmt.Sprint(failed) {
			fail("DONE reports %s failed tests, the RESULT sentinels %d", done.Fields["failed"], failed)
		}
		if done.Fields["setup_failed"] != "0" {
			fail("DONE reports setup_failed=%s", done.Fields["setup_failed"])
		}
	}
	if res.KilledAfterFinal {
		rep.warnings = append(rep.warnings, "the VM did not power off after DONE and was killed")
	}
	if res.WaitErr != nil && !res.TimedOut && !res.KilledAfterFinal && !res.Interrupted && res.BootHung == "" {
		fail("qemu failed: %v", res.WaitErr)
	}
	return rep
}
