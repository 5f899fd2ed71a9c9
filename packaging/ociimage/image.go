// SPDX-License-Identifier: Apache-2.0

// Package ociimage builds the xdplimit container image: one layer holding
// the static binary and its licence texts (no shell, no distribution, no
// user database), for each platform, under one OCI image index. It runs no
// container daemon and reads no clock: every timestamp is the Created time
// it is given (SOURCE_DATE_EPOCH, the commit's time), so one commit built
// twice gives byte-identical images and archives. `make image` runs it
// through packaging/mkimage; the container test (test/container) builds the
// image it runs with it too.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// Repository is the image's name without its tag; the tag is the
	// version (git describe). deploy/kubernetes names the same.
	Repository = "ghcr.io/xdplimit/xdplimit"
	// Entrypoint is where the binary lives in the image, run with the
	// container's arguments (`attach eth0 --policy ...`, `version`).
	Entrypoint = "/usr/local/bin/xdplimit"
	// Source is the project's repository (org.opencontainers.image.source).
	Source = "https://github.com/xdplimit/xdplimit"
	// Licenses is the image's SPDX expression: the Go code is Apache-2.0,
	// and the BPF program embedded in the binary is GPL-2.0-only or
	// BSD-2-Clause (README, "Licence").
	Licenses = "Apache-2.0 AND (GPL-2.0-only OR BSD-2-Clause)"
	// docDir holds the licence texts in the image.
	docDir = "/usr/share/doc/xdplimit"
)

// Platforms are the architectures an image is built for, in index order.
var Platforms = []string{"amd64", "arm64"}

// Config is what one build puts in the image.
type Config struct {
	// Binaries maps an architecture (amd64, arm64) to the path of the
	// static xdplimit binary built for it; every one of Platforms is
	// needed.
	Binaries map[string]string
	// Licences maps a file name to the path of a licence text, copied into
	// /usr/share/doc/xdplimit/ in the image.
	Licences map[string]string
	// Version is the image's tag and org.opencontainers.image.version;
	// Revision the full commit hash.
	Version, Revision string
	// Created is every timestamp in the image: SOURCE_DATE_EPOCH.
	Created time.Time
}

// Ref is the image's full name: Repository:Version.
func (c Config) Ref() string { return Repository + ":" + c.Version }

// Labels are the OCI annotations the image carries, in its configuration
// (podman inspect) and on its manifests and index (skopeo inspect).
func (c Config) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "xdplimit",
		"org.opencontainers.image.description": "Per-source flood limiter at the NIC driver level (XDP)",
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.revision":    c.Revision,
		"org.opencontainers.image.version":     c.Version,
		"org.opencontainers.image.licenses":    Licenses,
		"org.opencontainers.image.created":     c.Created.UTC().Format(time.RFC3339),
	}
}

func (c Config) check() error {
	var missing []string
	for _, arch := range Platforms {
		if c.Binaries[arch] == "" {
			missing = append(missing, arch)
		}
	}
	switch {
	case len(missing) > 0:
		return fmt.Errorf("no xdplimit binary for %s", strings.Join(missing, ", "))
	case len(c.Binaries) != len(Platforms):
		return fmt.Errorf("binaries for %d architectures, want exactly %v", len(c.Binaries), Platforms)
	case c.Version == "" || strings.ContainsAny(c.Version, ":/@ "):
		return fmt.Errorf("version %q: not an image tag", c.Version)
	case c.Revision == "":
		return errors.New("no revision (the commit)")
	case c.Created.IsZero():
		return errors.New("no creation time (SOURCE_DATE_EPOCH)")
	}
	return nil
}

// Index builds the image for every one of Platforms and the index that
// lists them.
func Index(c Config) (v1.ImageIndex, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range Platforms {
		img, err := Image(c, arch)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				Platform:    &v1.Platform{OS: "linux", Architecture: arch},
				Annotations: c.Labels(),
			},
		})
	}
	return mutate.Annotations(idx, c.Labels()).(v1.ImageIndex), nil
}

// Image builds the image for one architecture.
func Image(c Config, arch string) (v1.Image, error) {
	files, err := c.files(arch)
	if err != nil {
		return nil, err
	}
	data, err := layerTar(files, c.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: c.Created.UTC()}
	cfg := &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      created,
		Config: v1.Config{
			Entrypoint: []string{Entrypoint},
			// No Cmd: without arguments xdplimit prints its help and
			// exits; an attach is always spelled out by the deployment.
			Env:    []string{"PATH=/usr/local/bin"},
			Labels: c.Labels(),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(mutate.MediaType(empty.Image, types.OCIManifestSchema1), cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "packaging/mkimage: " + Entrypoint + " and its licence texts",
		},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, c.Labels()).(v1.Image), nil
}

// file is one regular file of the layer.
type file struct {
	name string // in the image, absolute
	mode int64
	data []byte
}

// files reads what the layer holds for arch: the binary, then the licence
// texts in name order.
func (c Config) files(arch string) ([]file, error) {
	bin, ok := c.Binaries[arch]
	if !ok {
		return nil, fmt.Errorf("no xdplimit binary for %s", arch)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("the %s binary: %w", arch, err)
	}
	files := []file{{name: Entrypoint, mode: 0o755, data: data}}
	names := make([]string, 0, len(c.Licences))
	for n := range c.Licences {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.Contains(n, "/") || n == "" || n == "." || n == ".." {
			return nil, fmt.Errorf("licence file name %q: a plain file name", n)
		}
		data, err := os.ReadFile(c.Licences[n])
		if err != nil {
			return nil, fmt.Errorf("licence %s: %w", n, err)
		}
		files = append(files, file{name: path.Join(docDir, n), mode: 0o644, data: data})
	}
	return files, nil
}

// layerTar writes the files and their parent directories as a tar stream,
// directories first, owned by root, every time the given one: the layer's
// bytes depend on nothing but the files' contents.
func layerTar(files []file, mtime time.Time) ([]byte, error) {
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.name); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(name string, typ byte, mode, size int64) *tar.Header {
		return &tar.Header{Typeflag: typ, Name: strings.TrimPrefix(name, "/"), Mode: mode, Size: size,
			ModTime: mtime.UTC(), Format: tar.FormatPAX}
	}
	for _, d := range dirList {
		if err := tw.WriteHeader(hdr(d+"/", tar.TypeDir, 0o755, 0)); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(hdr(f.name, tar.TypeReg, f.mode, int64(len(f.data)))); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
