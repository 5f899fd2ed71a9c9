// SPDX-License-Identifier: Apache-2.0

// Command mkimage writes the xdplimit container image for `make image`:
// an OCI archive holding the image index of every platform, and a
// docker-archive per platform, from static binaries built beforehand
// (packaging/ociimage says what goes in).
//
//	go run ./packaging/mkimage --out DIR --version V --revision COMMIT --epoch SECONDS \
//	    --bin amd64=PATH --bin arm64=PATH --licence LICENSE=PATH ...
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/packaging/ociimage"
)

// pairs is a repeatable KEY=VALUE flag.
type pairs map[string]string

func (p pairs) String() string { return fmt.Sprint(map[string]string(p)) }

func (p pairs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("%q: want KEY=PATH", s)
	}
	if _, dup := p[k]; dup {
		return fmt.Errorf("%s given twice", k)
	}
	p[k] = v
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	out := fl.String("out", "", "directory to write the archives into")
	version := fl.String("version", "", "the image's tag and version label (git describe)")
	revision := fl.String("revision", "", "the commit the binaries were built from")
	epoch := fl.Int64("epoch", -1, "SOURCE_DATE_EPOCH: every timestamp in the image")
	bins, lics := pairs{}, pairs{}
	fl.Var(bins, "bin", "ARCH=PATH of the static binary for that architecture (repeat for each)")
	fl.Var(lics, "licence", "NAME=PATH of a licence text to ship in /usr/share/doc/xdplimit (repeatable)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *out == "" || *epoch < 0 {
		return errors.New("--out and --epoch are required")
	}
	cfg := ociimage.Config{Binaries: bins, Licences: lics, Version: *version, Revision: *revision,
		Created: time.Unix(*epoch, 0).UTC()}
	paths, err := Write(*out, cfg)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Println(p)
	}
	fmt.Printf("image %s (%s)\n", cfg.Ref(), strings.Join(ociimage.Platforms, ", "))
	return nil
}

// Write writes the archives of cfg's image into dir and returns their
// paths: xdplimit_VERSION_oci.tar (every platform), then
// xdplimit_VERSION_linux_ARCH.docker.tar for each platform.
func Write(dir string, cfg ociimage.Config) ([]string, error) {
	idx, err := ociimage.Index(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	oci := filepath.Join(dir, "xdplimit_"+cfg.Version+"_oci.tar")
	if err := ociimage.WriteOCIArchive(oci, idx, cfg.Ref(), cfg.Created); err != nil {
		return nil, err
	}
	paths := []string{oci}
	for _, arch := range ociimage.Platforms {
		img, err := ociimage.Image(cfg, arch)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, "xdplimit_"+cfg.Version+"_linux_"+arch+".docker.tar")
		if err := ociimage.WriteDockerArchive(p, img, cfg.Ref()); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
