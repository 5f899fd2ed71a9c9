// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/xdplimit/xdplimit/agent"
)

// autopilotAsk bounds status's question to the attach process: status
// reports on the limiter whether or not the process answers.
const autopilotAsk = 2 * time.Second

// autopilotOf is the autopilot of iface as its attach process reports it;
// nil when no process answers or its policy has no autopilot.
func autopilotOf(ctx context.Context, iface string, owner bool) *agent.AutopilotView {
	if !owner {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, autopilotAsk)
	defer cancel()
	v, err := agent.AskAutopilot(ctx, iface)
	if err != nil || !v.On {
		return nil
	}
	return &v
}

// printAutopilotSummary is status's lines of the autopilot: one for it, one
// for each generated rule (whose counters are in the rule table above).
func printAutopilotSummary(w io.Writer, v *agent.AutopilotView) {
	if v == nil {
		return
	}
	fmt.Fprintf(w, "  autopilot: %s, %s, %s in progress (xdplimit autopilot list %s)\n",
		v.Mode, plural(len(v.Rules), "generated rule"), plural(len(v.Attacks), "attack"), v.Interface)
	for _, r := range v.Rules {
		fmt.Fprintf(w, "    %s: %s: %s, %s old\n", r.Name, r.Dest, r.Fingerprint,
			time.Duration(r.AgeSeconds*float64(time.Second)).Round(time.Second))
	}
}
