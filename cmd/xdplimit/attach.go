package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
)

type attachFlags struct {
	policy     string
	mode       string
	force      bool
	keep       bool
	maxSources uint32
	maxOther   uint32
	maxBans    uint32
	clock      string
	metrics    string
	logDrops   string
}

func (f *attachFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.policy, "policy", "", "policy file (YAML, see docs/policy.md)")
	cmd.Flags().StringVar(&f.mode, "mode", "auto", "XDP mode: auto (native, else generic), native or generic")
	cmd.Flags().BoolVar(&f.force, "force", false, "replace an XDP program already on the interface")
	cmd.Flags().BoolVar(&f.keep, "keep-on-exit", false, "leave the limiter attached and pinned when this process exits")
	cmd.Flags().Uint32Var(&f.maxSources, "max-sources", 1<<20, "entries of the IPv4 per-source state table (fixed memory: ~88 bytes each; plus a sixteenth as many sliding_log logs, ~592 bytes each)")
	cmd.Flags().Uint32Var(&f.maxOther, "max-other-sources", 0,
		"entries of the table for every other key: IPv6, global, src_ip+dst_port (~104 bytes each; default max-sources/4)")
	cmd.Flags().Uint32Var(&f.maxBans, "max-bans", maps.DefaultMaxBans,
		fmt.Sprintf("entries of the ban table, a power of two (fixed memory: ~%d bytes each)", maps.BanBytes()))
	cmd.Flags().StringVar(&f.clock, "clock", "coarse", "datapath clock: coarse (cheap; fine clock only where a limit needs it) or ktime")
	cmd.Flags().StringVar(&f.metrics, "metrics-addr", metrics.DefaultAddr,
		"serve /metrics and /healthz here (\"\" to disable); anything but loopback is an explicit choice")
	cmd.Flags().StringVar(&f.logDrops, "log-drops", "",
		"write sampled drops as JSON lines to stdout (--log-drops) or a file (--log-drops=PATH); see docs/logging.md")
	cmd.Flags().Lookup("log-drops").NoOptDefVal = "-"
}

// config checks the flags before anything is touched: a typo fails before
// the metrics port is bound or the interface changed.
func (f *attachFlags) config(iface string) (agent.Config, error) {
	if f.policy == "" {
		return agent.Config{}, errors.New("--policy is required")
	}
	if f.maxSources == 0 {
		return agent.Config{}, errors.New("--max-sources 0: give 1 or more")
	}
	if err := maps.CheckMaxBans(f.maxBans); err != nil {
		return agent.Config{}, err
	}
	mode, err := loader.ParseMode(f.mode)
	if err != nil {
		return agent.Config{}, err
	}
	clock, err := parseClock(f.clock)
	if err != nil {
		return agent.Config{}, err
	}
	return agent.Config{Interface: iface, Policy: f.policy, Mode: mode, Force: f.force,
		MaxSources: f.maxSources, MaxOtherSources: f.maxOther, MaxBans: f.maxBans, Clock: clock,
		MetricsAddr: f.metrics, LogDrops: f.logDrops, KeepOnExit: f.keep}, nil
}

func parseClock(s string) (maps.Clock, error) {
	switch s {
	case "coarse":
		return maps.ClockCoarse, nil
	case "ktime", "fine":
		return maps.ClockKtime, nil
	}
	return 0, fmt.Errorf("--clock %q: use coarse or ktime", s)
}

func newAttachCmd() *cobra.Command {
	var f attachFlags
	cmd := &cobra.Command{
		Use:   "attach IFACE --policy FILE",
		Short: "Attach the limiter to an interface and enforce a policy (runs in the foreground)",
		Long: `attach loads the XDP program with the policy, attaches it to IFACE and pins its
state under /sys/fs/bpf/xdplimit/IFACE, then stays in the foreground:
SIGHUP re-reads the policy, and so does a change to the policy file or to a
list file it names; SIGINT/SIGTERM detach and remove the pins
(unless --keep-on-exit). Started again while pinned state exists, it adopts
that state (counters and every source's bucket) without a gap.`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.config(args[0])
			if err != nil {
				return err
			}
			errOut := cmd.ErrOrStderr()
			cfg.Log = slog.New(slog.NewTextHandler(errOut, nil))
			cfg.Warnings = errOut
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := agent.Start(cfg)
			if err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go reloadOnHangup(ctx, a, hup)
			return a.Run(ctx)
		},
	}
	f.register(cmd)
	return cmd
}

// reloadOnHangup reloads the policy on each SIGHUP until ctx ends. The
// agent logs and counts every result.
func reloadOnHangup(ctx context.Context, a *agent.Agent, hup <-chan os.Signal) {
	for {
		select {
		case <-hup:
			_ = a.Reload("SIGHUP")
		case <-ctx.Done():
			return
		}
	}
}
