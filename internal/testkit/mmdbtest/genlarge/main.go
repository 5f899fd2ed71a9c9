// SPDX-License-Identifier: Apache-2.0

// Command genlarge writes the GeoIP scale test's large country database
// (mmdbtest.WriteLarge) on the host, for the VM suite: written under
// emulation it costs the test minutes of an emulated CPU.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/xdplimit/xdplimit/internal/testkit/mmdbtest"
)

func main() {
	out := flag.String("o", "", "the database file to write")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: genlarge -o FILE")
		os.Exit(2)
	}
	if err := mmdbtest.WriteLarge(*out); err != nil {
		fmt.Fprintln(os.Stderr, "genlarge:", err)
		os.Exit(1)
	}
}
