// SPDX-License-Identifier: Apache-2.0

package main

import (
	"runtime"
	"strings"
	"testing"
)

// The benchmark report names the machine's CPU from /proc/cpuinfo as each
// architecture's kernel prints it.
func TestCPUModel(t *testing.T) {
	x86 := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n" +
		"processor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
	arm64 := "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n" +
		"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n" +
		"processor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
	for _, c := range []struct{ name, cpuinfo, want string }{
		{"x86", x86, "Intel(R) Xeon(R) CPU @ 2.20GHz"},
		{"arm64", arm64, runtime.GOARCH + " CPU implementer 0x41 part 0xd0c"},
		{"neither", "processor\t: 0\n", "unknown"},
	} {
		if got := cpuModel(strings.NewReader(c.cpuinfo)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
