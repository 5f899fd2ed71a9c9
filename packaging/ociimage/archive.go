// SPDX-License-Identifier: Apache-2.0

package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// refNameAnnotation names an image in an OCI layout's index.json: podman,
// skopeo and buildah read it as the image's name; containerd reads
// containerdNameAnnotation first.
const (
	refNameAnnotation        = "org.opencontainers.image.ref.name"
	containerdNameAnnotation = "io.containerd.image.name"
)

// WriteOCIArchive writes idx as an OCI image layout in a tar archive at
// path (podman load, skopeo copy oci-archive:PATH, ctr image import): its
// index.json lists one entry, the multi-platform index, named ref. The
// archive's entries are in name order and carry mtime as their time, so
// its bytes depend only on the image.
func WriteOCIArchive(path string, idx v1.ImageIndex, ref string, mtime time.Time) error {
	if _, err := name.NewTag(ref, name.StrictValidation); err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		refNameAnnotation:        ref,
		containerdNameAnnotation: ref,
	})); err != nil {
		return err
	}
	return tarDir(dir, path, mtime)
}

// WriteDockerArchive writes one platform's image as a docker-archive
// (`docker load`, and every tool that reads only that format), tagged ref.
func WriteDockerArchive(path string, img v1.Image, ref string) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	return writeAtomically(path, func(w io.Writer) error { return tarball.Write(tag, img, w) })
}

// tarDir archives the tree under dir into path: regular files and
// directories only, in name order, owned by root, every time mtime.
func tarDir(dir, path string, mtime time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s: neither a file nor a directory", p)
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	return writeAtomically(path, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		for _, p := range names {
			if err := addFile(tw, dir, p, mtime); err != nil {
				return err
			}
		}
		return tw.Close()
	})
}

func addFile(tw *tar.Writer, dir, p string, mtime time.Time) error {
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime.UTC(), Mode: 0o644, Typeflag: tar.TypeReg,
		Size: fi.Size(), Format: tar.FormatPAX}
	if fi.IsDir() {
		h.Name += "/"
		h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if fi.IsDir() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// writeAtomically writes path through a temporary file renamed over it, so
// an interrupted build leaves no truncated archive under the final name.
func writeAtomically(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
