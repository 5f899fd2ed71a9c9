// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/xdplimit/xdplimit/maps"
)

// The against section (-against FILE, make bench-against REV=...): this
// build's program beside another build's, case for case, each pair call
// after call on one pinned CPU. A change's cost is the median of the
// per-pair differences: runs of one build minutes apart move by more than
// most changes do on this machine, two builds called in turn share its
// speed. The other build's object must have this build's map layout.

// againstCase is one configuration, loaded from both builds.
type againstCase struct {
	name, limit string
	want        uint32
	// rotate > 0: the program walks the source over rotate addresses, the
	// table sized for a million.
	rotate uint32
}

var againstCases = []againstCase{
	{name: "a known source refused, token bucket", limit: tbDrop, want: xdpDrop},
	{name: "a known source admitted, token bucket", limit: tbPass, want: xdpPass},
	{name: "a known source admitted, fixed window", limit: fwPass, want: xdpPass},
	{name: "a known source admitted, sliding window", limit: swPass, want: xdpPass},
	{name: "a known source admitted among 64k, token bucket", limit: tbPass, want: xdpPass, rotate: 1 << 16},
}

type againstResults struct {
	Object string
	Rounds int
	Pairs  []*againstPair
}

// againstPair is one case in both builds: diff is this build's ns minus
// the other's, per adjacent pair of calls.
type againstPair struct {
	name        string
	this, other *microCase
	diff        sample
	err         error
}

func againstBench(e *env, quick bool, object string) (*againstResults, error) {
	res := &againstResults{Object: object, Rounds: 30}
	repeat := 1 << 17
	if quick {
		res.Rounds = 10
	}
	s := newMicroSetup(e, &microResults{})
	defer s.close()
	base32 := binary.BigEndian.Uint32(microBase.AsSlice())
	for _, ac := range againstCases {
		pr := &againstPair{name: ac.name}
		res.Pairs = append(res.Pairs, pr)
		for _, build := range []struct {
			c      **microCase
			object string
		}{{&pr.this, ""}, {&pr.other, object}} {
			opts := maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 16, BenchObject: build.object}
			c := &microCase{name: ac.name, want: ac.want, warm: 1000, frame: append([]byte(nil), s.udp4...)}
			if ac.rotate > 0 {
				opts.MaxSources, opts.BenchRotate, opts.BenchBase = 1<<20, ac.rotate, microBase
				c.rotate, c.base, c.warm = ac.rotate, base32, 11*int(ac.rotate)
				c.advance(0)
			}
			e.Logf("against: loading %q (%s)", ac.name, buildName(build.object))
			c.prog, c.err = s.limiter(opts, oneRule(ac.limit), nil)(c)
			if c.err != nil && pr.err == nil {
				pr.err = fmt.Errorf("%s: %w", buildName(build.object), c.err)
			}
			*build.c = c
		}
	}
	err := onPinnedThread(1, func() error {
		for _, pr := range res.Pairs {
			if pr.err != nil {
				continue
			}
			for _, c := range []*microCase{pr.this, pr.other} {
				if _, _, err := c.prog.Benchmark(c.frame, c.warm, nil); err != nil {
					pr.err = err
				}
				c.advance(c.warm)
			}
		}
		return pairRounds(e, "this build against "+object, res.Rounds, func(i int) error {
			for _, pr := range res.Pairs {
				if pr.err != nil {
					continue
				}
				x, y, err := adjacentCalls(pr.this, pr.other, i, repeat)
				if err != nil {
					pr.err = err
					continue
				}
				pr.this.ns, pr.other.ns = append(pr.this.ns, x), append(pr.other.ns, y)
				pr.diff = append(pr.diff, x-y)
			}
			return nil
		})
	})
	return res, err
}

func buildName(object string) string {
	if object == "" {
		return "this build"
	}
	return object
}

func (r *report) writeAgainst(b *strings.Builder) {
	a := r.Against
	if a == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## This build against %s\n\n", a.Object)
	p("Each case loaded from both builds, one source unless the row says otherwise, called in turn on one\n")
	p("pinned CPU for %d rounds of BPF_PROG_TEST_RUN; the difference is this build's ns minus the other's,\n", a.Rounds)
	p("per pair of adjacent calls (negative: this build is cheaper).\n\n")
	p("| Case | This build (ns) | The other (ns) | Difference, call after call (ns) | min – max |\n|---|---:|---:|---:|---:|\n")
	for _, pr := range a.Pairs {
		if pr.err != nil || len(pr.diff) == 0 {
			why := "not measured"
			if pr.err != nil {
				why = errString(pr.err)
			}
			p("| %s | - | - | %s | - |\n", pr.name, why)
			continue
		}
		p("| %s | %.1f | %.1f | %+.1f | %+.1f – %+.1f |\n", pr.name, pr.this.ns.median(), pr.other.ns.median(),
			pr.diff.median(), pr.diff.min(), pr.diff.max())
	}
	p("\n")
}
