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
func exported() []string {
	re := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	var names []string
	for _, d := range allDescs {
		names = append(names, re.FindStringSubmatch(d.String())[1])
	}
	// The fleet sync's, the drop log's and the CrowdSec bouncer's series,
	// registered beside the exporter's by attach.
	ch := make(chan *prometheus.Desc, 64)
	fleet.NewMetrics("x").Describe(ch)
	droplog.NewMetrics("x").Describe(ch)
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
	known := exported()
	for _, ref := range metricRef.FindAllString(text, -1) {
		if !slices.Contains(known, ref) {
			t.Errorf("%s refers to %s, which the exporter does not produce", where, ref)
		}
	}
}

func TestExportedNames(t *testing.T) {
	for _, n := range exported() {
		if !regexp.MustCompile(`^xdplimit_[a-z_]+$`).MatchString(n) {
			t.Errorf("bad family name %q", n)
		}
	}
	// docs/metrics.md documents every family.
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range exported() {
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

// alertTests are promtool's unit tests of the alerts on synthetic series,
// the rule file's path left to fill in: each alert fires on the condition
// it is for, and only then.
const alertTests = `rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # 600 drops/min = 10/s: below the sustained-drops threshold.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="dns",verdict="drop"}'
        values: '0+600x40'
      # 12000/min = 200/s: above it.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="_deny",verdict="drop"}'
        values: '0+12000x40'
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="dns",verdict="pass"}'
        values: '0+60000x40'
      - series: 'xdplimit_up{instance="h1",interface="eth0"}'
        values: '1 1 0 0 0 0 0'
      - series: 'xdplimit_tracked_sources{instance="h1",interface="eth0"}'
        values: '1000000x40'
      - series: 'xdplimit_source_table_capacity{instance="h1",interface="eth0"}'
        values: '1048576x40'
      - series: 'xdplimit_source_table_evictions_total{instance="h1",interface="eth0"}'
        values: '0+100x40'
      - series: 'xdplimit_source_table_insert_failures_total{instance="h1",interface="eth0"}'
        values: '0x10 3x30'
      - series: 'xdplimit_policy_reloads_total{instance="h1",interface="eth0",result="failure"}'
        values: '0x10 1x30'
      - series: 'xdplimit_policy_reloads_total{instance="h1",interface="eth0",result="success"}'
        values: '0x10 0x30'
      # 120000/min = 2000 SYNs/s answered with cookies: a flood.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="web-syn",verdict="syncookie"}'
        values: '0+120000x40'
      # 600/min = 10/s: a trickle, no flood.
      - series: 'xdplimit_packets_total{instance="h1",interface="eth0",rule="ssh-syn",verdict="syncookie"}'
        values: '0+600x40'
      # Cookie ACKs: 10/s valid, 1000/s invalid for web-syn (an ACK flood);
      # only invalid ones at ssh-syn, but 1/s.
      - series: 'xdplimit_syncookie_acks_total{instance="h1",interface="eth0",rule="web-syn",result="valid"}'
        values: '0+600x40'
      - series: 'xdplimit_syncookie_acks_total{instance="h1",interface="eth0",rule="web-syn",result="invalid"}'
        values: '0+60000x40'
      - series: 'xdplimit_syncookie_acks_total{instance="h1",interface="eth0",rule="ssh-syn",result="invalid"}'
        values: '0+60x40'
    alert_rule_test:
      - eval_time: 5m
        alertname: XdplimitMapsUnreadable
        exp_alerts:
          - exp_labels: {severity: critical, instance: h1, interface: eth0}
            exp_annotations:
              summary: "xdplimit on h1 eth0 cannot read its BPF maps"
              description: "See /healthz on the exporter for the reason. Enforcement may have stopped."
      - eval_time: 20m
        alertname: XdplimitSustainedDrops
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, rule: _deny}
            exp_annotations:
              summary: "xdplimit drops 200 packets/s on eth0 (rule _deny)"
              description: "Sustained drops for 10 minutes on h1. Check ` + "`xdplimit top eth0`" + `: an attack, or a limit below legitimate traffic."
      - eval_time: 5m
        alertname: XdplimitSustainedDrops
        exp_alerts: []
      - eval_time: 20m
        alertname: XdplimitSourceTableNearFull
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0}
            exp_annotations:
              summary: "xdplimit source table on eth0 is 95.37%% full and evicting"
              description: "Evicted sources lose their state and get a fresh burst: a spoofed flood can wash out real limits. Raise --max-sources."
      - eval_time: 9m
        alertname: XdplimitSourceInsertFailures
        exp_alerts: []
      - eval_time: 12m
        alertname: XdplimitSourceInsertFailures
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0}
            exp_annotations:
              summary: "xdplimit on eth0 dropped 3 packets in 5m: their sources could not be tracked"
      - eval_time: 9m
        alertname: XdplimitPolicyReloadFailed
        exp_alerts: []
      - eval_time: 12m
        alertname: XdplimitPolicyReloadFailed
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, result: failure}
            exp_annotations:
              summary: "xdplimit policy reload failed on h1 eth0"
              description: "The previous policy stays in force. See the attach logs (journalctl -u xdplimit@eth0)."
      - eval_time: 30m
        alertname: XdplimitPolicyReloadFailed
        exp_alerts: []
      - eval_time: 4m
        alertname: XdplimitSynFloodAnswered
        exp_alerts: []
      - eval_time: 20m
        alertname: XdplimitSynFloodAnswered
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, rule: web-syn}
            exp_annotations:
              summary: "xdplimit answers 2k SYNs/s with cookies on eth0 (rule web-syn)"
              description: "` + synFloodRunbook + `"
      - eval_time: 4m
        alertname: XdplimitInvalidCookieAcks
        exp_alerts: []
      - eval_time: 20m
        alertname: XdplimitInvalidCookieAcks
        exp_alerts:
          - exp_labels: {severity: warning, instance: h1, interface: eth0, rule: web-syn}
            exp_annotations:
              summary: "99.01%% of the cookie ACKs on eth0 (rule web-syn) are invalid"
              description: "` + ackFloodRunbook + `"
`

// The SYN cookie alerts' descriptions as promtool renders them for h1 eth0,
// escaped for a YAML double-quoted string.
const (
	synFloodRunbook = `A SYN flood on h1 eth0 has been answered from XDP for 5 minutes: ` +
		`SYNs over rule web-syn's limit get a SYN-ACK carrying a SYN cookie and never reach the ` +
		`listener. What to check: real clients still connect (xdplimit_syncookie_acks_total{result=\"valid\"} ` +
		`near its usual rate; ` + "`xdplimit status eth0`" + `); where the flood comes from ` +
		`(` + "`xdplimit top eth0`" + `, the drop log's syncookie lines); the uplink, which sends one ` +
		`SYN-ACK back per SYN: if it saturates, have the flood filtered upstream. Nothing to do on the host ` +
		`while the valid ACKs keep up.`
	ackFloodRunbook = `ACKs to a listening port on h1 carry wrong SYN cookies and are dropped in XDP ` +
		`(the drop log's bad_cookie lines): an ACK flood against a port rule web-syn answers ` +
		`SYNs for, or clients answering SYN-ACKs minutes late. They never reach the listener, and cost a ` +
		`socket lookup and a cookie check each. If their rate grows, limit ACKs to the port with a rule of ` +
		`their own (tcp_flags: [ack], docs/policy.md \"SYN cookies\"), and have the flood filtered upstream.`
)

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
		"xdplimit_syncookie_acks_total", "xdplimit_syncookie_events_total"} {
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
