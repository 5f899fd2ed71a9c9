// SPDX-License-Identifier: Apache-2.0

// Package buildinfo says which build of xdplimit is running: what `xdplimit
// version` and `xdplimit --version` print.
//
// make dist stamps the version (git describe), the commit and the date in with
// -ldflags -X. A plain `go build` or `go install ...@VERSION` stamps nothing;
// the module version and the VCS details the Go toolchain recorded stand in.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/xdplimit/xdplimit/maps"
)

// Set with -ldflags "-X github.com/xdplimit/xdplimit/internal/buildinfo.version=..."
// (and .commit, .date); see the Makefile's dist target.
var (
	version string // git describe --tags --always --dirty
	commit  string // full commit hash
	date    string // RFC 3339, UTC: the commit's time (SOURCE_DATE_EPOCH)
)

// Info describes one build.
type Info struct {
	Version string // "v1.2.0", "v1.2.0-3-g0123abc", "0123abc-dirty", a module version, or "dev"
	Commit  string // full hash, "-dirty" appended for uncommitted changes; "" if unknown
	Date    string // RFC 3339; "" if unknown
	Go      string // the Go release that built it
	// MapLayout is the layout version of the pinned BPF maps this build
	// reads: two builds with the same one can adopt each other's state.
	MapLayout uint32
}

// Read returns this binary's build information.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, date, bi)
}

// resolve prefers the stamped values and fills what is missing from the
// toolchain's record (bi may be nil).
func resolve(version, commit, date string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, Date: date, Go: runtime.Version(), MapLayout: maps.LayoutVersion}
	if bi == nil {
		bi = &debug.BuildInfo{}
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if info.Version == "" {
		// go install ...@v1.2.0 records v1.2.0 (or a pseudo-version for a
		// commit); a build inside the checkout records "(devel)".
		info.Version = bi.Main.Version
		if info.Version == "" || info.Version == "(devel)" {
			info.Version = "dev"
		}
	}
	if info.Commit == "" && settings["vcs.revision"] != "" {
		info.Commit = settings["vcs.revision"]
		if settings["vcs.modified"] == "true" {
			info.Commit += "-dirty"
		}
	}
	if info.Date == "" {
		info.Date = settings["vcs.time"]
	}
	return info
}

// String is the text of `xdplimit version`: the first line is "xdplimit"
// and the version alone, for scripts; the details follow.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "xdplimit %s\n", i.Version)
	fmt.Fprintf(&b, "  commit:     %s\n", orUnknown(i.Commit))
	fmt.Fprintf(&b, "  built:      %s\n", orUnknown(i.Date))
	fmt.Fprintf(&b, "  go:         %s\n", i.Go)
	fmt.Fprintf(&b, "  map layout: %d\n", i.MapLayout)
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
