// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The table the parse tests run (parseCase, runParseCases) and the policy
// texts and values they share.

// parseCase is one policy text and everything Parse must say about it.
type parseCase struct {
	name  string
	src   string
	errs  []string // exact messages in order; none means the policy must load
	warns []string // exact warnings in order, for policies that load
	check func(t *testing.T, p *Policy)
}

func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.errs) > 0 {
				checkBrokenFixture(t, tc.src)
			}
			p, err := Parse("p.yaml", []byte(tc.src))
			if got := errorLines(err); !reflect.DeepEqual(got, tc.errs) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.errs, "\n"))
			}
			if err != nil {
				if p != nil {
					t.Fatal("Parse returned a Policy with errors")
				}
				return
			}
			var warns []string
			for _, w := range p.Warnings {
				warns = append(warns, w.String())
			}
			if !reflect.DeepEqual(warns, tc.warns) {
				t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(warns, "\n"), strings.Join(tc.warns, "\n"))
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	var list ErrorList
	if !errors.As(err, &list) {
		return []string{"not an ErrorList: " + err.Error()}
	}
	lines := make([]string, len(list))
	for i, e := range list {
		lines[i] = e.Error()
	}
	return lines
}

// withRule is a policy of one rule named r with a valid limit, plus the
// given lines; those start on line 4, column 5.
func withRule(lines ...string) string {
	return "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}\n    " +
		strings.Join(lines, "\n    ") + "\n"
}

// withMatch is a policy of one rule whose match is the given flow mapping
// body, which starts on line 3, column 13.
func withMatch(body string) string {
	return "rules:\n  - name: r\n    match: {" + body + "}\n    limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}\n"
}

// withLimit is a policy of one rule whose limit is the given flow mapping
// body, which starts on line 3, column 13.
func withLimit(body string) string {
	return "rules:\n  - name: r\n    limit: {" + body + "}\n"
}

func rule0(t *testing.T, p *Policy) Rule {
	t.Helper()
	if len(p.Rules) == 0 {
		t.Fatal("no rules")
	}
	return p.Rules[0]
}

func wantMatch(want Match) func(*testing.T, *Policy) {
	return func(t *testing.T, p *Policy) {
		if got := rule0(t, p).Match; !reflect.DeepEqual(got, want) {
			t.Fatalf("match %+v, want %+v", got, want)
		}
	}
}

func wantLevel(i int, want Level) func(*testing.T, *Policy) {
	return func(t *testing.T, p *Policy) {
		r := rule0(t, p)
		if i >= len(r.Levels) {
			t.Fatalf("%d levels", len(r.Levels))
		}
		if got := r.Levels[i]; got != want {
			t.Fatalf("level %d: %+v, want %+v", i, got, want)
		}
	}
}

var (
	tb1000     = Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1000, Per: time.Second, Burst: 2000}
	srcKey     = Key{Kind: KeySrcIP, IPv4Prefix: 32, IPv6Prefix: 64}
	anyMatch   = Match{Protocol: ProtoAny}
	rateAdvice = "is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s"
)

func pfx(s ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, x := range s {
		ps = append(ps, netip.MustParsePrefix(x))
	}
	return ps
}
