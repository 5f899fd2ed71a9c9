// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdplimit/xdplimit/autopilot"
	"github.com/xdplimit/xdplimit/conversation"
	"github.com/xdplimit/xdplimit/crowdsec"
	"github.com/xdplimit/xdplimit/droplog"
	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// Tests of deploy/: the alert rules, the dashboard and the systemd unit
// refer to what the collector exports and pass their tools' checks.

const deployDir = "../deploy"

// tool finds an external program: missing is a failure in CI and a skip
// elsewhere.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	testutil.Require(t, err == nil, "%s not found (Debian package %s; run bash scripts/deps.sh)", name, pkg)
	return path
}

// exported lists the xdplimit_ families the exporter can produce.
func exported(t testing.TB) []string {
	t.Helper()
	re := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	var names []string
	for _, d := range allDescs {
		names = append(names, re.FindStringSubmatch(d.String())[1])
	}
	// The fleet sync's, the drop log's, the conversation checks', the
	// CrowdSec bouncer's and the autopilot's series, registered beside the
	// exporter's by attach.
	ch := make(chan *prometheus.Desc, 64)
	fleet.NewMetrics("x").Describe(ch)
	droplog.NewMetrics("x").Describe(ch)
	conversation.NewMetrics().Describe(ch)
	autopilot.NewMetrics("x").Describe(ch)
	if b, err := crowdsec.New(crowdsec.Config{URL: "http://127.0.0.1:1", APIKey: "k"}, nil); err == nil {
		b.Collector(nil).Describe(ch)
	}
	close(ch)
	for d := range ch {
		names = append(names, re.FindStringSubmatch(d.String())[1])
	}
	return append(names, "xdplimit_policy_reloads_total")
}

var metricRef = regexp.MustCompile(`\bxdplimit_[a-z_]+\b`)

// checkRefs fails for every xdplimit_ name in text the exporter does not
// produce (a typo in a query never errors, it just shows nothing).
func checkRefs(t *testing.T, where, text string) {
	t.Helper()
	known := exported(t)
	for _, ref := range metricRef.FindAllString(text, -1) {
		if !slices.Contains(known, ref) {
			t.Errorf("%s refers to %s, which the exporter does not produce", where, ref)
		}
	}
}

func TestExportedNames(t *testing.T) {
	for _, n := range exported(t) {
		if !regexp.MustCompile(`^xdplimit_[a-z_]+$`).MatchString(n) {
			t.Errorf("bad family name %q", n)
		}
	}
	// docs/metrics.md documents every family.
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range exported(t) {
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("docs/metrics.md does not document %s", n)
		}
	}
	checkRefs(t, "docs/metrics.md", string(doc))
	logging, err := os.ReadFile("../docs/logging.md")
	if err != nil {
		t.Fatal(err)
	}
	checkRefs(t, "docs/logging.md", string(logging))
}

func TestAlertRules(t *testing.T) {
	rules, err := filepath.Abs(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	checkRefs(t, "alerts.yml", string(text))
	promtool := tool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rules, err, out)
	}
	tf := filepath.Join(t.TempDir(), "alerts_test.yml")
	if err := os.WriteFile(tf, []byte(fmt.Sprintf(alertTests, rules)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(promtool, "test", "rules", tf).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestDashboard parses the dashboard, checks the metric names its queries
// use, and has promtool parse every query (Grafana's variables substituted)
// as a recording rule.
func TestDashboard(t *testing.T) {
	dash := readDashboard(t)
	if dash.UID == "" || dash.Title == "" {
		t.Error("dashboard without uid or title")
	}
	exprs := dashboardQueries(t, dash)
	for _, v := range dash.Templating.List {
		checkRefs(t, "dashboard variable "+v.Name, v.Definition)
	}
	for _, e := range exprs {
		checkRefs(t, "dashboard", e)
	}
	for _, want := range []string{"xdplimit_packets_total", "xdplimit_tracked_sources", "xdplimit_source_table_capacity",
		"xdplimit_source_inserts_total", "xdplimit_source_table_evictions_total",
		"xdplimit_source_table_insert_failures_total", "xdplimit_policy_reloads_total",
		"xdplimit_syncookie_acks_total", "xdplimit_syncookie_events_total", "xdplimit_autopilot_rules",
		"xdplimit_autopilot_attacks_active", "xdplimit_autopilot_decisions_total"} {
		if !slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("the dashboard shows no %s", want)
		}
	}
	checkQueriesParse(t, exprs)
}

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos struct{ X, Y, W, H int }
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Annotations struct {
		List []struct {
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "xdplimit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("xdplimit.json: %v", err)
	}
	return dash
}

// dashboardQueries checks the panels' ids, places and queries, and
// returns every query of the panels and annotations.
func dashboardQueries(t *testing.T, dash dashboard) []string {
	t.Helper()
	var exprs []string
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W == 0 {
			t.Errorf("panel %q: bad grid position %+v", p.Title, p.GridPos)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, a := range dash.Annotations.List {
		if a.Expr != "" {
			exprs = append(exprs, a.Expr)
		}
	}
	return exprs
}

// checkQueriesParse has promtool parse each query, Grafana's variables
// substituted, as a recording rule.
func checkQueriesParse(t *testing.T, exprs []string) {
	t.Helper()
	promtool := tool(t, "promtool", "prometheus")
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$instance", ".*", "$interface", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(vars.Replace(e)) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
	}
	f := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(f, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Fatalf("dashboard queries do not parse: %v\n%s\n%s", err, out, rules.String())
	}
}

// TestSystemdUnit checks the unit with systemd-analyze verify (on a copy
// whose ExecStart binary exists, since xdplimit is not installed here) and
// the settings the brief of the unit depends on.
func TestSystemdUnit(t *testing.T) {
	testutil.HostOnly(t, "systemd-analyze verify resolves the unit's dependencies against the host's installed units")
	b, err := os.ReadFile(filepath.Join(deployDir, "systemd", "xdplimit@.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"Type=simple",
		// The package's path; every start waits for the interface.
		"ExecStart=/usr/sbin/xdplimit attach %i --policy /etc/xdplimit/%i.yaml --wait-for-interface",
		// The reload waits for the answer and fails on a refused policy.
		"ExecReload=/usr/sbin/xdplimit reload %i",
		"Restart=on-failure",
		// systemd never gives up restarting.
		"StartLimitIntervalSec=0",
		"CapabilityBoundingSet=CAP_BPF CAP_NET_ADMIN CAP_SYS_ADMIN",
		"ReadWritePaths=/sys/fs/bpf",
		"RuntimeDirectory=xdplimit",
	} {
		if !strings.Contains(unit, "\n"+want+"\n") {
			t.Errorf("unit lacks %q", want)
		}
	}
	analyze := tool(t, "systemd-analyze", "systemd")
	dir := t.TempDir()
	stub := filepath.Join(dir, "xdplimit")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	copy := strings.ReplaceAll(unit, "/usr/sbin/xdplimit", stub)
	// verify needs an instance; the policy path only has to be well formed.
	inst := filepath.Join(dir, "xdplimit@eth0.service")
	if err := os.WriteFile(inst, []byte(copy), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", inst)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice")
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
