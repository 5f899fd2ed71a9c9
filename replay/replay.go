// SPDX-License-Identifier: Apache-2.0

// Package replay runs the real XDP program over a packet capture, with the
// capture's timestamps as the program's clock, and reports what a policy
// would have done to that traffic: `xdplimit policy test`.
//
// Every frame goes through BPF_PROG_TEST_RUN once, so the verdicts are the
// datapath's own, not a model's. The program records what decided each
// packet (maps.Options.Record); the report is built from those records and
// then checked against the program's own counters.
package replay

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/internal/cpupin"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// ethHeaderLen is the shortest frame BPF_PROG_TEST_RUN accepts for XDP.
const ethHeaderLen = 14

// DefaultMaxSources sizes the state table like `xdplimit attach` does, so
// that eviction under a many-source flood happens as it would there.
const DefaultMaxSources = 1 << 20

// Options for Run.
type Options struct {
	// MaxSources sizes the state table; 0: DefaultMaxSources.
	MaxSources uint32
	// TrackAfter is maps.Options.TrackAfter; 0 means 1: every key is
	// tracked from its first packet, and the verdicts are exactly those
	// of the limits' definitions. Set it to the datapath's default to see
	// what its sketch lets through untracked.
	TrackAfter uint32
	// Explain lists frame numbers (1-based) whose decision to report.
	Explain []int
	// Top is how many (source, rule) pairs with the most dropped packets
	// to report.
	Top int
	// Sources are addresses whose state to report at the end of the
	// capture (what `status --source` would say then), the levels keyed
	// with a port read for SourcePort.
	Sources    []netip.Addr
	SourcePort uint16
	// Local are the captured host's addresses: the frames from them are
	// the ones it sent, for captures that do not say (a Linux cooked
	// capture and pcapng's direction flags do), and the destinations the
	// reflection guard judges.
	Local []netip.Prefix
}

// Run replays the capture through the program loaded with p and reports.
// It needs the privileges to load BPF programs.
func Run(p *policy.Policy, c *Capture, opts Options) (*Report, error) {
	img, err := compiler.Compile(p)
	if err != nil {
		return nil, err
	}
	if opts.MaxSources == 0 {
		opts.MaxSources = DefaultMaxSources
	}
	if opts.TrackAfter == 0 {
		opts.TrackAfter = 1
	}
	// The sketch that decides when a key gets tracked is per CPU: on a
	// thread that wanders between CPUs the verdicts would depend on the
	// scheduler. One pinned thread makes a replay reproducible; OnCPU
	// discards it afterwards, so the affinity never leaks.
	cpu, err := cpupin.FirstCPU()
	if err != nil {
		return nil, err
	}
	var r *Report
	err = cpupin.OnCPU(cpu, func() (err error) {
		r, err = run(p, img, c, opts)
		return err
	})
	return r, err
}

// sourceRule keys the dropped-source tally.
type sourceRule struct {
	src  netip.Addr
	rule int // index in the policy, -1 for the deny list
}

// replayer is one replay in progress: the loaded program, the report it
// fills and what the report is built from along the way.
type replayer struct {
	p       *policy.Policy
	l       *maps.Limiter
	opts    Options
	rep     *Report
	explain map[int]bool // frame numbers to explain
	linear  int          // how much of a frame the program sees
	drops   map[sourceRule]*SourceDrops
	clock   captureClock
	conv    convReplay
}

func run(p *policy.Policy, img *maps.Image, c *Capture, opts Options) (*Report, error) {
	// ACKs are not checked against SYN cookies: the program would look up
	// this host's sockets, not the captured host's.
	l, err := maps.Load(maps.Options{
		Clock: maps.ClockMap, Record: true, MaxSources: opts.MaxSources, TrackAfter: opts.TrackAfter,
		NoCookieACKs: true,
	})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	r, err := newReplayer(p, l, opts)
	if err != nil {
		return nil, err
	}
	if err := r.prepareConversations(img); err != nil {
		return nil, err
	}
	if err := l.Apply(img); err != nil {
		return nil, err
	}
	// The probe counted as non-IP: the cross-check starts from here.
	base, err := l.Counters()
	if err != nil {
		return nil, err
	}
	if err := r.frames(c); err != nil {
		return nil, err
	}
	if err := r.requestsRecorded(base); err != nil {
		return nil, err
	}
	return r.finish(base)
}

// newReplayer prepares the report and probes how much of a frame the
// program sees.
func newReplayer(p *policy.Policy, l *maps.Limiter, opts Options) (*replayer, error) {
	rep := &Report{Policy: p, Rules: make([]RuleResult, len(p.Rules)), MaxSources: opts.MaxSources, TrackAfter: opts.TrackAfter}
	for i, r := range p.Rules {
		rep.Rules[i] = RuleResult{Name: r.Name, Line: r.Line, Refused: make([]uint64, len(r.Levels))}
	}
	explain := map[int]bool{}
	for _, n := range opts.Explain {
		if n < 1 {
			return nil, fmt.Errorf("--explain %d: frames are numbered from 1", n)
		}
		explain[n] = true
	}
	linear, err := probeLinear(l)
	if err != nil {
		return nil, err
	}
	return &replayer{p: p, l: l, opts: opts, rep: rep, explain: explain, linear: linear,
		drops: map[sourceRule]*SourceDrops{}}, nil
}

// frames replays the capture to its end, or to where it was cut off.
func (r *replayer) frames(c *Capture) error {
	for {
		f, err := c.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if cut := (*CutOff)(nil); errors.As(err, &cut) {
			r.rep.CutOff = cut
			return nil
		}
		if err != nil {
			return err
		}
		if err := r.frame(f); err != nil {
			return err
		}
	}
}

