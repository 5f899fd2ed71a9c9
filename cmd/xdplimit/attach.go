// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

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
	detach     bool
	watch      bool
	waitIface  string
	maxSources uint32
	maxOther   uint32
	maxBans    uint32
	clock      string
	metrics    string
	logDrops   string
	logLevel   string
	logFormat  string
}

func (f *attachFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.policy, "policy", "", "policy file (YAML, see docs/policy.md)")
	cmd.Flags().StringVar(&f.mode, "mode", "auto", "XDP mode: auto (native, else generic, logging why), native or generic")
	cmd.Flags().BoolVar(&f.force, "force", false, "replace an XDP program already on the interface")
	cmd.Flags().BoolVar(&f.detach, "detach-on-exit", false,
		"detach the limiter and remove its pins when this process exits (by default it stays attached and enforcing)")
	cmd.Flags().BoolVar(&f.keep, "keep-on-exit", false, "deprecated, no effect: leaving the limiter attached on exit is the default")
	cmd.Flags().BoolVar(&f.watch, "watch", false,
		"reload when the policy file or a list file it names changes (once it has stayed the same for 500ms)")
	cmd.Flags().StringVar(&f.waitIface, "wait-for-interface", "0",
		`wait for a missing interface to appear: without a value for as long as it takes, with one (--wait-for-interface=5m) that long; 0 fails at once`)
	cmd.Flags().Lookup("wait-for-interface").NoOptDefVal = "forever"
	cmd.Flags().Uint32Var(&f.maxSources, "max-sources", 1<<20, "entries of the IPv4 per-source state table, rounded up to a power of two (fixed memory: 32 bytes each; plus, while the policy has a sliding_log level, a sixteenth as many logs, ~592 bytes each)")
	cmd.Flags().Uint32Var(&f.maxOther, "max-other-sources", 0,
		"entries of the table for every other key: IPv6, global, src_ip+dst_port (~104 bytes each; default max-sources/4)")
	cmd.Flags().Uint32Var(&f.maxBans, "max-bans", maps.DefaultMaxBans,
		fmt.Sprintf("entries of the ban table, a power of two (fixed memory: ~%d bytes each)", maps.BanBytes()))
	cmd.Flags().StringVar(&f.clock, "clock", "coarse", "datapath clock: coarse (cheap; fine clock only where a limit needs it) or ktime")
	cmd.Flags().StringVar(&f.metrics, "metrics-addr", metrics.DefaultAddr,
		"serve /metrics and /healthz here, for every attach process given the same address (\"\" to disable); anything but loopback is an explicit choice")
	cmd.Flags().StringVar(&f.logDrops, "log-drops", "",
		"write sampled drops as JSON lines to stdout (--log-drops) or a file (--log-drops=PATH); see docs/logging.md")
	cmd.Flags().Lookup("log-drops").NoOptDefVal = "-"
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "process log level: debug, info, warn or error")
	cmd.Flags().StringVar(&f.logFormat, "log-format", "text", "process log format on stderr: text or json")
}

// config checks the flags before anything is touched: a typo fails before
// the metrics port is bound or the interface changed.
func (f *attachFlags) config(iface string, stderr io.Writer) (agent.Config, error) {
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
	wait, err := parseWait(f.waitIface)
	if err != nil {
		return agent.Config{}, err
	}
	log, err := newLogger(stderr, f.logLevel, f.logFormat)
	if err != nil {
		return agent.Config{}, err
	}
	return agent.Config{Interface: iface, Policy: f.policy, Watch: f.watch, Mode: mode, Force: f.force,
		MaxSources: f.maxSources, MaxOtherSources: f.maxOther, MaxBans: f.maxBans, Clock: clock,
		MetricsAddr: f.metrics, LogDrops: f.logDrops, WaitForInterface: wait, DetachOnExit: f.detach,
		Log: log, Warnings: stderr}, nil
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

func parseWait(s string) (time.Duration, error) {
	if s == "forever" {
		return agent.WaitForever, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf(`--wait-for-interface %q: give a duration (30s, 5m), "forever", or 0`, s)
	}
	return d, nil
}

// newLogger is the process log: --log-level and --log-format.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

func newAttachCmd() *cobra.Command {
	var f attachFlags
	cmd := &cobra.Command{
		Use:   "attach IFACE --policy FILE",
		Short: "Attach the limiter to an interface and enforce a policy (runs in the foreground)",
		Long: `attach loads the XDP program with the policy, attaches it to IFACE and pins its
state under /sys/fs/bpf/xdplimit/IFACE, then stays in the foreground serving
its control socket, /run/xdplimit/IFACE.ctl: ` + "`xdplimit reload IFACE`" + ` (or SIGHUP)
re-reads the policy, and with --watch so does a change to the policy file or
to a list file it names. SIGINT/SIGTERM end the process and leave the limiter
attached and enforcing the last policy: ` + "`xdplimit detach IFACE`" + ` removes it
(or --detach-on-exit). Started again while pinned state exists, attach adopts
it (counters, every source's state, the bans) without a gap, also from an
xdplimit of another map layout (bans carried over, the rest anew).`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.config(args[0], cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if f.keep {
				cfg.Log.Warn("--keep-on-exit is deprecated and has no effect: the limiter stays attached on exit by default")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Before Start, so that a SIGHUP while it waits for the
			// interface does not end the process.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			a, err := agent.Start(ctx, cfg)
			if err != nil {
				if ctx.Err() != nil {
					// Stopped while waiting for the interface: nothing
					// was attached, nothing failed.
					cfg.Log.Info("stopped before attaching", "interface", cfg.Interface, "reason", err)
					return nil
				}
				return err
			}
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
