// SPDX-License-Identifier: Apache-2.0

package packaging_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// mdLink is a Markdown link's target: [text](target) or [text](target#anchor).
var mdLink = regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)

// checkDocLinks: every relative link of the Markdown the package installs
// leads to a file or directory the package installs too; an operator
// reading /usr/share/doc/xdplimit offline follows them where the repository
// is not.
func checkDocLinks(t *testing.T, deb string) {
	t.Helper()
	tree := t.TempDir()
	run(t, "/", nil, time.Minute, "dpkg-deb", "-x", deb, tree)
	doc := filepath.Join(tree, "usr/share/doc/xdplimit")
	n := 0
	err := filepath.WalkDir(doc, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if target == "" || strings.Contains(target, ":") || strings.HasPrefix(target, "/") {
				continue // an anchor in the page, a URL, an absolute path
			}
			n++
			resolved := filepath.Join(filepath.Dir(path), target)
			rel, _ := filepath.Rel(doc, path)
			if !strings.HasPrefix(resolved, doc+"/") && resolved != doc {
				t.Errorf("%s links to %s, outside the package's documentation", rel, target)
			} else if _, err := os.Stat(resolved); err != nil {
				t.Errorf("%s links to %s, which the package does not install", rel, target)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("no relative link found in the installed documentation: the check read nothing")
	}
}
