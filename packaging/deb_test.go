// SPDX-License-Identifier: Apache-2.0

package packaging_test

import (
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// TestDebianPackage takes the release make dist built (TestReleaseArchitectures
// checks every architecture's files), installs this machine's package,
// runs what it installed, and purges it, also when a check fails.
//
// A real install rather than dpkg --root into a scratch tree: that is what
// operators do, it runs the maintainer scripts as dpkg runs them, and
// systemd-analyze then checks the unit where systemd would load it, against
// the installed binary. Before the purge, the installed binary attaches on
// a veth of the test's own as an enabled unit instance would, and stops:
// the purge must detach it. The machine is left as it was: the purge
// removes every file, the test its veth, namespaces and enable link.
func TestDebianPackage(t *testing.T) {
	testutil.Require(t, os.Geteuid() == 0, "installing a package needs root")
	requireTools(t, map[string]string{
		"dpkg-deb": "dpkg", "dpkg-query": "dpkg", "systemd-analyze": "systemd", "bash": "bash",
	})
	i := slices.IndexFunc(releaseArches, func(a releaseArch) bool { return a.goarch == runtime.GOARCH })
	testutil.Require(t, i >= 0, "make dist builds no package for this machine's architecture (%s)", runtime.GOARCH)
	r := builtRelease(t)
	describe, debVersion, deb := r.describe, r.debVersion, r.deb(releaseArches[i])
	if got := firstLine(run(t, r.dir, nil, time.Minute, r.bin(releaseArches[i]), "--version")); got != "xdplimit "+describe {
		t.Errorf("%s --version: %q, want %q", filepath.Base(r.bin(releaseArches[i])), got, "xdplimit "+describe)
	}
	checkDocLinks(t, deb)

	installed := func() bool {
		out, err := runErr("/", nil, time.Minute, "dpkg-query", "-W", "-f=${Status}", "xdplimit")
		return err == nil && strings.Contains(out, " installed")
	}
	testutil.Require(t, !installed() || testutil.IsCI(),
		"an xdplimit package is installed on this machine: this test would replace and purge it")
	t.Cleanup(func() {
		if installed() {
			if out, err := runErr("/", nil, 2*time.Minute, "dpkg", "--purge", "xdplimit"); err != nil {
				t.Errorf("cleanup: dpkg --purge xdplimit: %v\n%s", err, out)
			}
		}
	})
	run(t, "/", nil, 2*time.Minute, "dpkg", "-i", deb)
	checkInstalled(t, describe, debVersion)

	// Removal detaches what the unit's instances left attached: nothing
	// would be left to detach it.
	ns, iface := attachAsUnit(t)
	run(t, "/", nil, 2*time.Minute, "dpkg", "--purge", "xdplimit")
	for _, p := range []string{"/usr/sbin/xdplimit", "/lib/systemd/system/xdplimit@.service", "/etc/xdplimit",
		"/usr/share/doc/xdplimit", filepath.Join(loader.PinRoot, iface)} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after dpkg --purge", p)
		}
	}
	if ns.XDPProgID(t, iface) != 0 {
		t.Errorf("%s still has an XDP program after dpkg --purge", iface)
	}
}

// checkStatic: no program interpreter and no shared libraries (it runs on
// any Linux of its architecture), and no symbols or debug information if
// stripped.
func checkStatic(t *testing.T, bin string, stripped bool) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (%v segment)", bin, p.Type)
		}
	}
	if stripped && (f.Section(".symtab") != nil || f.Section(".debug_info") != nil) {
		t.Errorf("%s is not stripped", bin)
	}
}

// expectedDebVersion is packaging/deb-version.sh for this commit, dated as
// the Makefile dates it (SOURCE_DATE_EPOCH, by default the commit's time).
func expectedDebVersion(t *testing.T, root, describe string) string {
	t.Helper()
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		epoch = strings.TrimSpace(run(t, root, cleanEnv(), time.Minute, "git", "log", "-1", "--format=%ct"))
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		t.Fatalf("epoch %q: %v", epoch, err)
	}
	day := time.Unix(sec, 0).UTC().Format("20060102")
	return strings.TrimSpace(run(t, root, nil, time.Minute, "packaging/deb-version.sh", describe, day))
}

