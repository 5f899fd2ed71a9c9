// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/metrics"
)

// printSource writes what one interface's limiter holds for addr
// (`status --source`), from the report GET /v1/sources/ADDR serves.
func printSource(w io.Writer, r metrics.SourceReport, addr netip.Addr) {
	port := ""
	if r.Port != 0 {
		port = fmt.Sprintf(", port %d", r.Port)
	}
	fmt.Fprintf(w, "%s: source %s%s\n", r.Interface, addr, port)
	switch r.List {
	case "allow":
		fmt.Fprintln(w, "  allow list: allowed, never limited (no rule or ban judges it)")
	case "deny":
		fmt.Fprintln(w, "  deny list: denied, every packet dropped before the rules")
	default:
		fmt.Fprintln(w, "  allow/deny lists: not listed")
	}
	if len(r.Bans) == 0 {
		fmt.Fprintln(w, "  bans: none")
	}
	for i, b := range r.Bans {
		what := "banned"
		if i > 0 {
			what = "also covered by"
		}
		shadow := ""
		if b.Shadow {
			shadow = " (shadow: counted, not enforced)"
		}
		fmt.Fprintf(w, "  %s: %s by %s, %.0fs left, %d packets dropped, reason %q%s\n", what, b.Prefix,
			termsafe.Escape(b.Origin), b.SecondsLeft, b.Dropped, termsafe.Escape(b.Reason), shadow)
	}
	if len(r.Rules) == 0 {
		fmt.Fprintln(w, "  rules: none can match it")
		return
	}
	depends := ""
	if len(r.Undecided) > 0 {
		depends = "; which one a packet meets first also depends on its " + strings.Join(r.Undecided, ", ")
	}
	fmt.Fprintf(w, "  rules it can match, in policy order%s:\n", depends)
	for _, rule := range r.Rules {
		fmt.Fprintf(w, "    %s (action %s)\n", termsafe.Escape(rule.Rule), rule.Action)
		for _, lv := range rule.Levels {
			key := lv.Key
			if lv.Prefix != "" {
				key += " " + lv.Prefix
			}
			fmt.Fprintf(w, "      level %d, key %s, %s: %s\n", lv.Level, key, lv.Algorithm, levelState(lv))
		}
	}
}

// levelState says what a level's state allows, in words.
func levelState(lv metrics.SourceLevelJSON) string {
	if lv.Remaining == nil {
		return fmt.Sprintf("limit %d %s per key; one state per port: give --port", lv.Limit, lv.Unit)
	}
	s := fmt.Sprintf("%d of %d %s left", *lv.Remaining, lv.Limit, lv.Unit)
	if *lv.RetryAfter > 0 {
		s += fmt.Sprintf(", admitted again in %.3fs", *lv.RetryAfter)
	}
	if *lv.Reset > 0 {
		s += fmt.Sprintf(", whole again in %.3fs", *lv.Reset)
	}
	switch {
	case !lv.Tracked && lv.Sketch:
		s += " (not tracked: counted by the admission sketch, uncharged until it sends a few packets in 16.8 ms)"
	case !lv.Tracked:
		s += " (not tracked: no state, a fresh key)"
	}
	return s
}
