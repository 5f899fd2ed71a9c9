package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/maps"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "xdplimit %s (map layout %d, %s)\n", version, maps.LayoutVersion, runtime.Version())
		},
	}
}
