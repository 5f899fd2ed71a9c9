// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"context"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/pktgen"
)

// A random-source flood (sources drawn from 16M addresses, far more than the
// table holds) with one heavy source in it: the table never grows past
// --max-sources, the heavy source stays limited to its rate (it is never
// evicted into a fresh bucket), and everything that passes reaches the
// receiver's stack.
func TestRandomSourceFloodWithHeavySource(t *testing.T) {
	l := newLab(t, 2)
	const capacity = 4096
	l.attach(t, `
rules:
  - name: heavy
    match: {src_cidrs: [198.18.0.1/32]}
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 500}
  - name: spoofed
    match: {src_cidrs: [10.0.0.0/8]}
    limit: {algorithm: token_bucket, rate: 1000/s, burst: 500}
`, "--max-sources", "4096")

	spoof, spoofFrame := l.spoofer(t)

	before := l.PeerNS.Snapshot(t)
	type result struct {
		res pktgen.Result
		err error
	}
	spoofed := make(chan result, 1)
	go func() {
		// 10x the table's capacity of distinct sources at the least.
		r, err := spoof.Send(context.Background(), l.NS.Path(), l.Name, spoofFrame, floodCount(2_000_000), secondCPU())
		spoofed <- result{r, err}
	}()
	// The heavy source floods in chunks for as long as the spoofed flood
	// runs, so it must survive the whole churn. Between chunks its bucket
	// refills at most its burst (0.5 s), so no refill is lost to the gaps.
	var s result
	var heavySent uint64
	// The heavy source offers traffic from its first chunk's start to its
	// last chunk's end; the expectation covers exactly that span.
	heavyStart := monotonic()
	var heavyEnd int64
	var heavyRan time.Duration
	for done := false; !done; {
		r := l.send(t, l.udpFrame(18), pktgen.Sources{}, floodCount(100_000), 0)
		heavyEnd = monotonic()
		heavySent += r.Sent
		heavyRan += r.CPUTime
		w := time.Now()
		select {
		case s = <-spoofed:
			done = true
		case <-time.After(200 * time.Millisecond):
			heavyRan += time.Since(w)
		}
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	l.settle(t)
	stack := l.PeerNS.Snapshot(t).Delta(before).IPReceives()
	hp, hd, _ := l.ruleCounts(t, "heavy")
	sp, sd, _ := l.ruleCounts(t, "spoofed")
	t.Logf("heavy: %d frames over %v, passed %d dropped %d; spoofed: %v, passed %d dropped %d; stack %d",
		heavySent, time.Duration(heavyEnd-heavyStart), hp, hd, s.res, sp, sd, stack)
	if s.res.Sent < 10*capacity {
		t.Fatalf("only %d spoofed frames", s.res.Sent)
	}
	checkStack(t, stack, hp+sp)
	// The heavy flood's calls alternate with 200 ms waits for the
	// spoofed one, shorter than its 500 ms burst, so they lose no refill:
	// they count as running time, with the heavy thread's CPU time.
	checkAdmitted(t, "heavy source admitted", float64(hp), 500+1000*float64(heavyEnd-heavyStart)/1e9,
		pktgen.Result{Elapsed: time.Duration(heavyEnd - heavyStart), CPUTime: heavyRan, PerCPU: map[int]uint64{0: heavySent}}, 1)

	checkTableBound(t, l, capacity)
}

// checkTableBound: the receiver's source table holds at most capacity
// entries, --max-sources.
func checkTableBound(t *testing.T, l *lab, capacity int) {
	st, err := loader.Open(l.PeerName)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := st.Limiter.TrackedSources()
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := st.Limiter.Counters()
	t.Logf("table: %d of %d entries; inserts %d, untracked admissions %d, insert failures %d", n, capacity,
		cs[maps.CounterNewSource].Packets, cs[maps.CounterUntracked].Packets, cs[maps.CounterInsertFail].Packets)
	if n > capacity {
		t.Errorf("the table holds %d entries, more than --max-sources %d", n, capacity)
	}
}
