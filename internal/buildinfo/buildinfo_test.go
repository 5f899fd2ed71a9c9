// SPDX-License-Identifier: Apache-2.0

package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

func TestResolve(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	cases := []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  Info
	}{
		{name: "stamped by make dist wins over the toolchain's record",
			version: "v1.2.0-3-g0123abc", commit: "0123abc0123abc", date: "2026-11-26T09:00:00Z",
			bi:   &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("vcs.revision", "ffff", "vcs.time", "2000-01-01T00:00:00Z")},
			want: Info{Version: "v1.2.0-3-g0123abc", Commit: "0123abc0123abc", Date: "2026-11-26T09:00:00Z"}},
		{name: "go install at a tag: the module version, no VCS",
			bi:   &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}},
			want: Info{Version: "v1.2.0"}},
		{name: "go build in a modified checkout",
			bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
				Settings: vcs("vcs.revision", "0123abc", "vcs.time", "2026-11-26T09:00:00Z", "vcs.modified", "true")},
			want: Info{Version: "dev", Commit: "0123abc-dirty", Date: "2026-11-26T09:00:00Z"}},
		{name: "go build without VCS stamping",
			bi:   &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			want: Info{Version: "dev"}},
		{name: "no build info at all", want: Info{Version: "dev"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.want.Go, c.want.MapLayout = runtime.Version(), maps.LayoutVersion
			if got := resolve(c.version, c.commit, c.date, c.bi); got != c.want {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	got := Info{Version: "v1.2.0", Commit: "0123abc", Go: "go1.26.8", MapLayout: 7}.String()
	want := "xdplimit v1.2.0\n" +
		"  commit:     0123abc\n" +
		"  built:      unknown\n" +
		"  go:         go1.26.8\n" +
		"  map layout: 7\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
