// Command xdplimit attaches the per-source XDP flood limiter to an interface,
// reloads its policy, and reports what it does.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "xdplimit",
		Short: "Per-source flood limiter at the NIC driver level (XDP)",
		Long: `xdplimit drops what exceeds per-source rate limits before the kernel allocates
anything for the packet. Policies are YAML files; see docs/policy.md.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newAttachCmd(), newDetachCmd(), newStatusCmd(), newReloadCmd(),
		newPolicyCmd(), newDemoCmd(), newTopCmd(), newVersionCmd())
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "xdplimit:", err)
		os.Exit(1)
	}
}