// maintainerField is a Maintainer field as Debian Policy 5.6.2 has it, a
// name and an address; placeholder says it was left unfilled.
var (
	maintainerField = regexp.MustCompile(`^[^<>@,]*[^<>@,\s] <[^<>@\s]+@[^<>@\s]+\.[a-z]{2,}>$`)
	placeholder     = regexp.MustCompile(`(?i)\$[{(]|example\.(com|org|net)|localhost|todo|fixme|changeme|unknown`)
)

// checkControl: the control fields of a package of architecture arch.
// Depends stays empty: the binary is static and the maintainer scripts call
// systemctl and deb-systemd-invoke only where systemd runs.
func checkControl(t *testing.T, deb, version, arch string) {
	t.Helper()
	t.Logf("dpkg-deb --info:\n%s", run(t, "/", nil, time.Minute, "dpkg-deb", "--info", deb))
	fields := run(t, "/", nil, time.Minute, "dpkg-deb", "--field", deb, "Package", "Version", "Architecture", "Depends")
	want := "Package: xdplimit\nVersion: " + version + "\nArchitecture: " + arch + "\n"
	if fields != want {
		t.Errorf("control fields:\n%s\nwant\n%s(and no Depends)", fields, want)
	}
	m := strings.TrimSpace(run(t, "/", nil, time.Minute, "dpkg-deb", "--field", deb, "Maintainer"))
	if !maintainerField.MatchString(m) || placeholder.MatchString(m) {
		t.Errorf("Maintainer: %q, want a name and a real address", m)
	}
	if conf := run(t, "/", nil, time.Minute, "dpkg-deb", "--info", deb, "conffiles"); strings.TrimSpace(conf) != "/etc/xdplimit/example.yaml" {
		t.Errorf("conffiles: %q, want /etc/xdplimit/example.yaml", conf)
	}
}

// checkContents: every file an operator needs, with its mode, owned by root,
// and nothing outside the places the package may write. It returns the
// package's paths, sorted.
func checkContents(t *testing.T, deb string) []string {
	t.Helper()
	listing := run(t, "/", nil, time.Minute, "dpkg-deb", "--contents", deb)
	t.Logf("dpkg-deb --contents:\n%s", listing)
	modes := map[string]string{}
	var paths []string
	for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("unexpected dpkg-deb --contents line %q", line)
		}
		path := strings.TrimSuffix(strings.TrimPrefix(f[5], "./"), "/")
		modes[path] = f[0]
		paths = append(paths, path)
		if f[1] != "root/root" {
			t.Errorf("%s is owned by %s", path, f[1])
		}
		if !allowedPath(path) {
			t.Errorf("%s: outside the package's places", path)
		}
	}
	for path, mode := range map[string]string{
		"usr/sbin/xdplimit":                                   "-rwxr-xr-x",
		"lib/systemd/system/xdplimit@.service":                "-rw-r--r--",
		"etc/xdplimit/example.yaml":                           "-rw-r--r--",
		"usr/share/man/man8/xdplimit.8.gz":                    "-rw-r--r--",
		"usr/share/man/man8/xdplimit-attach.8.gz":             "-rw-r--r--",
		"usr/share/man/man8/xdplimit-completion-bash.8.gz":    "-rw-r--r--",
		"usr/share/bash-completion/completions/xdplimit":      "-rw-r--r--",
		"usr/share/zsh/vendor-completions/_xdplimit":          "-rw-r--r--",
		"usr/share/fish/vendor_completions.d/xdplimit.fish":   "-rw-r--r--",
		"usr/share/doc/xdplimit/copyright":                    "-rw-r--r--",
		"usr/share/doc/xdplimit/changelog.gz":                 "-rw-r--r--",
		"usr/share/doc/xdplimit/README.md":                    "-rw-r--r--",
		"usr/share/doc/xdplimit/docs/operations.md":           "-rw-r--r--",
		"usr/share/doc/xdplimit/docs/policy.md":               "-rw-r--r--",
		"usr/share/doc/xdplimit/examples/syn-flood.yaml":      "-rw-r--r--",
		"usr/share/lintian/overrides/xdplimit":                "-rw-r--r--",
		"usr/share/doc/xdplimit/deploy/grafana/xdplimit.json": "-rw-r--r--",
	} {
		if got, ok := modes[path]; !ok {
			t.Errorf("the package lacks %s", path)
		} else if got != mode {
			t.Errorf("%s: mode %s, want %s", path, got, mode)
		}
	}
	slices.Sort(paths)
	return paths
}

