// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// testBinary is one test executable to run inside the VM.
type testBinary struct {
	Name string // base name, used in /tests/ and in the sentinel lines
	Path string // on the host
	// PkgDir, if set, is the package's source directory on the host. Its
	// testdata/ goes into the VM and the binary runs from there, as under go
	// test, which runs test binaries in the package directory.
	PkgDir string
	// Run, if set, is the binary's own -test.run (--run); one in
	// --test-args takes precedence (a focused run).
	Run string
	// Alone (--alone): no other binary runs beside it, in lanes or not.
	Alone bool
}

// workDir is where the binary runs in the VM, relative to /: a package
// named relative to the repository runs at the same place under /src, so
// that a test reading the repository beside its package (../docs,
// ../../examples) finds what --tree copied there; any other runs in
// tests/<name>.d.
func (t testBinary) workDir() string {
	if rel, ok := repoRelative(t.PkgDir); ok {
		return path.Join(vmSrc, rel)
	}
	return "tests/" + t.Name + ".d"
}

// vmSrc is the repository's place in the VM.
const vmSrc = "src"

// repoRelative returns p as a clean slash path when it is relative and
// stays inside the directory the runner was started in.
func repoRelative(p string) (string, bool) {
	if p == "" || filepath.IsAbs(p) {
		return "", false
	}
	rel := filepath.ToSlash(filepath.Clean(p))
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// initramfsSpec is everything that goes into the test initramfs.
type initramfsSpec struct {
	Busybox     string   // host path of a static busybox
	Applets     []string // busybox --list-full: paths to link to it
	Release     string   // kernel release, for /lib/modules/<release>
	Modules     []string // host paths, in insmod order
	Tests       []testBinary
	TestArgs    []string // appended to every test binary's arguments
	TestTimeout time.Duration
	Env         []string // KEY=VALUE, exported to the tests
	Files       []extraFile
	Trees       []string // repository directories copied to /src/<dir>
	Marker      string   // sentinel prefix, unique per run
	Lanes       int      // test binaries run at once (runSection); 0 means 1
}

// extraFile is a host file the tests need in the VM, such as the xdplimit
// binary that the end-to-end suite runs.
type extraFile struct {
	Src string // on the host
	Dst string // absolute path in the VM
}

// validName keeps test names safe to embed unquoted in the init script and to
// parse back out of sentinel lines.
var validName = regexp.MustCompile(`^[A-Za-z0-9._+-]+$`)

// checkStaticBinary rejects what cannot run in the initramfs: there is no
// dynamic loader or libc in it, so a cgo-linked test binary would die with a
// confusing "not found" from the shell.
func checkStaticBinary(p string) error {
	dynamic, err := checkExecutable(p)
	if err == nil && dynamic {
		err = fmt.Errorf("%s: dynamically linked, the VM has no libc: build it with CGO_ENABLED=0", p)
	}
	return err
}

// checkExecutable accepts an executable of the guest's architecture and
// says whether it is dynamically linked (names a program interpreter).
func checkExecutable(p string) (dynamic bool, err error) {
	f, err := elf.Open(p)
	if err != nil {
		return false, fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	if f.Machine != guest.Machine {
		return false, fmt.Errorf("%s: built for %v, the VM is %s (%v)", p, f.Machine, guest.Name, guest.Machine)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return false, fmt.Errorf("%s: not an executable (%v)", p, f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// findBusybox returns a static busybox of the guest's architecture (path,
// or the host's on PATH when empty) and the paths of its applets. One of
// another architecture lists them under qemu's user-mode emulator.
func findBusybox(path string) (string, []string, error) {
	bb := path
	if bb == "" {
		var err error
		if bb, err = exec.LookPath("busybox"); err != nil {
			return "", nil, fmt.Errorf("busybox not found (Debian package busybox-static): %w", err)
		}
	}
	if err := checkStaticBinary(bb); err != nil {
		return "", nil, fmt.Errorf("%w (install busybox-static, not busybox)", err)
	}
	argv := []string{bb, "--list-full"}
	if !guest.native() {
		argv = append([]string{guest.UserEmulator}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w (Debian package qemu-user-static for another architecture's)",
			strings.Join(argv, " "), err)
	}
	return bb, strings.Fields(string(out)), nil
}

// writeBase adds what every initramfs here needs: busybox with a link per
// applet, created in the archive because "busybox --install" needs /proc,
// and /dev/console, which the kernel opens for init's stdio before init runs.
func writeBase(c *cpioWriter, busybox string, applets []string) error {
	for _, d := range []string{"dev", "proc", "sys", "tmp", "root", "run", "etc", "var"} {
		if err := c.mkdirAll(d); err != nil {
			return err
		}
	}
	// As on the host, /var/run is /run: tests bind-mount named network
	// namespaces under /var/run/netns.
	if err := c.symlink("var/run", "/run"); err != nil {
		return err
	}
	if err := c.charDev("dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := c.charDev("dev/null", 0o666, 1, 3); err != nil {
		return err
	}
	if err := c.hostFile("bin/busybox", 0o755, busybox); err != nil {
		return err
	}
	seen := map[string]bool{"bin/busybox": true}
	for _, a := range applets {
		a = strings.Trim(path.Clean(a), "/")
		if seen[a] || a == "." {
			continue
		}
		seen[a] = true
		if err := c.symlink(a, "/bin/busybox"); err != nil {
			return err
		}
	}
	// Go's net and os/user packages read these; tests that resolve
	// "localhost" or look up uid 0 should not fail for want of them.
	etc := map[string]string{
		"etc/hosts":  "127.0.0.1 localhost\n::1 localhost\n",
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "root:x:0:\n",
	}
	for _, name := range []string{"etc/hosts", "etc/passwd", "etc/group"} {
		if err := c.bytesFile(name, 0o644, []byte(etc[name])); err != nil {
			return err
		}
	}
	return nil
}

// writeGzipCPIO creates file dst holding a gzip-compressed newc archive whose
// entries fill writes.
func writeGzipCPIO(dst string, fill func(*cpioWriter) error) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	// BestSpeed: the archive is rebuilt on every run and is mostly Go test
	// binaries; higher levels save little and cost seconds per run (measured
	// in the report), and the emulated kernel decompresses both alike.
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(zw, 1<<20)
	c := newCPIOWriter(bw)
	if err := fill(c); err != nil {
		return err
	}
	if err := c.close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// buildTestInitramfs writes the initramfs that runs the tests.
func buildTestInitramfs(dst string, s initramfsSpec) error {
	return writeGzipCPIO(dst, func(c *cpioWriter) error {
		if err := writeBase(c, s.Busybox, s.Applets); err != nil {
			return err
		}
		for _, m := range s.Modules {
			if err := c.hostFile(path.Join("lib/modules", s.Release, filepath.Base(m)), 0o644, m); err != nil {
				return err
			}
		}
		trees := map[string]bool{}
		for _, t := range s.Tests {
			if err := c.hostFile("tests/"+t.Name, 0o755, t.Path); err != nil {
				return err
			}
			if err := c.mkdirAll(t.workDir()); err != nil {
				return err
			}
			if t.PkgDir != "" && !trees[t.workDir()] {
				trees[t.workDir()] = true
				if err := addTree(c, filepath.Join(t.PkgDir, "testdata"), path.Join(t.workDir(), "testdata")); err != nil {
					return err
				}
			}
		}
		for _, d := range s.Trees {
			rel, _ := repoRelative(d) // checkTrees accepted it
			if err := addTree(c, d, path.Join(vmSrc, rel)); err != nil {
				return err
			}
		}
		for _, f := range s.Files {
			st, err := os.Stat(f.Src)
			if err != nil {
				return err
			}
			if err := c.hostFile(f.Dst, uint32(st.Mode().Perm()), f.Src); err != nil {
				return err
			}
		}
		return c.bytesFile("init", 0o755, []byte(initScript(s)))
	})
}

// addTree copies the host directory root, if it exists, to dst in the
// archive. Symbolic links are followed: the link targets may lie outside
// the tree and would dangle in the VM.
func addTree(c *cpioWriter, root, dst string) error {
	if _, err := os.Stat(root); os.IsNotExist(err) {
		return nil
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		to := path.Join(dst, filepath.ToSlash(rel))
		st, err := os.Stat(p) // follows symlinks
		if err != nil {
			return err
		}
		switch {
		case st.IsDir():
			if d.Type()&fs.ModeSymlink != 0 {
				return fmt.Errorf("%s: symlinked directories are not supported", p)
			}
			return c.mkdirAll(to)
		case st.Mode().IsRegular():
			return c.hostFile(to, uint32(st.Mode().Perm()), p)
		default:
			return fmt.Errorf("%s: only files and directories can go into the VM", p)
		}
	})
}

// buildProbeInitramfs writes the initramfs of the KVM probe: an init that only
// prints the marker and powers off, so a boot that reaches userspace at all
// is told apart from one that hangs.
func buildProbeInitramfs(dst, busybox string, applets []string, marker string) error {
	return writeGzipCPIO(dst, func(c *cpioWriter) error {
		if err := writeBase(c, busybox, applets); err != nil {
			return err
		}
		script := "#!/bin/sh\necho " + shQuote(marker+" PROBE-OK") + "\npoweroff -f\n"
		return c.bytesFile("init", 0o755, []byte(script))
	})
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// vmPATH is the tests' PATH in the VM.
const vmPATH = "/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin"

// initScript is PID 1 of the test VM. Every state the runner acts on is
// reported as a sentinel line (marker + keyword); the runner trusts nothing
// else, so a VM that dies half way is a failure, never a silent pass.
func initScript(s initramfsSpec) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("#!/bin/sh")
	w("# PID 1 of the xdplimit test VM, generated by test/vm/qemu for one run.")
	w("export PATH=%s HOME=/root TMPDIR=/tmp", vmPATH)
	w("M=%s", shQuote(s.Marker))
	w("setup_failed=0")
	w("# A failed setup step fails the whole run even when the tests then pass:")
	w("# they would have run in a different environment than the one asked for.")
	w(`must() { "$@" || { echo "$M SETUP-FAIL $*"; setup_failed=1; }; }`)
	w("must mount -t proc proc /proc")
	w("must mount -t sysfs sysfs /sys")
	w("must mount -t devtmpfs devtmpfs /dev")
	w("mkdir -p /dev/pts /dev/shm")
	w("must mount -t devpts devpts /dev/pts")
	w("must mount -t tmpfs -o mode=1777 tmpfs /dev/shm")
	w("must mount -t tmpfs -o mode=1777 tmpfs /tmp")
	w("must mount -t tmpfs -o mode=755 tmpfs /run")
	w("must mount -t bpf -o mode=700 bpf /sys/fs/bpf")
	w("must mount -t tracefs tracefs /sys/kernel/tracing")
	w("must mount -t debugfs debugfs /sys/kernel/debug")
	w("must mount -t cgroup2 cgroup2 /sys/fs/cgroup")
	w("must ip link set lo up")
	for _, m := range s.Modules {
		w("must insmod %s", shQuote(path.Join("/lib/modules", s.Release, filepath.Base(m))))
	}
	w(`echo "$M BOOT uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r)"`)
	// CI=true makes the project's tests fail instead of skipping when a
	// prerequisite (bpffs, veth, root) is missing: in the VM it never should be.
	// XDPLIMIT_VM tells tests that time runs unevenly under emulation (the
	// end-to-end suite widens its tolerances); XDPLIMIT_VM_KERNEL lets them
	// check they run on the kernel that was booted.
	env := append([]string{"CI=true", "XDPLIMIT_VM=1", "XDPLIMIT_VM_KERNEL=" + s.Release}, s.Env...)
	for _, kv := range env {
		w("export %s", shQuote(kv))
	}
	b.WriteString(runSection(s))
	w(`echo "$M DONE total=%d failed=$failed setup_failed=$setup_failed"`, len(s.Tests))
	w("sync")
	// If poweroff fails, init exits and the kernel panics; panic=-1 and qemu's
	// -no-reboot turn that into a qemu exit as well.
	w("poweroff -f")
	return b.String()
}