// frame counts one frame and runs the program over it, unless the
// capturing host sent it or it is too short to run.
func (r *replayer) frame(f Frame) error {
	rep := r.rep
	rep.Frames++
	if f.Length > len(f.Data) {
		rep.Truncated++
	}
	off := r.clock.at(f.Time, rep)
	if f.NoLinkLayer {
		rep.NoLinkLayer++
	}
	if r.sentByHost(f) {
		rep.Outgoing.add(len(f.Data))
		if err := r.recordSent(f, off); err != nil {
			return err
		}
		if r.explain[f.Number] {
			text := "sent by the capturing host: not run, " + notReceived
			if r.conv.egress != nil {
				text = "sent by the capturing host: run through the reflection guard's request recorder on the egress, not the XDP program, " + notReceived
			}
			rep.Explained = append(rep.Explained, Explanation{Frame: f.Number, Offset: off,
				Len: len(f.Data), Packet: parse(f.Data).String(), Outgoing: true,
				Decision: maps.Decision{Verdict: maps.VerdictPass, Rule: -1, Level: -1}, Text: text})
		}
		return nil
	}
	if len(f.Data) < ethHeaderLen {
		rep.Short.add(len(f.Data))
		rep.Malformed.add(len(f.Data))
		if r.explain[f.Number] {
			rep.Explained = append(rep.Explained, Explanation{Frame: f.Number, Offset: off,
				Len: len(f.Data), Packet: "no Ethernet header", Short: true,
				Decision: maps.Decision{Why: maps.WhyMalformed, Verdict: maps.VerdictPass, Rule: -1, Level: -1},
				Text:     "shorter than an Ethernet header: counted as malformed without running the program (which refuses it); the datapath passes malformed frames"})
		}
		return nil
	}
	return r.runFrame(f, off)
}

// runFrame runs the program over one received frame at its offset in the
// capture and tallies the decision it recorded.
func (r *replayer) runFrame(f Frame, off time.Duration) error {
	l, rep := r.l, r.rep
	if err := l.SetClock(clockAt(off)); err != nil {
		return fmt.Errorf("frame %d: setting the clock: %w", f.Number, err)
	}
	data := padToWire(f.Data, f.Length, r.linear)
	ret, err := l.Program().Run(&ebpf.RunOptions{Data: data, Repeat: 1})
	if err != nil {
		return fmt.Errorf("frame %d: running the program: %w", f.Number, err)
	}
	seen := len(data)
	if seen > r.linear {
		seen = r.linear
		rep.Cut++
	}
	d, err := l.LastDecision()
	if err != nil {
		return fmt.Errorf("frame %d: reading the decision: %w", f.Number, err)
	}
	if want := xdpAction(d.Verdict); ret != want {
		return fmt.Errorf("frame %d: the program returned %d but recorded %v (%v): is the decision record out of date?", f.Number, ret, d.Verdict, d.Why)
	}
	if err := rep.tally(d, seen); err != nil {
		return fmt.Errorf("frame %d: %w", f.Number, err)
	}
	pp, err := rep.tallyParse(l, d, seen)
	if err != nil {
		return fmt.Errorf("frame %d: %w", f.Number, err)
	}
	if d.Verdict != maps.VerdictPass && r.opts.Top > 0 {
		r.countDrop(sourceOf(f.Data), d, seen)
	}
	if b, ok := banStarted(r.p, d, f.Data); ok {
		b.Frame, b.Start = f.Number, off
		rep.Bans = append(rep.Bans, b)
	}
	if r.explain[f.Number] {
		e := explainFrame(r.p, f, off, seen, d)
		if d.Why == maps.WhyMalformed {
			e.Text = unparsedText(pp.Unparsed, d.Verdict.String())
		}
		rep.Explained = append(rep.Explained, e)
	}
	return nil
}

// countDrop adds a refused frame of seen bytes to its source's tally
// under what refused it.
func (r *replayer) countDrop(src netip.Addr, d maps.Decision, seen int) {
	k := sourceRule{src: src, rule: d.Rule}
	sd := r.drops[k]
	if sd == nil {
		name := "deny list"
		if d.Why == maps.WhyMalformed {
			name = "unparsed"
		} else if d.Why == maps.WhyBan {
			name = "ban"
		} else if d.Rule >= 0 {
			name = r.p.Rules[d.Rule].Name
		}
		sd = &SourceDrops{Source: k.src, Rule: name}
		r.drops[k] = sd
	}
	switch d.Verdict {
	case maps.VerdictDrop:
		sd.Drop.add(seen)
	case maps.VerdictCookie:
		sd.Cookie.add(seen)
	case maps.VerdictReject:
		sd.Reject.add(seen)
	default:
		sd.Shadow.add(seen)
	}
}

// finish orders the explanations, checks the report against the
// program's counters since base and reads the sources asked for.
func (r *replayer) finish(base map[maps.Counter]maps.CounterValue) (*Report, error) {
	rep := r.rep
	for _, n := range r.opts.Explain {
		if n > rep.Frames {
			return nil, fmt.Errorf("--explain %d: the capture has %d frames", n, rep.Frames)
		}
	}
	slices.SortFunc(rep.Explained, func(a, b Explanation) int { return a.Frame - b.Frame })
	rep.Explained = slices.CompactFunc(rep.Explained, func(a, b Explanation) bool { return a.Frame == b.Frame })
	rep.Top = topDrops(r.drops, r.opts.Top)
	if err := rep.crossCheck(r.l, base); err != nil {
		return nil, err
	}
	for _, a := range r.opts.Sources {
		s, err := r.l.Source(a, r.opts.SourcePort)
		if err != nil {
			return nil, fmt.Errorf("--source %v: %w", a, err)
		}
		rep.Sources = append(rep.Sources, s)
	}
	return rep, nil
}
