// SPDX-License-Identifier: Apache-2.0

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
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/examples"
	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/pktgen"
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

// demoPrefix starts the demo's namespace names; the pid after it lets a
// later demo remove what a killed one left (netns.CleanupStale).
const demoPrefix = "xdpldemo-"

func runDemo(ctx context.Context, w io.Writer, duration time.Duration, nsrc uint32, metricsAddr string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("the demo creates namespaces and attaches XDP: run it as root (sudo make demo)")
	}
	if removed, err := netns.CleanupStale(demoPrefix); err == nil && len(removed) > 0 {
		fmt.Fprintf(w, "removed namespaces left by a killed demo: %v\n", removed)
	}
	// The full PID: the receiving end's name keys its pins, shared by every
	// process on the machine (xdpd, 7 digits of a pid_max up to 4194304, r).
	id := os.Getpid()
	defer fmt.Fprintln(w, "removed the demo's namespaces")
	tx, err := netns.New(demoPrefix)
	if err != nil {
		return err
	}
	defer closeNetns(tx, &err)
	rx, err := netns.New(demoPrefix)
	if err != nil {
		return err
	}
	defer closeNetns(rx, &err)
	// Created in the sender's namespace, the peer end goes to the
	// receiver's. RFC 2544 benchmarking addresses: never a real network.
	lab, err := netns.NewVeth(tx, rx, netns.VethConfig{
		Name: fmt.Sprintf("xdpd%dt", id), PeerName: fmt.Sprintf("xdpd%dr", id),
		Addr: netip.MustParsePrefix("198.18.0.1/24"), PeerAddr: netip.MustParsePrefix("198.18.0.2/24"),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "created namespaces %s and %s joined by %s <-> %s\n", tx, rx, lab.Name, lab.PeerName)

	a, err := attachDemo(w, lab)
	if err != nil {
		return err
	}
	defer a.Detach()
	// The exporter listens in this process's (the host's) namespace.
	metricsURL := ""
	if metricsAddr != "" {
		var stopServing func()
		if metricsURL, stopServing, err = serveDemoMetrics(w, a, metricsAddr); err != nil {
			return err
		}
		// Runs before the detach above: no scrape reads closed maps.
		defer stopServing()
	}
	if err := floodDemo(ctx, w, lab, duration, nsrc); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nfinal counters:")
	if err := printTotals(w, a.Limiter); err != nil {
		return err
	}
	if metricsURL != "" {
		return printScrape(w, metricsURL)
	}
	return nil
}

// attachDemo attaches xdplimit with the example policy to the receiving
// end of lab, and describes the policy.
func attachDemo(w io.Writer, lab *netns.Veth) (*loader.Attachment, error) {
	data, err := examples.FS.ReadFile(examples.Demo)
	if err != nil {
		return nil, err
	}
	img, pol, err := compiler.CompileYAML("examples/"+examples.Demo, data)
	if err != nil {
		return nil, err
	}
	var a *loader.Attachment
	err = lab.PeerNS.Do(func() error {
		var err error
		a, err = loader.Attach(loader.Config{Interface: lab.PeerName, Clock: maps.ClockCoarse, MaxSources: 1 << 16,
			Policy: loader.Policy{Image: img, Path: pol.Path, SHA256: pol.SHA256},
			Warn:   func(s string) { fmt.Fprintln(w, "warning:", s) }})
		return err
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "attached xdplimit to %s (%s mode) with %s:\n\n", lab.PeerName, a.Mode, pol.Path)
	pol.Describe(w)
	fmt.Fprintln(w)
	return a, nil
}

// serveDemoMetrics serves a's metrics on addr until stop is called.
func serveDemoMetrics(w io.Writer, a *loader.Attachment, addr string) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	exp := metrics.New(nil)
	if err := exp.Add(a.Interface, a.Limiter, 0); err != nil {
		ln.Close()
		return "", nil, err
	}
	srvCtx, stopServing := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- exp.ServeListener(srvCtx, ln) }()
	url = "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(w, "Prometheus metrics: %s (try: curl -s %s | grep ^xdplimit_packets)\n", url, url)
	return url, func() { stopServing(); <-served }, nil
}

