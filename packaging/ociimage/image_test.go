// SPDX-License-Identifier: Apache-2.0

package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// testConfig is a build of small stand-in binaries, one per platform, each
// with its architecture in its contents.
func testConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	c := Config{Binaries: map[string]string{}, Licences: map[string]string{},
		Version: "v1.2.3-4-gabcdef0", Revision: strings.Repeat("ab", 20), Created: time.Unix(1796000000, 0)}
	for _, arch := range Platforms {
		p := filepath.Join(dir, "xdplimit-"+arch)
		if err := os.WriteFile(p, []byte("binary for "+arch), 0o700); err != nil {
			t.Fatal(err)
		}
		c.Binaries[arch] = p
	}
	for _, n := range []string{"LICENSE", "LICENSE.GPL-2.0"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte(n+" text"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Licences[n] = p
	}
	return c
}

func TestIndexPlatformsAndConfig(t *testing.T) {
	c := testConfig(t)
	idx, err := Index(c)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(Platforms) {
		t.Fatalf("%d manifests in the index, want %d", len(im.Manifests), len(Platforms))
	}
	for i, d := range im.Manifests {
		arch := Platforms[i]
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch {
			t.Errorf("manifest %d: platform %+v, want linux/%s", i, d.Platform, arch)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch || cf.OS != "linux" {
			t.Errorf("%s image: config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != Entrypoint || len(cf.Config.Cmd) != 0 {
			t.Errorf("%s image: entrypoint %q cmd %q", arch, cf.Config.Entrypoint, cf.Config.Cmd)
		}
		if !cf.Created.Equal(c.Created) || len(cf.History) != 1 || !cf.History[0].Created.Equal(c.Created) {
			t.Errorf("%s image: created %v, history %+v; want %v", arch, cf.Created, cf.History, c.Created)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.licenses": "Apache-2.0 AND (GPL-2.0-only OR BSD-2-Clause)",
			"org.opencontainers.image.revision": c.Revision,
			"org.opencontainers.image.version":  c.Version,
			"org.opencontainers.image.source":   "https://github.com/xdplimit/xdplimit",
		} {
			if got := cf.Config.Labels[k]; got != want {
				t.Errorf("%s image: label %s = %q, want %q", arch, k, got, want)
			}
		}
		checkLayer(t, c, arch, img)
	}
}

// checkLayer reads the image's one layer: the binary of its architecture,
// executable, the licences, root-owned, every time the build's.
func checkLayer(t *testing.T, c Config, arch string, img v1.Image) {
	t.Helper()
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("%s image: %d layers (%v), want 1", arch, len(ls), err)
	}
	rc, err := ls[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(c.Created) {
			t.Errorf("%s: owner %d:%d, time %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = string(data)
		if h.Name == strings.TrimPrefix(Entrypoint, "/") && h.Mode != 0o755 {
			t.Errorf("the binary's mode is %o, want 755", h.Mode)
		}
	}
	want := map[string]string{
		"usr/": "", "usr/local/": "", "usr/local/bin/": "", "usr/share/": "", "usr/share/doc/": "",
		"usr/share/doc/xdplimit/":                "",
		"usr/local/bin/xdplimit":                 "binary for " + arch,
		"usr/share/doc/xdplimit/LICENSE":         "LICENSE text",
		"usr/share/doc/xdplimit/LICENSE.GPL-2.0": "LICENSE.GPL-2.0 text",
	}
	if len(got) != len(want) {
		t.Errorf("%s layer holds %q, want %q", arch, keys(got), keys(want))
	}
	for n, w := range want {
		if g, ok := got[n]; !ok || g != w {
			t.Errorf("%s layer: %s = %q (present %v), want %q", arch, n, g, ok, w)
		}
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// The same inputs give the same archive, byte for byte, whatever the input
// files' times and the directory written to; another version does not.
func TestArchiveReproducible(t *testing.T) {
	c := testConfig(t)
	write := func(c Config) []byte {
		idx, err := Index(c)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "image.tar")
		if err := WriteOCIArchive(p, idx, c.Ref(), c.Created); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	first := write(c)
	later := time.Now().Add(time.Hour)
	for _, p := range c.Binaries {
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(first, write(c)) {
		t.Error("two builds of the same inputs differ")
	}
	c2 := c
	c2.Version = "v1.2.4"
	if bytes.Equal(first, write(c2)) {
		t.Error("another version gave the same archive")
	}
}

// The archive is an OCI layout whose index.json names the image index
// once, with the image's name, as podman load and ctr import read it.
func TestArchiveNamesTheIndex(t *testing.T) {
	c := testConfig(t)
	idx, err := Index(c)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "image.tar")
	if err := WriteOCIArchive(p, idx, c.Ref(), c.Created); err != nil {
		t.Fatal(err)
	}
	unpacked := filepath.Join(dir, "layout")
	untar(t, p, unpacked)
	root, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	im, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != want {
		t.Fatalf("index.json lists %+v, want the one image index %s", im.Manifests, want)
	}
	for _, k := range []string{refNameAnnotation, containerdNameAnnotation} {
		if got := im.Manifests[0].Annotations[k]; got != "ghcr.io/xdplimit/xdplimit:v1.2.3-4-gabcdef0" {
			t.Errorf("annotation %s = %q", k, got)
		}
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, _ := io.ReadAll(tr)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	for name, edit := range map[string]func(*Config){
		"no arm64 binary": func(c *Config) { delete(c.Binaries, "arm64") },
		"an extra arch":   func(c *Config) { c.Binaries["riscv64"] = c.Binaries["amd64"] },
		"no version":      func(c *Config) { c.Version = "" },
		"bad tag":         func(c *Config) { c.Version = "a:b" },
		"no revision":     func(c *Config) { c.Revision = "" },
		"no time":         func(c *Config) { c.Created = time.Time{} },
		"licence path":    func(c *Config) { c.Licences["../x"] = c.Binaries["amd64"] },
		"missing binary":  func(c *Config) { c.Binaries["amd64"] = "/nonexistent/xdplimit" },
	} {
		c := testConfig(t)
		edit(&c)
		if _, err := Index(c); err == nil {
			t.Errorf("%s: built", name)
		}
	}
}
