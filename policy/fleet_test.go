// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFleet(t *testing.T) {
	const rule = "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1, scope: fleet}\n"
	runParseCases(t, []parseCase{
		{name: "defaults", src: "fleet: {redis: redis://10.0.0.5:6379/0}\n" + rule,
			check: func(t *testing.T, p *Policy) {
				f := p.Fleet
				if f == nil || len(f.Redis) != 1 || f.Cluster || f.Namespace != "default" ||
					f.Sync != DefaultFleetSync || f.Fallback != FallbackLocal || f.PasswordFile != "" ||
					f.DebtHorizon != DefaultDebtHorizon || f.Share != defaultFleetShare() {
					t.Fatalf("fleet = %+v", f)
				}
				if p.Rules[0].Levels[0].Limit.Scope != ScopeFleet {
					t.Fatal("scope not fleet")
				}
			}},
		{name: "everything", src: "fleet:\n  redis: [rediss://a:6379, rediss://b:6380]\n  cluster: true\n" +
			"  password_file: pw\n  namespace: edge-eu\n  sync: 20ms\n  fallback: share\n  debt_horizon: 90s\n" + rule,
			check: func(t *testing.T, p *Policy) {
				f := p.Fleet
				if len(f.Redis) != 2 || !f.Cluster || f.Namespace != "edge-eu" || f.Sync != 20*time.Millisecond ||
					f.Fallback != FallbackShare || f.PasswordFile != "pw" || f.DebtHorizon != 90*time.Second {
					t.Fatalf("fleet = %+v", f)
				}
			}},
		{name: "window scope", src: "fleet: {redis: redis://h:1}\nrules:\n  - name: r\n    limit: {algorithm: fixed_window, packets: 5, window: 1s, scope: fleet}\n"},
		{name: "host scope is the default", src: "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1, scope: host}\n",
			check: func(t *testing.T, p *Policy) {
				if p.Fleet != nil || p.Rules[0].Levels[0].Limit.Scope != ScopeHost {
					t.Fatal("not host scope")
				}
			}},

		{name: "fleet scope without a fleet", src: rule, errs: []string{
			"p.yaml:3:66: rules[0].limit.scope: scope: fleet needs a fleet: section (the Redis the hosts share)"}},
		{name: "sliding window", src: "fleet: {redis: redis://h:1}\nrules:\n  - name: r\n    limit: {algorithm: sliding_window, packets: 5, window: 1s, scope: fleet}\n",
			errs: []string{"p.yaml:4:71: rules[0].limit.scope: scope: fleet works with token_bucket and fixed_window, not sliding_window"}},
		{name: "bad scope", src: "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1/s, burst: 1, scope: world}\n", errs: []string{
			`p.yaml:3:66: rules[0].limit.scope: unknown scope "world"; use host or fleet`}},
		{name: "redis missing", src: "fleet: {sync: 1s}\nrules: []\n", errs: []string{
			"p.yaml:1:8: fleet: redis is required: the Redis URL the fleet shares, e.g. redis: redis://10.0.0.5:6379/0"}},
		{name: "password in URL", src: "fleet: {redis: 'redis://u:secret@h:1'}\nrules: []\n", errs: []string{
			`p.yaml:1:16: fleet.redis: redis URL "redis://u@h:1" holds a password: put it in password_file or the REDIS_PASSWORD environment variable`}},
		{name: "scheme", src: "fleet: {redis: 'http://h:1'}\nrules: []\n", errs: []string{
			`p.yaml:1:16: fleet.redis: redis URL "http://h:1": the scheme must be redis:// or rediss:// (TLS)`}},
		{name: "port", src: "fleet: {redis: 'redis://h'}\nrules: []\n", errs: []string{
			`p.yaml:1:16: fleet.redis: redis URL "redis://h": expected host:port, e.g. redis://10.0.0.5:6379/0`}},
		{name: "db", src: "fleet: {redis: 'redis://h:1/99'}\nrules: []\n", errs: []string{
			`p.yaml:1:16: fleet.redis: redis URL "redis://h:1/99": the database "99" is not 0 to 15`}},
		{name: "seeds need cluster", src: "fleet: {redis: ['redis://a:1', 'redis://b:1']}\nrules: []\n", errs: []string{
			"p.yaml:1:16: fleet.redis: several URLs are seed nodes of a Redis Cluster: add cluster: true"}},
		{name: "sync range", src: "fleet: {redis: redis://h:1, sync: 11s}\nrules: []\n", errs: []string{
			"p.yaml:1:35: fleet.sync: sync must be 10ms to 10s, got 11s"}},
		{name: "namespace", src: "fleet: {redis: redis://h:1, namespace: 'a b'}\nrules: []\n", errs: []string{
			`p.yaml:1:40: fleet.namespace: namespace "a b": 1-64 letters, digits, '_', '.', '-', starting with a letter or digit`}},
		{name: "fallback", src: "fleet: {redis: redis://h:1, fallback: drop}\nrules: []\n", errs: []string{
			`p.yaml:1:39: fleet.fallback: unknown fallback "drop"; use local or share`}},
		{name: "unknown field", src: "fleet: {redis: redis://h:1, password: x}\nrules: []\n", errs: []string{
			`p.yaml:1:29: fleet: unknown field "password"; allowed: redis, cluster, password_file, namespace, sync, fallback, debt_horizon, share, report_at, share_hold`}},
		{name: "share", src: "fleet: {redis: redis://h:1, share: 25%, report_at: 0.2, share_hold: 30s}\n" + rule,
			check: func(t *testing.T, p *Policy) {
				if s := p.Fleet.Share; s.Off || s.Fraction != 0.25 || s.ReportAt != 0.2 || s.Hold != 30*time.Second {
					t.Fatalf("share = %+v", s)
				}
			}},
		{name: "share off", src: "fleet: {redis: redis://h:1, share: off}\n" + rule,
			check: func(t *testing.T, p *Policy) {
				if !p.Fleet.Share.Off {
					t.Fatalf("share = %+v", p.Fleet.Share)
				}
			}},
		{name: "share range", src: "fleet: {redis: redis://h:1, share: 150%}\nrules: []\n", errs: []string{
			`p.yaml:1:36: fleet.share: share "150%": a share from 0.1% to 100%, like 25% or 0.25`}},
		{name: "report_at range", src: "fleet: {redis: redis://h:1, report_at: 0}\nrules: []\n", errs: []string{
			`p.yaml:1:40: fleet.report_at: report_at "0": a share from 1% to 100%, like 50% or 0.5`}},
		{name: "share_hold under two syncs", src: "fleet: {redis: redis://h:1, sync: 1s, share_hold: 1500ms}\nrules: []\n", errs: []string{
			`p.yaml:1:51: fleet.share_hold: share_hold 1.5s is shorter than two syncs (2s): keys would leave the exchange between two syncs`}},
		{name: "debt horizon range", src: "fleet: {redis: redis://h:1, debt_horizon: 500ms}\nrules: []\n", errs: []string{
			"p.yaml:1:43: fleet.debt_horizon: debt_horizon must be 1s to 24h0m0s, got 500ms"}},
	})
}

