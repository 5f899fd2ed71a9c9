// SPDX-License-Identifier: Apache-2.0

// Command qemu runs statically linked Go test binaries inside a qemu VM booted
// from a Debian cloud kernel (by default the 6.1 LTS one; --kernel picks
// another, such as 6.12), so that the XDP code is tested against the kernels
// the project supports rather than whatever the host runs.
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
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// This file holds the flags and runVM, the order of one run's steps. The
// steps live beside it: operand checks in args.go (a binary's own test
// filter in run.go), the kernel and its modules
// in kernel.go, download.go and modules.go, the accelerator in accel.go, the
// tools (the host's in tools.go, a tree of the guest's in toolroot.go), the
// initramfs in initramfs.go and cpio.go, qemu and its console in qemu.go, the
// verdict in report.go and the log in log.go.

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
	tools       multiFlag
	runs        multiFlag
	alone       multiFlag
	toolRoot    string
	trees       multiFlag
	modules     multiFlag
	memoryMB    int
	smp         int
	lanes       int
	appendArgs  string
	logPath     string
	kernelMeta  string
	arch        string
	busybox     string
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
	fs.Var(&o.runs, "run", "NAME=REGEX runs only the tests REGEX matches (-test.run) in the test binary of base name NAME (repeatable, one per binary; a -test.run in --test-args wins)")
	fs.Var(&o.env, "env", "KEY=VALUE exported to the tests in the VM (repeatable)")
	fs.Var(&o.files, "file", "SRC[:DST] copies a host file into the VM, by default to /usr/local/bin/<name>, which is on PATH (repeatable)")
	fs.Var(&o.tools, "tool", "NAME or PATH of a host executable the tests start, copied into the VM at its host path with the shared libraries ldd resolves for it (repeatable)")
	fs.StringVar(&o.toolRoot, "tool-root", "", "DIR, a file tree of the guest's packages (unpacked, for a guest of another architecture): --tool NAMEs are then its executables, copied into the VM at their paths in DIR with the libraries the guest's loader would map, resolved in DIR")
	fs.Var(&o.trees, "tree", "DIR of the repository (relative) copied to /src/DIR, where packages named relative to the repository run (repeatable)")
	fs.Var(&o.modules, "module", "extra kernel module to load, with its dependencies (repeatable; veth is always loaded)")
	fs.IntVar(&o.memoryMB, "memory", 2048, "VM memory in MiB (the test binaries live in it, in the initramfs)")
	fs.IntVar(&o.smp, "smp", 2, "VM CPUs")
	fs.Var(&o.alone, "alone", "NAME: the test binary of base name NAME runs with no other beside it, before the lanes start (repeatable)")
	fs.IntVar(&o.lanes, "lanes", 1, "test binaries run at once, taken in the order given (1: one by one, output live)")
	fs.StringVar(&o.appendArgs, "append", "", "extra kernel command line")
	fs.StringVar(&o.logPath, "log", "", "console log file (default <kernel-cache>/logs/run-<time>.log)")
	fs.StringVar(&o.kernelMeta, "kernel", "linux-image-cloud-amd64",
		"Debian package to boot: a metapackage (its current image package is booted, e.g. linux-image-6.12-cloud-amd64) or an image package")
	fs.StringVar(&o.kernelMeta, "kernel-meta", "linux-image-cloud-amd64", "the same as --kernel")
	fs.StringVar(&o.arch, "arch", "amd64", "the guest's architecture (Go's name): amd64 or arm64, under emulation on another host")
	fs.StringVar(&o.busybox, "busybox", "", "static busybox of the guest's architecture for the initramfs (default: busybox on PATH)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./test/vm/qemu [flags] -- test-binary[:package-dir]...\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nenvironment: %s=kvm|tcg forces the accelerator (default: KVM if a probe boot works)\n", accelEnv)
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	o.binaries = fs.Args()
	if err := setGuest(o.arch); err != nil {
		fmt.Fprintln(os.Stderr, "vm:", err)
		return 2
	}
	if len(o.binaries) == 0 {
		fs.Usage()
		return 2
	}
	if o.timeout <= 0 || o.bootTimeout <= 0 || o.testTimeout <= 0 || o.bootRetries < 0 || o.memoryMB < 256 || o.smp < 1 || o.lanes < 1 {
		fmt.Fprintln(os.Stderr, "vm: timeouts must be positive, --boot-retries >= 0, --memory >= 256, --smp and --lanes >= 1")
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

// runVM does one run and returns the process exit code. An error return is a
// host-side problem (exit 2); test failures are reported on out.
func runVM(ctx context.Context, o options) (code int, err error) {
	tests, files, err := checkOperands(o)
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

	k, modules, err := kernelAndModules(cacheDir, o, logf)
	if err != nil {
		return 2, err
	}
	busybox, applets, err := findBusybox(o.busybox)
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
	err = buildInitrd(initrd, initramfsSpec{
		Busybox:     busybox,
		Applets:     applets,
		Release:     k.Release,
		Modules:     modules,
		Tests:       tests,
		TestArgs:    strings.Fields(o.testArgs),
		TestTimeout: o.testTimeout,
		Env:         o.env,
		Files:       files,
		Trees:       o.trees,
		Marker:      marker,
		Lanes:       o.lanes,
	}, logf)
	if err != nil {
		return 2, err
	}

	vm := vmConfig{Kernel: k.Vmlinuz, Initrd: initrd, Accel: accel, MemoryMB: o.memoryMB, SMP: o.smp, Append: o.appendArgs}
	res, boots, err := boot(ctx, &vm, o, out, marker, logf)
	if err != nil {
		return 2, err
	}
	rep := evaluate(tests, res, o.timeout)
	logf("---- summary (%s %s, accel %s) ----", k.Package, k.Version, vm.Accel)
	rep.log(logf, res)
	logf("result %s: qemu ran %.1fs, %d boot(s), whole run %.1fs; log %s", rep.verdict(), res.Elapsed.Seconds(), boots, time.Since(wallStart).Seconds(), logPath)
	return rep.exitCode(res), nil
}

// kernelAndModules makes sure the kernel is in the cache, with the
// modules to load (veth and those asked for) and their dependencies.
func kernelAndModules(cacheDir string, o options, logf func(string, ...any)) (*kernel, []string, error) {
	k, err := ensureKernel(cacheDir, o.kernelMeta, logf)
	if err != nil {
		return nil, nil, err
	}
	logf("kernel %s %s (uname -r %s) from %s", k.Package, k.Version, k.Release, k.Dir)
	modules, err := k.modules(append([]string{"veth"}, o.modules...))
	k.close() // the unpacked package, if any; the modules are in the cache now
	if err != nil {
		return nil, nil, err
	}
	return k, modules, nil
}

// buildInitrd writes the initramfs of spec to path and logs its size.
func buildInitrd(path string, spec initramfsSpec, logf func(string, ...any)) error {
	t0 := time.Now()
	if err := buildTestInitramfs(path, spec); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if st, err := os.Stat(path); err == nil {
		logf("initramfs %.1f MiB (%d test binaries, modules %s) built in %.1fs",
			float64(st.Size())/(1<<20), len(spec.Tests), moduleNames(spec.Modules), time.Since(t0).Seconds())
	}
	return nil
}

// checkOperands checks what the run is asked to copy into the VM and
// run there, before anything is downloaded, and returns the test binaries
// and the files (the tools first).
func checkOperands(o options) ([]testBinary, []extraFile, error) {
	if _, err := accelFromEnv(); err != nil {
		return nil, nil, err // before the download, not after it
	}
	tests, err := checkBinaries(o.binaries)
	if err != nil {
		return nil, nil, err
	}
	if err := applyRuns(tests, o.runs); err != nil {
		return nil, nil, err
	}
	if err := applyAlone(tests, o.alone); err != nil {
		return nil, nil, err
	}
	if err := checkEnv(o.env); err != nil {
		return nil, nil, err
	}
	files, err := checkFiles(o.files)
	if err != nil {
		return nil, nil, err
	}
	var tools []extraFile
	if o.toolRoot != "" {
		tools, err = checkRootTools(o.toolRoot, o.tools)
	} else {
		tools, err = checkTools(o.tools)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := checkTrees(o.trees); err != nil {
		return nil, nil, err
	}
	return tests, append(tools, files...), nil
}

// boot runs the VM until its last sentinel, and returns what it reported
// and how many boots that took. A boot that hangs before init runs is a
// flake of the emulator, not a test result, and nothing has run yet: boot
// again, within the overall deadline. Hangs after BOOT are never retried;
// they may be our bug.
func boot(ctx context.Context, vm *vmConfig, o options, out io.Writer, marker string, logf func(string, ...any)) (res *vmResult, boots int, err error) {
	deadline := time.Now().Add(o.timeout)
	for boots = 1; ; boots++ {
		args := qemuArgs(*vm)
		logf("%s", commandLine(qemuBinary, args))
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
			return nil, boots, fmt.Errorf("qemu: %w", err)
		}
		if res.BootHung == "" || res.Interrupted || boots > o.bootRetries || time.Until(deadline) <= 0 {
			return res, boots, nil
		}
		logf("boot %d hung (%s); booting again", boots, res.BootHung)
		if vm.Accel == "kvm" && os.Getenv(accelEnv) == "" {
			// The probe passed, but KVM is what hangs on nested hosts.
			vm.Accel = "tcg"
			logf("switching to TCG for the next boot")
		}
	}
}
