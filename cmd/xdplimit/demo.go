package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/examples"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/pktgen"
	"github.com/xdplimit/xdplimit/policy"
)

func newDemoCmd() *cobra.Command {
	var (
		duration    time.Duration
		sources     uint32
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a self-contained demo: two namespaces, a veth pair, a policy, a flood, live drop counts",
		Long: `demo creates two network namespaces joined by a veth pair, attaches the
limiter to the receiving end with the built-in example policy
(examples/demo.yaml), floods it from several sources with the project's
live-frames generator, and prints pass/drop rates per rule each second.
Everything it creates is removed when it ends, also on Ctrl-C. Traffic stays
between the two namespaces.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDemo(ctx, cmd.OutOrStdout(), duration, sources, metricsAddr)
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 8*time.Second, "how long to flood")
	cmd.Flags().Uint32Var(&sources, "sources", 8, "number of flooding source addresses")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", metrics.DefaultAddr, "serve the demo limiter's /metrics here (\"\" to disable)")
	return cmd
}

// demoLab is the demo's two namespaces and veth pair.
type demoLab struct {
	txNS, rxNS     string // names under /var/run/netns
	txIf, rxIf     string
	txMAC, rxMAC   net.HardwareAddr
	txAddr, rxAddr netip.Prefix
}

func runDemo(ctx context.Context, w io.Writer, duration time.Duration, nsrc uint32, metricsAddr string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("the demo creates namespaces and attaches XDP: run it as root (sudo make demo)")
	}
	id := os.Getpid() % 100000
	lab := &demoLab{
		txNS: fmt.Sprintf("xdpldemo-%d-tx", id), rxNS: fmt.Sprintf("xdpldemo-%d-rx", id),
		txIf: fmt.Sprintf("xdpd%dt", id), rxIf: fmt.Sprintf("xdpd%dr", id),
		// RFC 2544 benchmarking addresses: never a real network.
		txAddr: netip.MustParsePrefix("198.18.0.1/24"), rxAddr: netip.MustParsePrefix("198.18.0.2/24"),
	}
	fmt.Fprintf(w, "creating namespaces %s and %s joined by %s <-> %s\n", lab.txNS, lab.rxNS, lab.txIf, lab.rxIf)
	defer func() {
		if cerr := lab.remove(); cerr != nil && err == nil {
			err = cerr
		}
		fmt.Fprintln(w, "removed the demo's namespaces")
	}()
	if err := lab.create(); err != nil {
		return err
	}

	data, err := examples.FS.ReadFile(examples.Demo)
	if err != nil {
		return err
	}
	pol, err := policy.Parse("examples/"+examples.Demo, data)
	if err != nil {
		return err
	}
	img, err := compiler.Compile(pol)
	if err != nil {
		return err
	}
	var a *loader.Attachment
	err = inNetns(lab.rxNS, func() error {
		var err error
		a, err = loader.Attach(loader.Config{Interface: lab.rxIf, Clock: maps.ClockCoarse, MaxSources: 1 << 16,
			Policy: loader.Policy{Image: img, Path: pol.Path, SHA256: pol.SHA256},
			Warn:   func(s string) { fmt.Fprintln(w, "warning:", s) }})
		return err
	})
	if err != nil {
		return err
	}
	defer a.Detach()
	fmt.Fprintf(w, "attached xdplimit to %s (%s mode) with %s:\n\n", lab.rxIf, a.Mode, pol.Path)
	pol.Describe(w)
	fmt.Fprintln(w)

	// The exporter listens in this process's (the host's) namespace.
	metricsURL := ""
	if metricsAddr != "" {
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		exp := metrics.New(nil)
		if err := exp.Add(a.Interface, a.Limiter, 0); err != nil {
			ln.Close()
			return err
		}
		srvCtx, stopServing := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- exp.ServeListener(srvCtx, ln) }()
		// Runs before the detach above: no scrape reads closed maps.
		defer func() { stopServing(); <-served }()
		metricsURL = "http://" + ln.Addr().String() + "/metrics"
		fmt.Fprintf(w, "Prometheus metrics: %s (try: curl -s %s | grep ^xdplimit_packets)\n", metricsURL, metricsURL)
	}

	g, err := pktgen.Open(pktgen.Config{Timeout: duration + 30*time.Second, Sources: pktgen.Sources{
		Mode: pktgen.Sequential, First: netip.MustParseAddr("198.18.0.100"), Count: nsrc}})
	if err != nil {
		return err
	}
	defer g.Close()
	frame := pktgen.Frame{SrcMAC: lab.txMAC, DstMAC: lab.rxMAC, Src: lab.txAddr.Addr(), Dst: lab.rxAddr.Addr(),
		SrcPort: 40000, DstPort: 53, Payload: 18}.MustBuild()

	floodCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	cpus := []int{}
	for c := 0; c < runtime.NumCPU() && c < 2; c++ {
		cpus = append(cpus, c)
	}
	fmt.Fprintf(w, "flooding UDP port 53 from %d sources on %d CPUs for %v (Ctrl-C stops)\n\n", nsrc, len(cpus), duration)
	type sent struct {
		res pktgen.Result
		err error
	}
	done := make(chan sent, 1)
	go func() {
		// Bounded by count as well as by time: at most 50 Mpps for the duration.
		res, err := g.Send(floodCtx, "/var/run/netns/"+lab.txNS, lab.txIf, frame, uint64(duration.Seconds()*50e6), cpus...)
		done <- sent{res, err}
	}()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prev, prevAt := snapshot(a.Limiter), time.Now()
	startAt := prevAt
	for {
		select {
		case s := <-done:
			if s.err != nil && !errors.Is(s.err, context.DeadlineExceeded) && !errors.Is(s.err, context.Canceled) {
				return s.err
			}
			fmt.Fprintf(w, "\ngenerator: %v\n", s.res)
			fmt.Fprintln(w, "\nfinal counters:")
			printTotals(w, a.Limiter)
			if metricsURL != "" {
				return printScrape(w, metricsURL)
			}
			return nil
		case <-tick.C:
			cur, now := snapshot(a.Limiter), time.Now()
			fmt.Fprintf(w, "t=%2.0fs\n", now.Sub(startAt).Seconds())
			printRates(w, prev, cur, now.Sub(prevAt))
			prev, prevAt = cur, now
		}
	}
}

type demoSnapshot struct {
	rules []maps.RuleStat
}

func snapshot(l *maps.Limiter) demoSnapshot {
	rs, _ := l.RuleStats()
	return demoSnapshot{rules: rs}
}

// printScrape shows what Prometheus would scrape: the per-rule counters.
func printScrape(w io.Writer, url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nscraped %s:\n", url)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "xdplimit_packets_total{") {
			fmt.Fprintln(w, "  "+line)
		}
	}
	return nil
}

func printRates(w io.Writer, prev, cur demoSnapshot, d time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for i, r := range cur.rules {
		var p maps.RuleStat
		if i < len(prev.rules) && prev.rules[i].Name == r.Name {
			p = prev.rules[i]
		}
		rate := func(v maps.Verdict) float64 {
			return float64(r.Verdicts[v].Packets-p.Verdicts[v].Packets) / d.Seconds()
		}
		fmt.Fprintf(tw, "  %s\tpass %.0f pkt/s\tdrop %.0f pkt/s\t\n", r.Name, rate(maps.VerdictPass), rate(maps.VerdictDrop))
	}
	tw.Flush()
}

func printTotals(w io.Writer, l *maps.Limiter) {
	rs, err := l.RuleStats()
	if err != nil {
		fmt.Fprintln(w, err)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\tpassed %d\tdropped %d\t\n", r.Name, r.Verdicts[maps.VerdictPass].Packets, r.Verdicts[maps.VerdictDrop].Packets)
	}
	tw.Flush()
}

// inNetns runs fn on an OS thread inside the named namespace. The thread is
// not returned to the scheduler afterwards (it exits with the goroutine), so
// no other goroutine ever runs in the wrong namespace.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		h, err := netns.GetFromName(name)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (lab *demoLab) create() error {
	for _, name := range []string{lab.txNS, lab.rxNS} {
		if err := inNewThread(func() error {
			h, err := netns.NewNamed(name) // switches this thread into it
			if err != nil {
				return fmt.Errorf("creating namespace %s: %w", name, err)
			}
			h.Close()
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				return err
			}
			return netlink.LinkSetUp(lo)
		}); err != nil {
			return err
		}
	}
	tx, err := netns.GetFromName(lab.txNS)
	if err != nil {
		return err
	}
	defer tx.Close()
	rx, err := netns.GetFromName(lab.rxNS)
	if err != nil {
		return err
	}
	defer rx.Close()
	// Created in the sender's namespace, the peer end goes to the receiver's.
	err = inNetns(lab.txNS, func() error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: lab.txIf}, PeerName: lab.rxIf, PeerNamespace: netlink.NsFd(rx)}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("creating veth %s: %w", lab.txIf, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, end := range []struct {
		ns, ifname string
		addr       netip.Prefix
		mac        *net.HardwareAddr
	}{{lab.txNS, lab.txIf, lab.txAddr, &lab.txMAC}, {lab.rxNS, lab.rxIf, lab.rxAddr, &lab.rxMAC}} {
		err := inNetns(end.ns, func() error {
			nl, err := netlink.LinkByName(end.ifname)
			if err != nil {
				return err
			}
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: end.addr.Addr().AsSlice(), Mask: net.CIDRMask(end.addr.Bits(), 32)}}
			if err := netlink.AddrAdd(nl, addr); err != nil {
				return err
			}
			if err := netlink.LinkSetUp(nl); err != nil {
				return err
			}
			*end.mac = nl.Attrs().HardwareAddr
			// Many source addresses must reach the receiving stack.
			for _, k := range []string{"all", "default", end.ifname} {
				_ = os.WriteFile("/proc/sys/net/ipv4/conf/"+k+"/rp_filter", []byte("0"), 0)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// inNewThread runs fn on a locked thread that dies afterwards: netns.NewNamed
// moves the calling thread into the new namespace.
func inNewThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- fn()
	}()
	return <-errc
}

// remove deletes both namespaces (and with them the veth pair).
func (lab *demoLab) remove() error {
	var errs []error
	for _, name := range []string{lab.txNS, lab.rxNS} {
		if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("deleting namespace %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
