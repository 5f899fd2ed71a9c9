// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"testing"
	"time"
)

func testRules(t *testing.T, cfg Config) *rules {
	t.Helper()
	cfg.URL, cfg.APIKey = "http://127.0.0.1:1", "k"
	_, r, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCheck(t *testing.T) {
	r := testRules(t, Config{})
	dec := func(scope, value, dur string) *Decision {
		return &Decision{ID: 7, Type: "ban", Scope: scope, Value: value, Duration: dur, Origin: "cscli", Scenario: "why"}
	}
	for _, c := range []struct {
		d      *Decision
		prefix string
		why    SkipReason
	}{
		{dec("Ip", "198.51.100.7", "1m59.5s"), "198.51.100.7/32", ""},
		{dec("ip", "2001:db8::1", "1h"), "2001:db8::1/128", ""},
		// As written: masking, mapped addresses and widths are the
		// gate's (Table).
		{dec("IP", "::ffff:192.0.2.10", "1h"), "::ffff:192.0.2.10/128", ""},
		{dec("Range", "192.0.2.77/24", "1h"), "192.0.2.77/24", ""},
		{dec("range", "::ffff:10.0.0.0/104", "1h"), "::ffff:10.0.0.0/104", ""},
		{dec("Range", "2001:db8::/32", "1h"), "2001:db8::/32", ""},
		{dec("Range", "0.0.0.0/0", "1h"), "0.0.0.0/0", ""},
		{dec("Ip", "fe80::1%eth0", "1h"), "", SkipValue},
		{dec("Ip", "192.0.2.0/24", "1h"), "", SkipValue},
		{dec("Ip", "", "1h"), "", SkipValue},
		{dec("Range", "192.0.2.1", "1h"), "", SkipValue},
		{dec("Range", "192.0.2.0/33", "1h"), "", SkipValue},
		{dec("Ip", "192.0.2.1", "0s"), "", SkipDuration},
		{dec("Ip", "192.0.2.1", "-1s"), "", SkipDuration},
		{dec("Ip", "192.0.2.1", "forever"), "", SkipDuration},
		{dec("Ip", "192.0.2.1", ""), "", SkipDuration},
		{dec("Country", "FR", "1h"), "", SkipScope},
		{dec("", "192.0.2.1", "1h"), "", SkipScope},
		{&Decision{Type: "captcha", Scope: "Ip", Value: "192.0.2.1", Duration: "1h"}, "", SkipType},
	} {
		b, why, err := r.check(c.d, false)
		if why != c.why || (why == "" && b.Prefix.String() != c.prefix) {
			t.Errorf("%+v: got %v %q (%v), want %s %q", *c.d, b.Prefix, why, err, c.prefix, c.why)
		}
		if why != "" && why.logged() && err == nil {
			t.Errorf("%+v: skipped for %q without saying why", *c.d, why)
		}
	}

	// Deleted decisions carry negative durations: not a reason to skip.
	if b, why, err := r.check(dec("Ip", "192.0.2.1", "-1.04s"), true); why != "" || b.Prefix.String() != "192.0.2.1/32" || b.Left != 0 {
		t.Errorf("deleted decision: %+v %q %v", b, why, err)
	}
	want := Ban{ID: 7, Prefix: mustPrefix("192.0.2.1/32"), Left: 90 * time.Minute, Type: "ban", Origin: "cscli", Scenario: "why"}
	if b, _, _ := r.check(dec("Ip", "192.0.2.1", "1h30m"), false); b != want {
		t.Errorf("ban %+v, want %+v", b, want)
	}
}

func TestCheckFilters(t *testing.T) {
	r := testRules(t, Config{Types: []string{"BAN", "captcha"}, Scopes: []string{"Range"}, Origins: []string{"crowdsec"},
		ScenariosContaining: []string{"SSH", "http"}, ScenariosNotContaining: []string{"test"}})
	d := Decision{Type: "captcha", Scope: "Range", Value: "192.0.2.0/24", Duration: "1h", Origin: "crowdsec", Scenario: "crowdsecurity/ssh-bf"}
	if _, why, err := r.check(&d, false); why != "" {
		t.Fatalf("admitted decision skipped: %q %v", why, err)
	}
	for name, mod := range map[string]func(*Decision){
		"type":          func(d *Decision) { d.Type = "throttle" },
		"scope":         func(d *Decision) { d.Scope, d.Value = "Ip", "192.0.2.1" },
		"origin":        func(d *Decision) { d.Origin = "cscli" },
		"not contained": func(d *Decision) { d.Scenario = "crowdsecurity/smb-bf" },
		"excluded":      func(d *Decision) { d.Scenario = "crowdsecurity/ssh-test" },
	} {
		c := d
		mod(&c)
		_, why, _ := r.check(&c, false)
		want := SkipFiltered
		if name == "type" {
			want = SkipType
		}
		if why != want {
			t.Errorf("%s: skipped for %q, want %q", name, why, want)
		}
	}
}

func TestConfigRefuses(t *testing.T) {
	ok := Config{URL: "http://127.0.0.1:8080", APIKey: "k"}
	for name, mod := range map[string]func(*Config){
		"no URL":       func(c *Config) { c.URL = "" },
		"ftp":          func(c *Config) { c.URL = "ftp://h/" },
		"no key":       func(c *Config) { c.APIKey = "" },
		"key newline":  func(c *Config) { c.APIKey = "k\nX-Evil: 1" },
		"scope":        func(c *Config) { c.Scopes = []string{"country"} },
		"comma":        func(c *Config) { c.Origins = []string{"a,b"} },
		"empty":        func(c *Config) { c.ScenariosContaining = []string{""} },
		"control type": func(c *Config) { c.Types = []string{"ban\x01"} },
	} {
		c := ok
		mod(&c)
		if _, err := New(c, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(ok, nil); err != nil {
		t.Fatal(err)
	}
	// Normalising the lists leaves the caller's alone.
	ok.Types, ok.Scopes = []string{"BAN"}, []string{"Ip"}
	if _, err := New(ok, nil); err != nil || ok.Types[0] != "BAN" || ok.Scopes[0] != "Ip" {
		t.Fatalf("%v; caller's lists now %v %v", err, ok.Types, ok.Scopes)
	}
}

func TestBackoff(t *testing.T) {
	base, limit := time.Second, 10*time.Second
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second,
		5: 10 * time.Second, 100: 10 * time.Second} {
		if got := backoff(base, limit, n, 0); got != want {
			t.Errorf("backoff after %d failures: %v, want %v", n, got, want)
		}
		if got := backoff(base, limit, n, 0.999); got > limit || got < want {
			t.Errorf("backoff after %d failures with jitter: %v, want in [%v, %v]", n, got, want, limit)
		}
	}
}
