package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

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
func (f *attachFlags) config(iface string) (loader.Config, error) {
	if f.policy == "" {
		return loader.Config{}, errors.New("--policy is required")
	}
	if f.maxSources == 0 {
		return loader.Config{}, errors.New("--max-sources 0: give 1 or more")
	}
	if err := maps.CheckMaxBans(f.maxBans); err != nil {
		return loader.Config{}, err
	}
	mode, err := loader.ParseMode(f.mode)
	if err != nil {
		return loader.Config{}, err
	}
	clock, err := parseClock(f.clock)
	if err != nil {
		return loader.Config{}, err
	}
	return loader.Config{Interface: iface, Mode: mode, Force: f.force, MaxSources: f.maxSources,
		MaxOtherSources: f.maxOther, MaxBans: f.maxBans, Clock: clock}, nil
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
			log := slog.New(slog.NewTextHandler(errOut, nil))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Listen before attaching: a taken port fails before the
			// interface is touched.
			var ln net.Listener
			if f.metrics != "" {
				if ln, err = net.Listen("tcp", f.metrics); err != nil {
					return fmt.Errorf("--metrics-addr: %w", err)
				}
			}
			// Watch before attach reads the policy: an edit made while
			// attaching is then not missed.
			changes, stopWatch := watchPolicy(f.policy, log)
			defer stopWatch()
			a, pol, err := attach(cfg, f.policy, errOut, log)
			if err != nil {
				if ln != nil {
					ln.Close()
				}
				return err
			}
			exp := metrics.New(log)
			fr := newFleetRunner(a, log, exp.Registry())
			if err := fr.apply(pol.Fleet); err != nil {
				// Only a password file that vanished since the policy was
				// read gets here: the limiter enforces locally.
				log.Error("fleet sync not started; fleet levels enforce locally", "err", err)
			}
			defer fr.stop()
			dl := newDropLogRunner(a, f.logDrops, log, exp.Registry())
			if err := dl.apply(pol.Log); err != nil {
				// A file that cannot be opened: enforcement goes on.
				log.Error("drop log not started", "err", err)
			}
			defer dl.stop()
			served := make(chan error, 1)
			srvCtx, stopServing := context.WithCancel(context.Background())
			if ln != nil {
				if err := exp.Add(a.Interface, a.Limiter, 0); err != nil {
					log.Warn("metrics unavailable", "err", err)
				}
				go func() { served <- exp.ServeListener(srvCtx, ln) }()
				log.Info("serving metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
			} else {
				served <- nil
			}
			return serve(ctx, a, f, log, errOut, exp, runners{fr, dl}, changes, func() error {
				// The log's last lines and in-flight scrapes finish
				// before the maps close.
				dl.stop()
				stopServing()
				return <-served
			})
		},
	}
	f.register(cmd)
	return cmd
}

// attach compiles the policy (its warnings go to warnings) and attaches
// with cfg, the checked flags.
func attach(cfg loader.Config, policyPath string, warnings io.Writer, log *slog.Logger) (*loader.Attachment, loader.Policy, error) {
	path, err := filepath.Abs(policyPath)
	if err != nil {
		return nil, loader.Policy{}, err
	}
	if cfg.Policy, err = compilePolicy(path, warnings); err != nil {
		return nil, loader.Policy{}, err
	}
	cfg.Warn = func(s string) { log.Warn(s) }
	a, err := loader.Attach(cfg)
	if err != nil {
		return nil, loader.Policy{}, err
	}
	iface, p := cfg.Interface, cfg.Policy
	// adopted=true: took over the pinned limiter of an earlier attach,
	// its counters and buckets, without an enforcement gap.
	log.Info("attached", "interface", iface, "mode", a.Mode, "adopted", a.Adopted, "policy", path,
		"rules", len(p.Image.Rules), "clock", a.Limiter.Clock(), "max_sources", a.Limiter.SourcesCapacity(),
		"max_bans", a.Limiter.BansCapacity(), "ban_table_bytes", uint64(a.Limiter.BansCapacity())*maps.BanBytes())
	return a, p, nil
}

// runners are what runs beside the attachment and follows reloads.
type runners struct {
	fleet   *fleetRunner
	dropLog *dropLogRunner
}

// serve runs until a termination signal, reloading on SIGHUP and when the
// watcher reports changed policy contents; a reloaded policy's warnings go
// to warnings.
func serve(ctx context.Context, a *loader.Attachment, f attachFlags, log *slog.Logger, warnings io.Writer,
	exp *metrics.Exporter, rs runners, changes <-chan struct{}, stopMetrics func() error) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	path, _ := filepath.Abs(f.policy)
	reload := func(trigger string) {
		p, err := reloadFrom(a, path, warnings)
		if err == nil {
			err = rs.fleet.apply(p.Fleet)
		}
		if err == nil {
			err = rs.dropLog.apply(p.Log)
		}
		exp.ReloadResult(a.Interface, err)
		if err != nil {
			log.Error("reload failed; the previous policy stays in force", "policy", path, "trigger", trigger, "err", err)
		} else {
			log.Info("reloaded", "policy", path, "trigger", trigger)
		}
	}
	for {
		select {
		case <-hup:
			reload("SIGHUP")
		case <-changes:
			reload("file change")
		case <-ctx.Done():
			if err := stopMetrics(); err != nil {
				log.Warn("metrics server", "err", err)
			}
			if f.keep {
				log.Info("exiting; the limiter stays attached (--keep-on-exit)", "interface", a.Interface)
				return a.Close()
			}
			log.Info("detaching", "interface", a.Interface)
			return a.Detach()
		}
	}
}

func reloadFrom(a *loader.Attachment, path string, warnings io.Writer) (loader.Policy, error) {
	p, err := compilePolicy(path, warnings)
	if err != nil {
		return p, err
	}
	return p, a.Reload(p)
}
