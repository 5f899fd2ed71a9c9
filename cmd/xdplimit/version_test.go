// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/xdplimit/xdplimit/internal/buildinfo"
)

func TestVersion(t *testing.T) {
	want := buildinfo.Read().String()
	runCases(t, []cliCase{
		{name: "command", args: []string{"version"}, stdout: want},
		{name: "flag", args: []string{"--version"}, stdout: want},
		refused("argument", `unknown command "x" for "xdplimit version"`, "version", "x"),
	})
}
