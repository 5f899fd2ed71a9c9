// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"time"
)

// fleetScaleBench runs the million-source load with local shares and with
// share: off. The second is run for less simulated time: each of its syncs
// exchanges about 100,000 keys a host and takes seconds.
func fleetScaleBench(e *env, quick bool) ([]*fleetScale, error) {
	srv, err := e.startRedis()
	if err != nil {
		return nil, err
	}
	runs := []*fleetScale{
		{design: "local shares (share: auto)", dur: 20 * time.Second, moveAt: 10 * time.Second},
		{design: "every key exchanged (share: off)", extra: "  share: off\n", dur: 2 * time.Second},
	}
	if quick {
		runs[0].dur, runs[0].moveAt, runs[1].dur = 4*time.Second, 2*time.Second, time.Second
	}
	for _, s := range runs {
		e.Logf("fleetscale: %s, %v", s.design, s.dur)
		if err := s.run(e, srv); err != nil {
			s.err = errString(err)
			e.Logf("fleetscale: %v", err)
		}
		if err := e.ctx.Err(); err != nil {
			return runs, err
		}
	}
	return runs, nil
}

func (r *report) writeFleetScale(b *strings.Builder) {
	if len(r.FleetScale) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("### The fleet at a million sources\n\n")
	p("Three simulated hosts (the real program with an injected clock, the real engines, one redis-server),\n")
	p("a per-source fleet token bucket of %d/s burst %d, sync %v. Each host walks %d light sources at one\n", scaleRate, scaleBurst, scaleSync, scaleSources)
	p("packet a second each (every source gets a state entry at its first packet), and %d heavy sources each\n", scaleHeavy)
	p("send one packet every %v to every host (%.0f× the limit). With local shares the heavy sources change\n", scaleStep, float64(3*time.Second/scaleStep)/scaleRate)
	p("halfway. The design without local shares (`share: off`, every key that admits is exchanged) runs on\n")
	p("the same load for less simulated time: its syncs take seconds each. Heavy ratios are admitted /\n")
	p("(burst + rate × t) per heavy source over its period; the first second after the change is the new\n")
	p("sources' first second against burst + rate × 1 s.\n\n")
	p("| Design | Simulated | Syncs (3 hosts) | Over %v | Sync wall median / max | Keys exchanged per sync and host, median / max | Unsynced | Redis CPU per sync | Heavy: min / median / max | Moved: min / median / max | Moved, first second: median / max | Light refused |\n", scaleSync)
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.FleetScale {
		if s.err != "" {
			p("| %s | %v | failed: %s | | | | | | | | | |\n", s.design, s.dur, s.err)
			continue
		}
		perSync := 0.0
		if s.syncs > 0 {
			perSync = s.redisCPU / float64(s.syncs) * 3 // a sync round is 3 host syncs
		}
		p("| %s | %v | %d | %d | %.1f / %.1f ms | %.0f / %.0f | %d | %.2f ms | %s | %s | %s | %d of %d |\n",
			s.design, s.dur, s.syncs, s.slow, 1e3*s.wall.median(), 1e3*s.wall.max(), s.exch.median(), s.exch.max(),
			s.unsynced, 1e3*perSync, triple(s.heavy), triple(s.moved), pair(s.firstSecond), s.lightRefused, s.lightSent)
	}
	p("\nRedis CPU per sync is per round of the three hosts' syncs. Light refused counts what the rule refused of\n")
	p("the light walk beyond its packets to the heavy sources' addresses, present and past (the walk visits them\n")
	p("too, and a past heavy source stays in debt for up to a burst after its flood).\n\n")
}

func triple(s sample) string {
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f / %.3f / %.3f", s.min(), s.median(), s.max())
}

func pair(s sample) string {
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f / %.3f", s.median(), s.max())
}

// fleetScaleTargets judges the local-share run.
func (r *report) fleetScaleTargets() []target {
	if len(r.FleetScale) == 0 {
		return nil
	}
	s := r.FleetScale[0]
	ts := []target{
		{what: "fleet at 3 × 1M sources, local shares: every sync within its interval"},
		{what: "fleet at 3 × 1M sources, local shares: each heavy source within 5% of burst + rate × t, no light source refused"},
		{what: "fleet at 3 × 1M sources, heavy sources changed: the new ones within 5% of burst + rate × t"},
		{what: "fleet at 3 × 1M sources, heavy sources changed: the new ones' first second within the local-share bound " +
			"(burst × 1.5 + rate × (1 s + 5 syncs), docs/fleet.md)"},
	}
	if s.err != "" {
		for i := range ts {
			ts[i].measured, ts[i].status = "-", "not measured"
		}
		return ts
	}
	ts[0].measured = fmt.Sprintf("%d of %d syncs over %v; max %.1f ms", s.slow, s.syncs, scaleSync, 1e3*s.wall.max())
	ts[0].status = met(s.slow == 0, "")
	ts[1].measured = fmt.Sprintf("heavy %s; light refused %d of %d", triple(s.heavy), s.lightRefused, s.lightSent)
	ts[1].status = met(len(s.heavy) > 0 && s.heavy.min() >= 0.95 && s.heavy.max() <= 1.05 && s.lightRefused == 0, "")
	ts[2].measured = fmt.Sprintf("moved %s; first second median / max %s", triple(s.moved), pair(s.firstSecond))
	ts[2].status = met(len(s.moved) > 0 && s.moved.min() >= 0.95 && s.moved.max() <= 1.05, "")
	bound := (1.5*scaleBurst + scaleRate*(1+5*scaleSync.Seconds())) / (scaleBurst + scaleRate)
	ts[3].measured = fmt.Sprintf("first second median / max %s of burst + rate × 1 s; the bound allows %.2f", pair(s.firstSecond), bound)
	ts[3].status = met(len(s.firstSecond) > 0 && s.firstSecond.max() <= bound, "")
	return ts
}
