// SPDX-License-Identifier: Apache-2.0

// Package metrics exports the limiter's counters to Prometheus. A collector
// reads the per-CPU counter maps of every registered interface when scraped
// and sums them: there is no polling loop, and a scrape costs a few map
// lookups per rule in force, never a walk of the source table. The same
// snapshots feed `xdplimit top`. docs/metrics.md describes every family.
package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdplimit/xdplimit/maps"
)

// DefaultAddr is where attach serves /metrics unless told otherwise:
// loopback only; binding elsewhere is the operator's explicit choice.
const DefaultAddr = "127.0.0.1:9740"

// Reload results, the values of xdplimit_policy_reloads_total's result label.
const (
	ReloadSuccess = "success"
	ReloadFailure = "failure"
)

// Exporter owns a registry holding the limiter collector, the policy reload
// counter and the Go and process collectors, and serves it over HTTP.
type Exporter struct {
	reg     *prometheus.Registry
	coll    *collector
	reloads *prometheus.CounterVec
	log     *slog.Logger

	mu      sync.Mutex
	peers   func(ctx context.Context) []Peer // nil: none
	pending map[string]string                // interface → why it is not registered yet
}

// New returns an exporter with no interface registered. log receives the
// exporter's own errors (nil: discarded).
func New(log *slog.Logger) *Exporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Exporter{
		reg:  prometheus.NewRegistry(),
		coll: newCollector(log),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "policy_reloads_total",
			Help: "Policy reloads (file change or SIGHUP) by result: success, or failure, after which the previous policy " +
				"stays in force. Counted by this attach process since it started.",
		}, []string{"interface", "result"}),
		log: log,
	}
	e.reg.MustRegister(e.coll, e.reloads,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return e
}

// Registry is the exporter's registry, for registering more collectors or
// gathering in tests.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Add registers the limiter serving iface. progID labels
// xdplimit_program_info; with 0 it is taken from l's program when l has one
// (a limiter loaded by this process).
func (e *Exporter) Add(iface string, l *maps.Limiter, progID ebpf.ProgramID) error {
	if l == nil {
		return fmt.Errorf("metrics: no limiter for %s", iface)
	}
	if progID == 0 && l.Program() != nil {
		info, err := l.Program().Info()
		if err != nil {
			return fmt.Errorf("metrics: %s: reading the program's id: %w", iface, err)
		}
		progID, _ = info.ID()
	}
	if err := e.coll.add(&target{iface: iface, l: l, progID: progID}); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	e.SetPending(iface, "")
	// Both results exist from the start, so that increase() and alerts see
	// the first failure.
	e.reloads.WithLabelValues(iface, ReloadSuccess)
	e.reloads.WithLabelValues(iface, ReloadFailure)
	return nil
}

// Remove unregisters iface (after a detach); its reload counts go too.
func (e *Exporter) Remove(iface string) {
	e.coll.remove(iface)
	e.reloads.DeleteLabelValues(iface, ReloadSuccess)
	e.reloads.DeleteLabelValues(iface, ReloadFailure)
}

// ReloadResult counts one policy reload of iface: err == nil is a success.
func (e *Exporter) ReloadResult(iface string, err error) {
	result := ReloadSuccess
	if err != nil {
		result = ReloadFailure
	}
	e.reloads.WithLabelValues(iface, result).Inc()
}

// SetPending makes /healthz report iface as not enforcing yet, for reason,
// until Add registers it ("" clears it).
func (e *Exporter) SetPending(iface, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if reason == "" {
		delete(e.pending, iface)
		return
	}
	if e.pending == nil {
		e.pending = map[string]string{}
	}
	e.pending[iface] = reason
}

// SetPeers makes Handler serve, beside the exporter's own series, those of
// the peers that list returns at each scrape (other attach processes on
// the same metrics address).
func (e *Exporter) SetPeers(list func(ctx context.Context) []Peer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.peers = list
}

func (e *Exporter) listPeers(ctx context.Context) []Peer {
	e.mu.Lock()
	list := e.peers
	e.mu.Unlock()
	if list == nil {
		return nil
	}
	return list(ctx)
}

// peerTimeout bounds what one scrape waits for the peers: well within the
// handler's own timeout, so that one stuck peer costs its series only.
const peerTimeout = 3 * time.Second

// Gather returns the exporter's own metric families. With one interface
// registered (or pending), series without an interface label (the Go
// runtime's and the process's) get that interface, so that the series of
// several processes merged on one address stay apart.
func (e *Exporter) Gather() ([]*dto.MetricFamily, error) {
	fams, err := e.reg.Gather()
	var ifaces []string
	for _, t := range e.coll.list() {
		ifaces = append(ifaces, t.iface)
	}
	e.mu.Lock()
	for iface := range e.pending {
		ifaces = append(ifaces, iface)
	}
	e.mu.Unlock()
	if len(ifaces) == 1 {
		labelInterface(fams, ifaces[0])
	}
	return fams, err
}