// The password file resolves against the policy's directory; Describe
// prints the fleet and each fleet level's bound, never a password.
func TestFleetDescribe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	src := "fleet: {redis: redis://h:1, password_file: pw}\n" +
		"rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000, scope: fleet}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fleet.PasswordFile != filepath.Join(dir, "pw") {
		t.Fatalf("password file %q", p.Fleet.PasswordFile)
	}
	var b strings.Builder
	p.Describe(&b)
	for _, want := range []string{
		"token_bucket 1000 pkt/s burst 2000 scope fleet",
		"fleet bound: over any time t the fleet admits at most 2000 + rate x t + N x 100 pkt",
		"fleet: Redis [redis://h:1] (cluster false), namespace default, sync every 100ms, fallback local, debt horizon 10m0s",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Describe lacks %q:\n%s", want, b.String())
		}
	}
}

func TestFleetScopeNotForUnparsed(t *testing.T) {
	runParseCases(t, []parseCase{{name: "unparsed fleet limit",
		src:  "fleet: {redis: redis://h:1}\nunparsed: {limit: {algorithm: token_bucket, rate: 1/s, burst: 1, scope: fleet}}\nrules: []\n",
		errs: []string{"p.yaml:2:19: unparsed.limit: scope: fleet is for rules' limits; the unparsed limit is this host's"}}})
}
