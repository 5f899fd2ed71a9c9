// SPDX-License-Identifier: Apache-2.0

package container

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/packaging/ociimage"
)

// repoRoot is the checkout this package is in.
const repoRoot = "../.."

// image is one build of the image for this test process, with the code
// `make image` runs (packaging/ociimage), from binaries built here with a
// version of their own, so that what runs is provably this build.
var image struct {
	once    sync.Once
	dir     string
	archive string
	cfg     ociimage.Config
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if image.dir != "" {
		os.RemoveAll(image.dir)
	}
	os.Exit(code)
}

// buildImage builds the image once per test process and returns its OCI
// archive and what went into it.
func buildImage(t *testing.T) (string, ociimage.Config) {
	t.Helper()
	image.once.Do(func() { image.err = build() })
	if image.err != nil {
		t.Fatalf("building the image: %v", image.err)
	}
	return image.archive, image.cfg
}

func build() error {
	dir, err := os.MkdirTemp("", "xdpltest-image-")
	if err != nil {
		return err
	}
	image.dir = dir
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cfg := ociimage.Config{
		Binaries: map[string]string{},
		Licences: map[string]string{
			"LICENSE":              filepath.Join(repoRoot, "LICENSE"),
			"LICENSE.GPL-2.0":      filepath.Join(repoRoot, "bpf", "LICENSE.GPL-2.0"),
			"LICENSE.BSD-2-Clause": filepath.Join(repoRoot, "bpf", "LICENSE.BSD-2-Clause"),
		},
		Version:  "containertest-" + hex.EncodeToString(b),
		Revision: strings.Repeat("0", 40),
		Created:  time.Unix(1796000000, 0).UTC(),
	}
	const bi = "github.com/xdplimit/xdplimit/internal/buildinfo"
	for _, arch := range ociimage.Platforms {
		out := filepath.Join(dir, "xdplimit_"+arch)
		cmd := exec.Command("go", "build", "-trimpath", "-o", out,
			"-ldflags", fmt.Sprintf("-s -w -X %s.version=%s -X %s.commit=%s", bi, cfg.Version, bi, cfg.Revision),
			"./cmd/xdplimit")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build for %s: %v\n%s", arch, err, msg)
		}
		cfg.Binaries[arch] = out
	}
	idx, err := ociimage.Index(cfg)
	if err != nil {
		return err
	}
	image.archive = filepath.Join(dir, "xdplimit_oci.tar")
	image.cfg = cfg
	return ociimage.WriteOCIArchive(image.archive, idx, cfg.Ref(), cfg.Created)
}

// load builds the image and loads it into p, checking the name it gets.
func load(t *testing.T, p *podman) ociimage.Config {
	t.Helper()
	archive, cfg := buildImage(t)
	out := p.must(t, 2*time.Minute, "load", "--input", archive)
	if !strings.Contains(out, "Loaded image: "+cfg.Ref()) {
		t.Fatalf("podman load does not name the image %s:\n%s", cfg.Ref(), out)
	}
	return cfg
}

// The image runs as built: `version` through its entrypoint prints this
// build's version; podman took the host's platform from the index, and
// the arm64 image's configuration, read from the same archive by skopeo,
// says arm64.
func TestImageRuns(t *testing.T) {
	p := newPodman(t)
	requireTools(t, "skopeo")
	cfg := load(t, p)
	out := p.must(t, time.Minute, append(append([]string{"run", "--rm", "--network", "none"}, ulimits(t)...),
		cfg.Ref(), "version")...)
	if !strings.HasPrefix(out, "xdplimit "+cfg.Version) || !strings.Contains(out, "map layout") {
		t.Errorf("podman run IMAGE version:\n%s\nwant xdplimit %s and the map layout", out, cfg.Version)
	}
	arch := strings.TrimSpace(p.must(t, time.Minute, "image", "inspect", "--format", "{{.Architecture}}", cfg.Ref()))
	if arch != runtime.GOARCH {
		t.Errorf("podman loaded the %s image on %s", arch, runtime.GOARCH)
	}
	labels := p.must(t, time.Minute, "image", "inspect", "--format", "{{json .Labels}}", cfg.Ref())
	if !strings.Contains(labels, `"org.opencontainers.image.version":"`+cfg.Version+`"`) {
		t.Errorf("labels %s: no version %s", labels, cfg.Version)
	}
	archive, _ := buildImage(t)
	for _, want := range ociimage.Platforms {
		cmd := exec.Command("skopeo", "--override-arch", want, "inspect", "--config", "oci-archive:"+archive)
		cmd.Env = append(os.Environ(), "TMPDIR="+p.dir)
		data, err := cmd.Output()
		if err != nil {
			t.Fatalf("skopeo inspect --config (%s): %v", want, err)
		}
		var config struct {
			Architecture string `json:"architecture"`
			OS           string `json:"os"`
			Config       struct {
				Entrypoint []string `json:"Entrypoint"`
			} `json:"config"`
		}
		if err := json.Unmarshal(data, &config); err != nil {
			t.Fatal(err)
		}
		if config.Architecture != want || config.OS != "linux" || strings.Join(config.Config.Entrypoint, " ") != ociimage.Entrypoint {
			t.Errorf("the %s image's configuration: %+v", want, config)
		}
	}
}