// floodDemo floods lab from nsrc sources for duration, showing the live
// rates as `xdplimit top` does, until the flood ends.
func floodDemo(ctx context.Context, w io.Writer, lab *netns.Veth, duration time.Duration, nsrc uint32) error {
	g, err := pktgen.Open(pktgen.Config{Timeout: duration + 30*time.Second, Sources: pktgen.Sources{
		Mode: pktgen.Sequential, First: netip.MustParseAddr("198.18.0.100"), Count: nsrc}})
	if err != nil {
		return err
	}
	defer g.Close()
	frame := pktgen.Frame{SrcMAC: lab.MAC, DstMAC: lab.PeerMAC, Src: lab.Addr, Dst: lab.PeerAddr,
		SrcPort: 40000, DstPort: 53, Payload: 18}.MustBuild()

	cpus := []int{}
	for c := 0; c < runtime.NumCPU() && c < 2; c++ {
		cpus = append(cpus, c)
	}
	fmt.Fprintf(w, "flooding UDP port 53 from %d sources on %d CPUs for %v (Ctrl-C stops)\n\n", nsrc, len(cpus), duration)
	type sent struct {
		res pktgen.Result
		err error
	}
	// The flood lasts its duration and, on a machine slow to open the
	// pins, until top has shown its first rates: a demo that ends
	// without a table shows nothing. The generator's own timeout bounds
	// the wait.
	floodCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	shown := &firstWrite{w: w, first: make(chan struct{})}
	topCtx, stopTop := context.WithCancel(ctx)
	defer stopTop()
	topDone := make(chan error, 1)
	go func() { topDone <- runTop(topCtx, shown, lab.PeerName, time.Second, false, false) }()
	done := make(chan sent, 1)
	go func() {
		// Bounded by count as well as by time: at most 50 Mpps for the duration.
		res, err := g.Send(floodCtx, lab.NS.Path(), lab.Name, frame, uint64(duration.Seconds()*50e6), cpus...)
		done <- sent{res, err}
	}()
	go endFlood(floodCtx, cancel, duration, shown.first)
	var s sent
	var topErr error
	select {
	case s = <-done:
		stopTop()
		topErr = <-topDone
	case topErr = <-topDone: // top failed: the flood has nothing to show
		cancel()
		s = <-done
	}
	if topErr != nil {
		return topErr
	}
	if s.err != nil && !errors.Is(s.err, context.DeadlineExceeded) && !errors.Is(s.err, context.Canceled) {
		return s.err
	}
	fmt.Fprintf(w, "\ngenerator: %v\n", s.res)
	return nil
}

// endFlood ends the flood (cancel) once d has passed and top has shown its
// first table (shown), or when ctx ends first.
func endFlood(ctx context.Context, cancel context.CancelFunc, d time.Duration, shown <-chan struct{}) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return
	}
	select {
	case <-shown:
	case <-ctx.Done():
	}
	cancel()
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

func printTotals(w io.Writer, l *maps.Limiter) error {
	rs, err := l.RuleStats()
	if err != nil {
		return fmt.Errorf("reading the rule counters: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\tpassed %d\tdropped %d\t\n", r.Name, r.Verdicts[maps.VerdictPass].Packets, r.Verdicts[maps.VerdictDrop].Packets)
	}
	return tw.Flush()
}

// firstWrite passes writes to w and closes first on the first one: top
// writes each table in one write.
type firstWrite struct {
	w     io.Writer
	once  sync.Once
	first chan struct{}
}

func (f *firstWrite) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.once.Do(func() { close(f.first) })
	return n, err
}

// closeNetns deletes a demo namespace (and with it the veth pair) and
// reports a failure through *err unless an earlier error is there.
func closeNetns(n *netns.Netns, err *error) {
	if cerr := n.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("deleting namespace %s: %w", n, cerr)
	}
}
