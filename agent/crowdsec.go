// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/crowdsec"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/policy"
)

// crowdsecRunner runs the CrowdSec bouncer of an attach beside the
// datapath: started by a crowdsec: section, kept by a reload that leaves
// the section and the key as they were, restarted (with a fresh
// resynchronisation) by one that changes either, stopped by one that drops
// the section. The bans it applied stay in the table when it stops, and end
// on their own. A LAPI that cannot be reached never stops enforcement: the
// bouncer backs off and resynchronises when the LAPI answers again.
type crowdsecRunner struct {
	a    *loader.Attachment
	log  *slog.Logger
	reg  prometheus.Registerer
	dial dialFunc // nil: the default dialer

	mu     sync.Mutex
	conf   *policy.CrowdSec
	key    string
	b      *crowdsec.Bouncer
	colls  []prometheus.Collector
	cancel context.CancelFunc
	done   chan struct{}
}

func newCrowdSecRunner(a *loader.Attachment, log *slog.Logger, reg prometheus.Registerer, dial dialFunc) *crowdsecRunner {
	return &crowdsecRunner{a: a, log: log, reg: reg, dial: dial}
}

// apply brings the bouncer in line with the crowdsec: section in force. A
// key file that cannot be read leaves a running bouncer as it is.
func (r *crowdsecRunner) apply(c *policy.CrowdSec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c == nil {
		r.stopLocked()
		return nil
	}
	key, err := crowdsec.ReadKeyFile(c.APIKeyFile)
	if err != nil {
		return err
	}
	if r.b != nil && reflect.DeepEqual(c, r.conf) && key == r.key {
		return nil
	}
	r.stopLocked()
	iface := r.a.Interface
	log := r.log.With("interface", iface)
	m := banfeed.NewMetrics(crowdsec.Source, iface)
	gate := banfeed.NewGate(crowdsec.Source, m, func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) })
	b, err := crowdsec.New(crowdsec.Config{URL: c.URL, APIKey: key, Interval: c.Interval, Resync: c.Resync, Types: c.Types, Scopes: c.Scopes,
		Origins: c.Origins, ScenariosContaining: c.ScenariosContaining, ScenariosNotContaining: c.ScenariosNotContaining,
		HTTPClient: r.httpClient(), Log: log}, crowdsec.NewTable(r.a.Limiter, gate, nil))
	if err != nil {
		return err
	}
	r.colls = append([]prometheus.Collector{b.Collector(prometheus.Labels{"interface": iface})}, m.Collectors()...)
	if r.reg != nil {
		for _, coll := range r.colls {
			if err := r.reg.Register(coll); err != nil {
				log.Warn("crowdsec metrics unavailable", "err", err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.conf, r.key, r.b, r.cancel, r.done = c, key, b, cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		_ = b.Run(ctx) // returns when ctx ends
	}(r.done)
	log.Info("crowdsec bouncer started", "lapi", c.URL, "interval", c.Interval, "resync", c.Resync, "types", c.Types, "scopes", c.Scopes)
	return nil
}

// httpClient is the bouncer's client: the test's dialer when it has one,
// and never following a redirect (the key would go along).
func (r *crowdsecRunner) httpClient() *http.Client {
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if r.dial != nil {
		hc.Transport = &http.Transport{DialContext: r.dial}
	}
	return hc
}

func (r *crowdsecRunner) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

// stopLocked ends the bouncer; a poll in flight finishes first, so nothing
// writes the ban table after the maps close.
func (r *crowdsecRunner) stopLocked() {
	if r.b == nil {
		return
	}
	r.cancel()
	<-r.done
	if r.reg != nil {
		for _, coll := range r.colls {
			r.reg.Unregister(coll)
		}
	}
	r.log.Info("crowdsec bouncer stopped; its bans stay until they end", "interface", r.a.Interface)
	r.b, r.conf, r.key, r.colls = nil, nil, "", nil
}
