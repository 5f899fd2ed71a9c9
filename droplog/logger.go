// SPDX-License-Identifier: Apache-2.0

package droplog

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/xdplimit/xdplimit/maps"
)

// Ring is what the logger reads: the drop ring (with the reader's own
// cursor) and the rule names by counter slot. *maps.Limiter is one.
type Ring interface {
	DropRing(cursor []uint64) ([]maps.DropSample, uint64, []uint64, error)
	SlotNames() (map[uint32]string, error)
}

// Settings are what a reload may change.
type Settings struct {
	// Keep is the probability that a sample the datapath took is logged
	// (compiler.SampleOneIn: the datapath samples a power of two).
	Keep         float64
	MaxPerSecond uint32
}

// Logger turns the ring's samples into lines. Poll reads the ring; Run polls
// on a timer. Lines are written by a goroutine of their own.
type Logger struct {
	iface  string
	ring   Ring
	now    func() time.Time
	random func() float64
	m      *Metrics

	mu      sync.Mutex
	keep    float64
	limit   rateCap
	out     *sink
	names   map[uint32]string
	cursor  []uint64
	pending Summary // suppressions since the last summary
	// pendingSince is the second the pending suppressions began in.
	pendingSince int64
}

// New starts a logger of iface's ring writing to out (closer, when not nil,
// is closed with the logger). now and random may be nil (the real clock, a
// random source); tests inject them.
func New(iface string, ring Ring, s Settings, out io.Writer, closer io.Closer, m *Metrics,
	now func() time.Time, random func() float64) (*Logger, error) {
	if now == nil {
		now = time.Now
	}
	if random == nil {
		random = rand.Float64
	}
	l := &Logger{iface: iface, ring: ring, now: now, random: random, m: m, pendingSince: now().Unix()}
	l.Configure(s)
	// Start from what is written now: samples older than the logger
	// belong to no one's log.
	_, _, cur, err := ring.DropRing(nil)
	if err != nil {
		return nil, err
	}
	l.cursor = cur
	l.out = l.newSink(out, closer)
	return l, nil
}

func (l *Logger) newSink(out io.Writer, closer io.Closer) *sink {
	return newSink(out, closer, l.m.lines.Inc, l.m.suppressed.WithLabelValues(ReasonError).Inc)
}

// Configure applies a reloaded policy's settings.
func (l *Logger) Configure(s Settings) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keep = min(max(s.Keep, 0), 1)
	l.limit.max = uint64(s.MaxPerSecond)
}

// SetOutput moves the log to out (a reload that names another file).
func (l *Logger) SetOutput(out io.Writer, closer io.Closer) error {
	l.mu.Lock()
	old := l.out
	l.out = l.newSink(out, closer)
	l.mu.Unlock()
	return old.close(time.Second)
}

// FromStart makes the next poll read the rings from their beginning rather
// than from where they stood at New: a limiter this process loaded and
// attached moments before has sampled only drops since its attach, and the
// first of those, made while the logger was being started, belong in the
// log too. An adopted limiter's rings hold drops its earlier process
// already logged; a logger of one does not call this.
func (l *Logger) FromStart() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cursor = nil
}

// closeWait is how long Close waits for an output that has fallen behind.
const closeWait = time.Second

// Close reads the samples written since the last poll, writes the pending
// summary and what is queued (waiting at most closeWait for the output, the
// summary's room included) and closes a file output. The ring must still be
// open.
func (l *Logger) Close() error {
	err := l.Poll()
	l.mu.Lock()
	defer l.mu.Unlock()
	deadline := time.Now().Add(closeWait)
	l.pendingSince = -1 // the last summary goes out now
	l.summarize(l.now(), func(b []byte) bool { return l.out.offerBy(b, deadline) })
	return errors.Join(err, l.out.close(time.Until(deadline)))
}

// PollInterval is how often the attach process's drop log reads the ring
// (Run's interval). Each CPU's ring holds Limiter.DropRingSize samples
// (16384 on two CPUs): every 100ms loses none below ~160k samples/s per
// CPU (10 Mpps of drops at one in 64).
const PollInterval = 100 * time.Millisecond

// Run polls every interval until ctx ends.
func (l *Logger) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := l.Poll(); err != nil {
				return err
			}
		}
	}
}

// Poll logs the samples written since the last poll, and the summary of
// the last second's suppressions once that second is over.
func (l *Logger) Poll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	samples, written, next, err := l.ring.DropRing(l.cursor)
	if err != nil {
		return err
	}
	l.cursor = next
	now := l.now()
	l.summarize(now, l.out.offer)
	if lost := written - uint64(len(samples)); lost > 0 {
		l.pending.Ring += lost
		l.m.suppressed.WithLabelValues(ReasonRing).Add(float64(lost))
	}
	for _, s := range samples {
		if l.keep < 1 && l.random() >= l.keep {
			continue // sampled out: one in N reaches the log
		}
		if !l.limit.allow(now) {
			l.pending.RateCap++
			l.m.suppressed.WithLabelValues(ReasonRate).Inc()
			continue
		}
		if !l.out.offer(encode(lineOf(s, l.iface, l.ruleName(s), now))) {
			l.pending.Backlog++
			l.m.suppressed.WithLabelValues(ReasonBacklog).Inc()
		}
	}
	return nil
}

// summarize offers the pending summary once the second it began in is
// over: at most one line a second on top of the cap, none while nothing is
// refused. A summary the queue has no room for stays pending and grows
// with what is refused meanwhile: it is what accounts for the lines a
// stalled output lost, so it is never dropped itself.
func (l *Logger) summarize(now time.Time, offer func([]byte) bool) {
	p := l.pending
	n := p.RateCap + p.Backlog + p.Ring
	if n == 0 {
		l.pendingSince = now.Unix()
		return
	}
	if now.Unix() == l.pendingSince {
		return
	}
	p.Event, p.Time, p.Interface, p.Suppressed = "suppressed", now.UTC(), l.iface, n
	if offer(encode(p)) {
		l.pending, l.pendingSince = Summary{}, now.Unix()
	}
}

func (l *Logger) ruleName(s maps.DropSample) string {
	if n, ok := s.ListName(); ok {
		return n
	}
	if n, ok := l.names[s.Slot]; ok {
		return n
	}
	// A rule added by a reload since the names were read.
	if names, err := l.ring.SlotNames(); err == nil {
		l.names = names
	}
	if n, ok := l.names[s.Slot]; ok {
		return n
	}
	return "slot-" + strconv.FormatUint(uint64(s.Slot), 10)
}
