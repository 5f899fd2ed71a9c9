// SPDX-License-Identifier: Apache-2.0

// Finding the kernel: its image package from the meta package's control
// file, and its modules by name, compressed or not.

package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestParseKernelDepends(t *testing.T) {
	control := "Package: linux-image-cloud-amd64\nVersion: 6.1.192-2\n" +
		"Depends: linux-image-6.1.0-56-cloud-amd64 (= 6.1.192-2)\nDescription: x\n"
	pkg, version, ok := parseKernelDepends("linux-image-cloud-amd64", control)
	if !ok || pkg != "linux-image-6.1.0-56-cloud-amd64" || version != "6.1.192-2" {
		t.Fatalf("got %q %q %v", pkg, version, ok)
	}
	pkg, version, ok = parseKernelDepends("linux-image-cloud-amd64", "Depends: kmod, linux-image-6.1.0-57-cloud-amd64 | linux-image-6.1.0-56-cloud-amd64\n")
	if !ok || pkg != "linux-image-6.1.0-57-cloud-amd64" || version != "" {
		t.Fatalf("unpinned: got %q %q %v", pkg, version, ok)
	}
	if _, _, ok := parseKernelDepends("linux-image-cloud-amd64", "Depends: kmod, linux-base\n"); ok {
		t.Fatal("found a kernel in a record without one")
	}
	if v := controlField(control, "Version"); v != "6.1.192-2" {
		t.Fatalf("Version %q", v)
	}
}

func TestImagePackage(t *testing.T) {
	for name, want := range map[string]bool{
		"linux-image-6.1.0-56-cloud-amd64":                true,
		"linux-image-6.12.107+deb12-cloud-amd64-unsigned": true,
		"linux-image-6.12.117+deb12-cloud-amd64":          true,
		"linux-image-cloud-amd64":                         false,
		"linux-image-6.12-cloud-amd64":                    false,
		"linux-image-amd64":                               false,
		"linux-headers-6.1.0-56-cloud-amd64":              false,
	} {
		if got := imagePackage.MatchString(name); got != want {
			t.Errorf("%s: image package %v, want %v", name, got, want)
		}
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"/x/kernel/drivers/net/veth.ko":     "veth",
		"nf-tables.ko.xz":                   "nf_tables",
		"kernel/net/sched/sch_netem.ko.zst": "sch_netem",
		"veth":                              "veth",
	} {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
}

// elfBytes is content that passes decompressModule's ELF check.
var elfBytes = append([]byte("\x7fELF"), bytes.Repeat([]byte("module body "), 100)...)

func TestDecompressModule(t *testing.T) {
	dir := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(elfBytes)
	zw.Close()
	srcs := map[string][]byte{
		"plain.ko":   elfBytes,
		"gzip.ko.gz": gz.Bytes(),
	}
	for _, tool := range []struct{ bin, ext string }{{"xz", ".ko.xz"}, {"zstd", ".ko.zst"}} {
		if _, err := exec.LookPath(tool.bin); err != nil {
			t.Logf("%s not installed, not testing %s", tool.bin, tool.ext)
			continue
		}
		cmd := exec.Command(tool.bin, "-c")
		cmd.Stdin = bytes.NewReader(elfBytes)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", tool.bin, err)
		}
		srcs[tool.bin+tool.ext] = out
	}
	for name, data := range srcs {
		src := filepath.Join(dir, name)
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, "out", name+".out")
		if err := decompressModule(src, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, _ := os.ReadFile(dst)
		if !bytes.Equal(got, elfBytes) {
			t.Errorf("%s: content differs after decompression", name)
		}
	}
	bad := filepath.Join(dir, "bad.ko")
	os.WriteFile(bad, []byte("not elf"), 0o644)
	if err := decompressModule(bad, filepath.Join(dir, "bad.out")); err == nil {
		t.Error("accepted a module that is not ELF")
	}
}