// gatherAll merges the exporter's families with its peers', gathered at
// once. A peer that does not answer shows as xdplimit_up 0.
func (e *Exporter) gatherAll() ([]*dto.MetricFamily, error) {
	own, err := e.Gather()
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	peers := e.listPeers(ctx)
	sets := make([][]*dto.MetricFamily, len(peers)+1)
	errs := make([]error, len(peers)+2)
	sets[0], errs[0] = own, err
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			fams, err := p.Gather(ctx)
			if err != nil {
				sets[i+1], errs[i+1] = unreachable(p.Interface()), fmt.Errorf("%s: %w", p.Interface(), err)
				return
			}
			labelInterface(fams, p.Interface())
			sets[i+1] = fams
		})
	}
	wg.Wait()
	merged, err := merge(sets...)
	errs[len(errs)-1] = err
	return merged, errors.Join(errs...)
}

// Check reads the maps of every registered interface, as a scrape would,
// and returns why any of them cannot be read. No interface at all is an
// error too: nothing is being enforced that the exporter could show.
func (e *Exporter) Check() error {
	var errs []error
	for _, h := range e.health(nil) {
		if h.err != nil {
			errs = append(errs, h.err)
		}
	}
	return errors.Join(errs...)
}

// ifaceHealth is one interface's line of /healthz.
type ifaceHealth struct {
	iface string
	err   error
}

// health checks every registered interface and every peer's (none when
// peers is nil); no interface at all is unhealthy.
func (e *Exporter) health(peers []Peer) []ifaceHealth {
	var out []ifaceHealth
	for _, t := range e.coll.list() {
		_, err := Read(t.iface, t.l)
		out = append(out, ifaceHealth{t.iface, err})
	}
	e.mu.Lock()
	for iface, reason := range e.pending {
		out = append(out, ifaceHealth{iface, errors.New(reason)})
	}
	e.mu.Unlock()
	if len(peers) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
		defer cancel()
		hs := make([]ifaceHealth, len(peers))
		var wg sync.WaitGroup
		for i, p := range peers {
			wg.Go(func() { hs[i] = ifaceHealth{p.Interface(), p.Health(ctx)} })
		}
		wg.Wait()
		out = append(out, hs...)
	}
	slices.SortFunc(out, func(a, b ifaceHealth) int { return cmp.Compare(a.iface, b.iface) })
	if len(out) == 0 {
		out = append(out, ifaceHealth{"", errors.New("no interface registered")})
	}
	return out
}

// Handler serves /metrics (the registry, and the peers' series), /healthz
// (200 when every interface's maps are readable, else 503; one line per
// interface) and /v1/sources/ADDR (what each interface's limiter holds for
// an address, as JSON: source.go). Only GET (and HEAD) is answered.
func (e *Exporter) Handler() http.Handler { return e.handler(true) }

// LocalHandler is Handler without the peers: what an attach serves on its
// control socket, for the process that holds the metrics address.
func (e *Exporter) LocalHandler() http.Handler { return e.handler(false) }

func (e *Exporter) handler(withPeers bool) http.Handler {
	mux := http.NewServeMux()
	var g prometheus.Gatherer = prometheus.GathererFunc(e.Gather)
	if withPeers {
		g = prometheus.GathererFunc(e.gatherAll)
	}
	metrics := promhttp.HandlerFor(g, promhttp.HandlerOpts{
		// One unreadable interface must not hide the others: it shows as
		// xdplimit_up 0 and in /healthz.
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            slog.NewLogLogger(e.log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(e.reg, metrics))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		var peers []Peer
		if withPeers {
			peers = e.listPeers(r.Context())
		}
		writeHealth(w, e.health(peers))
	})
	mux.HandleFunc("GET /v1/sources/{addr}", e.sources(withPeers))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintln(w, `<html><head><title>xdplimit</title></head><body><h1>xdplimit</h1>`+
			`<p><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a> /v1/sources/ADDR</p></body></html>`)
	})
	return mux
}

// writeHealth answers /healthz: "ok" or "unhealthy", then a line per
// interface.
func writeHealth(w http.ResponseWriter, hs []ifaceHealth) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	healthy := true
	for _, h := range hs {
		switch {
		case h.iface == "":
			fmt.Fprintf(&b, "%v\n", h.err)
		case h.err != nil:
			fmt.Fprintf(&b, "%s: %v\n", h.iface, h.err)
		default:
			fmt.Fprintf(&b, "%s: ok\n", h.iface)
		}
		healthy = healthy && h.err == nil
	}
	if !healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "unhealthy\n", b.String())
		return
	}
	fmt.Fprint(w, "ok\n", b.String())
}

// Serve listens on addr and serves Handler until ctx is done, then shuts the
// server down (waiting up to 5 s for scrapes in flight). A listen error is
// returned at once.
func (e *Exporter) Serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return e.ServeListener(ctx, ln)
}

// ServeListener is Serve on a listener the caller opened (to fail before
// attaching when the address is taken, or to use port 0 in tests). It
// closes ln.
func (e *Exporter) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           e.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
	}
	stop, shut := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(shut)
		select {
		case <-ctx.Done():
		case <-stop:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
	e.log.Info("serving metrics", "addr", ln.Addr().String())
	err := srv.Serve(ln)
	close(stop)
	<-shut // Shutdown has waited for the scrapes in flight
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("metrics: %w", err)
}
