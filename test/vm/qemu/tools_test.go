// SPDX-License-Identifier: Apache-2.0

package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseLDD(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007ffd4b5f2000)
	libssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f0e1c000000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e1be00000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f0e1c3c0000)
`
	got, err := parseLDD(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseLDD = %q, want %q", got, want)
	}
	if _, err := parseLDD("\tlibgone.so.1 => not found\n"); err == nil || !strings.Contains(err.Error(), "libgone.so.1") {
		t.Fatalf("a missing library: err = %v, want one naming it", err)
	}
	if got, err := parseLDD("\tstatically linked\n"); err != nil || len(got) != 0 {
		t.Fatalf("a static binary: %q, %v", got, err)
	}
}

// The host's own sh is dynamically linked on every distribution the
// project builds on: it goes in with its loader and C library.
func TestCheckTools(t *testing.T) {
	files, err := checkTools([]string{"sh"})
	if err != nil {
		t.Fatal(err)
	}
	var loader, libc bool
	for _, f := range files {
		if f.Src != f.Dst {
			t.Errorf("%s goes to %s, want its host path", f.Src, f.Dst)
		}
		loader = loader || strings.Contains(f.Dst, "ld-linux")
		libc = libc || strings.Contains(f.Dst, "libc.so")
	}
	if !strings.HasSuffix(files[0].Dst, "/sh") || !loader || !libc {
		t.Fatalf("sh goes in as %v, want sh, its loader and libc", files)
	}
	if _, err := checkTools([]string{"no-such-tool-xdplimit"}); err == nil {
		t.Fatal("a tool not on PATH was accepted")
	}
}
