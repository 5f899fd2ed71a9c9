// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCrowdSecSection(t *testing.T) {
	runParseCases(t, []parseCase{
		{name: "absent", src: "rules: []\n", check: func(t *testing.T, p *Policy) {
			if p.CrowdSec != nil {
				t.Fatalf("crowdsec = %+v", p.CrowdSec)
			}
		}},
		{name: "defaults", src: "crowdsec: {url: http://127.0.0.1:8080, api_key_file: cs.key}\nrules: []\n",
			check: func(t *testing.T, p *Policy) {
				c := p.CrowdSec
				if c == nil || c.URL != "http://127.0.0.1:8080" || !strings.HasSuffix(c.APIKeyFile, "cs.key") ||
					c.Interval != DefaultCrowdSecInterval || c.Resync != DefaultCrowdSecResync || !slices.Equal(c.Types, []string{"ban"}) ||
					!slices.Equal(c.Scopes, []string{"ip", "range"}) || c.Origins != nil {
					t.Fatalf("crowdsec = %+v", c)
				}
			}},
		{name: "everything", src: `crowdsec:
  url: https://lapi.example:8443/
  api_key_file: /etc/xdplimit/cs.key
  interval: 2s
  resync: 1h
  types: [BAN, captcha]
  scopes: [Ip]
  origins: [crowdsec, cscli]
  scenarios_containing: [ssh]
  scenarios_not_containing: [test, http]
rules: []
`, check: func(t *testing.T, p *Policy) {
			c := p.CrowdSec
			if c.Interval != 2*time.Second || c.Resync != time.Hour || !slices.Equal(c.Types, []string{"ban", "captcha"}) ||
				!slices.Equal(c.Scopes, []string{"ip"}) || !slices.Equal(c.Origins, []string{"crowdsec", "cscli"}) ||
				!slices.Equal(c.ScenariosContaining, []string{"ssh"}) ||
				!slices.Equal(c.ScenariosNotContaining, []string{"test", "http"}) || c.APIKeyFile != "/etc/xdplimit/cs.key" {
				t.Fatalf("crowdsec = %+v", c)
			}
		}},

		{name: "url missing", src: "crowdsec: {api_key_file: k}\nrules: []\n", errs: []string{
			`p.yaml:1:11: crowdsec: url is required: the Local API's, e.g. url: http://127.0.0.1:8080`}},
		{name: "key missing", src: "crowdsec: {url: http://127.0.0.1:8080}\nrules: []\n", errs: []string{
			"p.yaml:1:11: crowdsec: api_key_file is required: a file holding the key `cscli bouncers add NAME` printed"}},
		{name: "scheme", src: "crowdsec: {url: 'ftp://h:1', api_key_file: k}\nrules: []\n", errs: []string{
			`p.yaml:1:17: crowdsec.url: LAPI URL "ftp://h:1": the scheme must be http:// or https://`}},
		{name: "credentials", src: "crowdsec: {url: 'http://u:pw@h:1', api_key_file: k}\nrules: []\n", errs: []string{
			`p.yaml:1:17: crowdsec.url: LAPI URL "http://u@h:1" holds credentials: the bouncer's key goes in api_key_file`}},
		{name: "query", src: "crowdsec: {url: 'http://h:1/?key=x', api_key_file: k}\nrules: []\n", errs: []string{
			`p.yaml:1:17: crowdsec.url: LAPI URL "http://h:1/?key=x": options are not taken from the URL; use the crowdsec: fields`}},
		{name: "interval", src: "crowdsec: {url: 'http://h:1', api_key_file: k, interval: 100ms}\nrules: []\n", errs: []string{
			`p.yaml:1:58: crowdsec.interval: interval must be 1s to 1h0m0s, got 100ms`}},
		{name: "resync", src: "crowdsec: {url: 'http://h:1', api_key_file: k, resync: 48h}\nrules: []\n", errs: []string{
			`p.yaml:1:56: crowdsec.resync: resync must be 1s to 24h0m0s, got 48h`}},
		{name: "scope", src: "crowdsec: {url: 'http://h:1', api_key_file: k, scopes: [ip, country]}\nrules: []\n", errs: []string{
			`p.yaml:1:61: crowdsec.scopes[1]: scope "country": only ip and range can be banned`}},
		{name: "comma", src: "crowdsec: {url: 'http://h:1', api_key_file: k, origins: ['a,b']}\nrules: []\n", errs: []string{
			`p.yaml:1:58: crowdsec.origins[0]: "a,b": empty, or holds a comma or a control character`}},
		{name: "empty list", src: "crowdsec: {url: 'http://h:1', api_key_file: k, types: []}\nrules: []\n", errs: []string{
			`p.yaml:1:55: crowdsec.types: empty list; leave the field out instead`}},
		{name: "unknown field", src: "crowdsec: {url: 'http://h:1', api_key_file: k, key: x}\nrules: []\n", errs: []string{
			`p.yaml:1:48: crowdsec: unknown field "key"; allowed: url, api_key_file, interval, resync, types, scopes, origins, scenarios_containing, scenarios_not_containing`}},
	})
}

// `policy check` prints the section, defaults applied, and the bans: limits
// the feed obeys.
func TestCrowdSecDescribe(t *testing.T) {
	p, err := Parse("/etc/xdplimit/p.yaml", []byte("crowdsec: {url: 'http://127.0.0.1:8080', api_key_file: cs.key, origins: [cscli]}\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	p.Describe(&b)
	for _, want := range []string{
		"crowdsec: LAPI http://127.0.0.1:8080, key from /etc/xdplimit/cs.key, every 10s, resynchronised every 10m; types ban, scopes ip,range; origins cscli\n",
		"bans from the fleet and feeds: no wider than ipv4 /8, ipv6 /32",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe:\n%s\nwant %q", b.String(), want)
		}
	}
}
