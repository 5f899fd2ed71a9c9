package main

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/xdplimit/xdplimit/maps"
)

func TestVersion(t *testing.T) {
	runCases(t, []cliCase{
		{name: "prints", args: []string{"version"},
			stdout: fmt.Sprintf("xdplimit dev (map layout %d, %s)\n", maps.LayoutVersion, runtime.Version())},
		refused("argument", `unknown command "x" for "xdplimit version"`, "version", "x"),
	})
}
