// SPDX-License-Identifier: Apache-2.0

// Command xdplimit attaches the per-source XDP flood limiter to an interface,
// reloads its policy, and reports what it does.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/internal/buildinfo"
	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/loader"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "xdplimit",
		Short: "Per-source flood limiter at the NIC driver level (XDP)",
		Long: `xdplimit drops what exceeds per-source rate limits before the kernel allocates
anything for the packet. Policies are YAML files; see docs/policy.md (installed
in /usr/share/doc/xdplimit/docs/ by the package). Under systemd, the unit
xdplimit@IFACE enforces /etc/xdplimit/IFACE.yaml on IFACE.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what the version command prints.
		Version: buildinfo.Read().String(),
	}
	root.SetVersionTemplate("{{.Version}}")
	root.AddCommand(newAttachCmd(), newDetachCmd(), newStatusCmd(), newReloadCmd(),
		newPolicyCmd(), newDemoCmd(), newTopCmd(), newCaptureCmd(), newAutopilotCmd(), newVersionCmd(),
		newBanCmd(), newUnbanCmd(), newBansCmd(), newGenDocsCmd())
	return root
}

// ifaceNames checks that every argument is a valid interface name, before
// a command touches bpffs, the lock directory or the metrics port.
func ifaceNames(_ *cobra.Command, args []string) error {
	for _, a := range args {
		if err := loader.CheckInterfaceName(a); err != nil {
			return err
		}
	}
	return nil
}

// run executes a command line and returns the exit status. main only
// wires it to the process, so tests run exactly what users run.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	// cobra reads os.Args when given nil: an empty command line must stay
	// empty, whoever calls run (a test binary has arguments of its own).
	root.SetArgs(append([]string{}, args...))
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		// Errors quote outside text (a path, a name, a server's reply)
		// where they are built, not always escaped: the terminal sees none
		// of its controls. A message's own lines stay lines.
		fmt.Fprintln(stderr, "xdplimit:", termsafe.EscapeLines(err.Error()))
		return 1
	}
	return 0
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
