// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/banfeed"
	"github.com/xdplimit/xdplimit/maps"
)

// A startup answer exactly as crowdsec 1.4.6 sent it (TRAPS.md).
const lapiAnswer = `{"deleted":[{"duration":"-1.040293547s","id":1,"origin":"cscli","scenario":"why","scope":"Ip","type":"ban","value":"198.51.100.7"}],` +
	`"new":[{"duration":"59m52.934168572s","id":2,"origin":"cscli","scenario":"manual 'ban' from 'tester'","scope":"Range","type":"ban","value":"203.0.113.0/24"}]}`

func TestDecodeStream(t *testing.T) {
	s, err := DecodeStream(strings.NewReader(lapiAnswer), 1<<20, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.New) != 1 || len(s.Deleted) != 1 || s.Malformed != 0 {
		t.Fatalf("%+v", s)
	}
	want := Decision{ID: 2, Type: "ban", Scope: "Range", Value: "203.0.113.0/24", Duration: "59m52.934168572s",
		Origin: "cscli", Scenario: "manual 'ban' from 'tester'"}
	if s.New[0] != want || s.Deleted[0].Duration != "-1.040293547s" {
		t.Fatalf("%+v", s)
	}

	for _, c := range []struct{ in, err string }{
		{`{"deleted":null,"new":null}`, ""},
		{`{}`, ""},
		{` {"new":[], "later_field": {"x": [1,2]}} `, ""},
		{``, "unexpected EOF"},
		{`<html>502 Bad Gateway</html>`, "invalid character"},
		{`[]`, "expected"},
		{`{"new":{}}`, "expected a list"},
		{`{"new":[{"id":1}]`, "EOF"},
		{`{"new":[{"id":1},]}`, "invalid character"},
		{`{"new":[]} {"new":[]}`, "data after"},
		{`{"new":[]}garbage`, "invalid character"},
	} {
		_, err := DecodeStream(strings.NewReader(c.in), 1<<20, 10)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.err)
		}
	}
}

// Elements that are not decisions are counted and left out; the others
// stand.
func TestDecodeStreamMalformedElements(t *testing.T) {
	in := `{"new":[null, 7, "x", {"id":"one","value":"192.0.2.1"}, {"value":["a"]}, {"id":3,"value":"192.0.2.3"}, []]}`
	s, err := DecodeStream(strings.NewReader(in), 1<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	if s.Malformed != 6 || len(s.New) != 1 || s.New[0].ID != 3 {
		t.Fatalf("%+v", s)
	}
}

func TestDecodeStreamLimits(t *testing.T) {
	body := lapiAnswer
	if _, err := DecodeStream(strings.NewReader(body), int64(len(body)), 2); err != nil {
		t.Fatalf("exactly at the limits: %v", err)
	}
	if _, err := DecodeStream(strings.NewReader(body), int64(len(body))-1, 2); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: %v", err)
	}
	if _, err := DecodeStream(strings.NewReader(body), 1<<20, 1); !errors.Is(err, ErrTooMany) {
		t.Fatalf("one decision over: %v", err)
	}
	// An endless answer stops at the limit, not at the end of memory.
	endless := io.MultiReader(strings.NewReader(`{"new":[`), &repeater{s: `{"id":1,"value":"192.0.2.1"},`})
	if _, err := DecodeStream(endless, 1<<20, 1<<30); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("endless answer: %v", err)
	}
}

// repeater reads s over and over, without end.
type repeater struct {
	s   string
	off int
}

func (r *repeater) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}

// FuzzDecodeStream: any input decodes or fails without panicking, within
// the limits, and whatever the checks and then the ban table's gate (as
// Table runs it) admit is safe for the ban table: a valid canonical prefix
// no wider than the minimum, a duration the table takes, a reason it
// stores as it is.
func FuzzDecodeStream(f *testing.F) {
	f.Add([]byte(lapiAnswer))
	f.Add([]byte(`{"new":[{"duration":"1h","scope":"Range","type":"ban","value":"::ffff:0.0.0.0/96"}]}`))
	f.Add([]byte(`{"new":[{"duration":"-0s","scope":"ip","type":"ban","value":"fe80::1%eth0","origin":"\u0000"}],"deleted":null}`))
	f.Add([]byte(`{"new":[null,1,{"id":1e99}]}`))
	r := &rules{types: map[string]bool{"ban": true}, scopes: map[string]bool{"ip": true, "range": true}}
	lim := banfeed.Limits(maps.BanLimits{})
	f.Fuzz(func(t *testing.T, in []byte) {
		const maxDecisions = 50
		s, err := DecodeStream(strings.NewReader(string(in)), 1<<16, maxDecisions)
		if err != nil {
			return
		}
		if len(s.New)+len(s.Deleted)+s.Malformed > maxDecisions {
			t.Fatalf("%d decisions past the limit", len(s.New)+len(s.Deleted)+s.Malformed)
		}
		for i, list := range [][]Decision{s.New, s.Deleted} {
			for _, d := range list {
				b, why, _ := r.check(&d, i == 1)
				if why != "" {
					continue
				}
				if !b.Prefix.IsValid() || b.Prefix.Addr().Zone() != "" {
					t.Fatalf("%+v: prefix %v", d, b.Prefix)
				}
				if i == 1 {
					continue
				}
				v := banfeed.Check(Source, banfeed.Offer{Prefix: b.Prefix, Left: b.Left, Origin: b.Origin + "/" + b.Scenario,
					Reason: b.Type}, lim)
				if v.Refused != "" {
					continue
				}
				p := v.Ban.Prefix
				if p != maps.CanonicalBanPrefix(p) || banfeed.TooWideFor(p, lim) {
					t.Fatalf("%+v: %v admitted", d, p)
				}
				if err := maps.CheckBan(p, v.Ban.For, v.Ban.Reason); err != nil {
					t.Fatalf("%+v: %v", d, err)
				}
			}
		}
	})
}