func allowedPath(path string) bool {
	for _, p := range []string{"etc/xdplimit", "lib/systemd/system", "usr/sbin", "usr/share/man/man8",
		"usr/share/doc/xdplimit", "usr/share/bash-completion/completions", "usr/share/zsh/vendor-completions",
		"usr/share/fish/vendor_completions.d", "usr/share/lintian/overrides"} {
		if path == p || strings.HasPrefix(path, p+"/") || strings.HasPrefix(p, path+"/") {
			return true
		}
	}
	return path == "."
}

// runLintian fails on lintian's errors and warnings, and logs its notes,
// info (I:) and pedantic (P:) tags. The one override,
// packaging/lintian-overrides, is the static binary's, which that tag itself
// asks a deliberate exception to override; a warning is fixed, not
// overridden.
func runLintian(t *testing.T, deb string) {
	t.Helper()
	// --fail-on: a non-zero exit for a warning too; overridden tags do not
	// count.
	out, err := runErr("/", nil, 10*time.Minute, "lintian", "--allow-root", "--info", "--pedantic",
		"--fail-on", "error,warning", deb)
	var bad, notes []string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "E: "), strings.HasPrefix(line, "W: "):
			bad = append(bad, line)
		case strings.HasPrefix(line, "I: "), strings.HasPrefix(line, "P: "):
			notes = append(notes, line)
		}
	}
	t.Logf("lintian: %d notes:\n%s", len(notes), strings.Join(notes, "\n"))
	if err != nil || len(bad) > 0 {
		t.Errorf("lintian: %v: %d errors and warnings:\n%s\n%s", err, len(bad), strings.Join(bad, "\n"), out)
	}
}

// checkInstalled runs what the package installed.
func checkInstalled(t *testing.T, describe, debVersion string) {
	t.Helper()
	status := run(t, "/", nil, time.Minute, "dpkg-query", "-W", "-f=${Status}|${Version}|${Conffiles}", "xdplimit")
	if !strings.HasPrefix(status, "install ok installed|"+debVersion+"|") || !strings.Contains(status, "/etc/xdplimit/example.yaml ") {
		t.Errorf("dpkg-query: %q", status)
	}
	flag := run(t, "/", nil, time.Minute, "/usr/sbin/xdplimit", "--version")
	if got := firstLine(flag); got != "xdplimit "+describe {
		t.Errorf("/usr/sbin/xdplimit --version: %q, want %q (git describe)", got, "xdplimit "+describe)
	}
	if cmd := run(t, "/", nil, time.Minute, "/usr/sbin/xdplimit", "version"); cmd != flag {
		t.Errorf("xdplimit version printed\n%s\nxdplimit --version\n%s", cmd, flag)
	}
	t.Logf("installed: %s", flag)
	run(t, "/", nil, time.Minute, "/usr/sbin/xdplimit", "policy", "check", "/etc/xdplimit/example.yaml")
	run(t, "/", nil, time.Minute, "bash", "-c", ". /usr/share/bash-completion/completions/xdplimit && complete -p xdplimit")

	// verify instantiates the template (as xdplimit@i); any output at
	// notice level or above is a finding.
	out := run(t, "/", append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice"), time.Minute,
		"systemd-analyze", "verify", "/lib/systemd/system/xdplimit@.service")
	if strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
}
