// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Asked is the drops over the policy's one in N, however the compiler
// splits N between the datapath and the log.
func TestDropLogAsked(t *testing.T) {
	for _, c := range []struct {
		drops    uint64
		datapath uint32
		keep     float64
		want     float64
	}{
		{20_000_000, 64, 1, 312_500},
		{20_000_000, 64, 0.5, 156_250}, // sample: 1/128
		{1000, 1, 1, 1000},
		{1000, 0, 1, 0},
	} {
		if got := asked(c.drops, c.datapath, c.keep); got != c.want {
			t.Errorf("asked(%d, %d, %v) = %v, want %v", c.drops, c.datapath, c.keep, got, c.want)
		}
	}
	if got := coverage(45, 50); got != 0.9 {
		t.Errorf("coverage(45, 50) = %v, want 0.9", got)
	}
	if got := coverage(5, 0); got != 0 {
		t.Errorf("coverage with nothing asked = %v, want 0", got)
	}
}

// The log's output counts drop lines by the second of their time, the
// second the cap counts in, and summaries apart; lines may come several
// to a write.
func TestDropLogLineCounter(t *testing.T) {
	var c lineCounter
	line := func(event string, at time.Time) string {
		return fmt.Sprintf(`{"event":%q,"time":%q,"interface":"xbd1"}`+"\n", event, at.Format(time.RFC3339Nano))
	}
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	var w strings.Builder
	for i := range 5 {
		w.WriteString(line("drop", t0.Add(time.Duration(i)*200*time.Millisecond))) // 5 in second 0
	}
	w.WriteString(line("drop", t0.Add(1500*time.Millisecond)))
	w.WriteString(line("suppressed", t0.Add(time.Second)))
	if _, err := c.Write([]byte(w.String())); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(line("drop", t0.Add(999*time.Millisecond)))); err != nil {
		t.Fatal(err)
	}
	if lines, summaries, peak := c.counts(); lines != 7 || summaries != 1 || peak != 6 {
		t.Errorf("counted %d lines, %d summaries, at most %d in a second; want 7, 1, 6", lines, summaries, peak)
	}
	for _, bad := range []string{"not json\n", `{"event":"other"}` + "\n"} {
		if _, err := c.Write([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestDropLogTarget(t *testing.T) {
	base := func() *dropLogResults {
		return &dropLogResults{Rate: dropLogRate, Flood: dropLogFlood, Datapath: 64, Keep: 1, Cap: 1000,
			mpps: sample{1.99, 1.98, 2.0}, asked: sample{312_000, 311_000, 313_000}, peak: sample{1000, 999, 1000},
			Log: dropLogReader{coverage: sample{0.95, 0.91, 0.97}}, Top: dropLogReader{coverage: sample{0.92, 0.9, 0.93}}}
	}
	met := base()
	low := base()
	low.Log.coverage, low.Top.coverage = sample{0.16, 0.15, 0.17}, sample{0.016, 0.015, 0.02}
	overCap := base()
	overCap.peak = sample{1000, 1001, 1000}
	slow := base()
	slow.mpps = sample{1.5, 1.4, 1.6}
	quick := base()
	quick.Flood, quick.Reps = 5*time.Second, 2
	for _, c := range []struct {
		name     string
		r        *dropLogResults
		status   string
		measured []string
	}{
		{"met", met, "met", []string{"log 95.0% (91.0% – 97.0%)", "top 92.0% (90.0% – 93.0%) of 312000 samples asked (one in 64 drops)",
			"at most 1000 lines in a second, cap 1000", "at 1.99 Mpps received (1.98 – 2.00)"}},
		{"today's ring", low, "**NOT MET** (log, top)", []string{"log 16.0%", "top 1.60%"}},
		{"over the cap", overCap, "**NOT MET** (cap)", []string{"at most 1001 lines in a second"}},
		{"the machine too slow", slow, "met", []string{"the machine reached that, not 2 Mpps, and coverage is judged at that rate"}},
		{"quick", quick, "met", []string{", 5 s floods"}},
		{"no run", &dropLogResults{}, "not measured", []string{"-"}},
	} {
		tg := c.r.target()
		if !strings.HasPrefix(tg.what, "drop log and top under a 2 Mpps flood of 64k sources for 10 s: ≥ 90% ") {
			t.Errorf("%s: target %q", c.name, tg.what)
		}
		if tg.status != c.status {
			t.Errorf("%s: %q, want %q (measured %q)", c.name, tg.status, c.status, tg.measured)
		}
		for _, m := range c.measured {
			if !strings.Contains(tg.measured, m) {
				t.Errorf("%s: measured %q lacks %q", c.name, tg.measured, m)
			}
		}
		if c.r != slow && strings.Contains(tg.measured, "the machine reached") {
			t.Errorf("%s: measured %q says the rate was not reached", c.name, tg.measured)
		}
	}
}

// The section prints every figure with its range, and a failed run's error.
func TestDropLogSection(t *testing.T) {
	d := &dropLogResults{Rate: dropLogRate, Flood: dropLogFlood, Reps: 2, Datapath: 64, Keep: 1, Cap: 1000, CPUs: 2,
		mpps: sample{1.9, 2.0}, cpuMpps: sample{1, 1.1}, drops: sample{19e6, 20e6}, asked: sample{296875, 312500},
		written: sample{296000, 312000}, lines: sample{10000, 10000}, summaries: sample{10, 11}, rateCap: sample{40000, 41000},
		backlog: sample{0, 0}, peak: sample{1000, 1000},
		Log:  dropLogReader{reached: sample{50000, 51000}, coverage: sample{0.168, 0.163}, lost: sample{246000, 261000}},
		Top:  dropLogReader{reached: sample{5000, 5100}, coverage: sample{0.0168, 0.0163}, lost: sample{291000, 307000}},
		errs: []string{"send: boom"}}
	var b strings.Builder
	(&report{DropLog: d}).writeDropLog(&b)
	for _, want := range []string{
		"| Mpps received (wall clock) | 1.95 | 1.90 – 2.00 |",
		"| Samples asked (drops / 64) | 304688 | 296875 – 312500 |",
		"| — coverage (reached / asked) | 16.6% | 16.3% – 16.8% |",
		"| — most drop lines in one second (cap 1000) | 1000 | 1000 – 1000 |",
		"| **top** (every 1s): samples that reached it | 5050 | 5000 – 5100 |",
		"Failed runs: send: boom",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, b.String())
		}
	}
}
