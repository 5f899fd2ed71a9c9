// Package metrics exports the limiter's counters to Prometheus. A collector
// reads the per-CPU counter maps of every registered interface when scraped
// and sums them: there is no polling loop, and a scrape costs a few map
// lookups per rule in force, never a walk of the source table. The same
// snapshots feed `xdplimit top`. docs/metrics.md describes every family.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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

// Check reads the maps of every registered interface, as a scrape would,
// and returns why any of them cannot be read. No interface at all is an
// error too: nothing is being enforced that the exporter could show.
func (e *Exporter) Check() error {
	ts := e.coll.list()
	if len(ts) == 0 {
		return errors.New("no interface registered")
	}
	var errs []error
	for _, t := range ts {
		if _, err := Read(t.iface, t.l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Handler serves /metrics (the registry) and /healthz (200 "ok" when every
// registered interface's maps are readable, else 503 with the reason).
func (e *Exporter) Handler() http.Handler {
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		// One unreadable interface must not hide the others: it shows as
		// xdplimit_up 0 and in /healthz.
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            slog.NewLogLogger(e.log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(e.reg, metrics))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := e.Check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintln(w, `<html><head><title>xdplimit</title></head><body><h1>xdplimit</h1>`+
			`<p><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a></p></body></html>`)
	})
	return mux
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
