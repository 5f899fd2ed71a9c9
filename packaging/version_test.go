// SPDX-License-Identifier: Apache-2.0

package packaging_test

import (
	"testing"
	"time"
)

// TestDebVersion: git describe outputs map to valid Debian versions that
// sort as the builds do: release candidates before their release, snapshots
// after the tag they follow, untagged snapshots before any release, a dirty
// tree before its clean commit.
func TestDebVersion(t *testing.T) {
	requireTools(t, map[string]string{"dpkg": "dpkg"})
	root := repoRoot(t)
	const day = "20261126"
	ordered := []struct{ describe, want string }{
		{"0123abc-dirty", "0.0.0~git20261126.0123abc~dirty"},
		{"0123abc", "0.0.0~git20261126.0123abc"},
		{"v1.2.0-rc1", "1.2.0~rc1"},
		{"v1.2.0-rc1-3-g0123abc", "1.2.0~rc1+git20261126.3.0123abc"},
		{"v1.2.0", "1.2.0"},
		{"v1.2.0-3-g0123abc-dirty", "1.2.0+git20261126.3.0123abc~dirty"},
		{"v1.2.0-3-g0123abc", "1.2.0+git20261126.3.0123abc"},
		{"v1.2.0-12-g4567def", "1.2.0+git20261126.12.4567def"},
		{"v1.10.0", "1.10.0"},
	}
	for i, c := range ordered {
		got := run(t, root, nil, time.Minute, "packaging/deb-version.sh", c.describe, day)
		if got != c.want+"\n" {
			t.Errorf("%s: %q, want %q", c.describe, got, c.want)
		}
		run(t, root, nil, time.Minute, "dpkg", "--validate-version", c.want)
		if i > 0 {
			prev := ordered[i-1].want
			if _, err := runErr(root, nil, time.Minute, "dpkg", "--compare-versions", prev, "lt", c.want); err != nil {
				t.Errorf("%s does not sort before %s", prev, c.want)
			}
		}
	}
	for _, bad := range [][]string{{"v1.2", day}, {"release-1", day}, {"v1.2.0", "2026-11-26"}, {"v1.2.0"}} {
		if out, err := runErr(root, nil, time.Minute, "packaging/deb-version.sh", bad...); err == nil {
			t.Errorf("deb-version.sh %q: %q, want a refusal", bad, out)
		}
	}
}
