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
	if err := l.Apply(img); err != nil {
		return nil, err
	}

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
	// The probe counted as non-IP: the cross-check starts from here.
	base, err := l.Counters()
	if err != nil {
		return nil, err
	}
	drops := map[sourceRule]*SourceDrops{}
	var clock captureClock

	for {
		f, err := c.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if cut := (*CutOff)(nil); errors.As(err, &cut) {
			rep.CutOff = cut
			break
		}
		if err != nil {
			return nil, err
		}
		rep.Frames++
		if f.Length > len(f.Data) {
			rep.Truncated++
		}
		off := clock.at(f.Time, rep)
		if f.NoLinkLayer {
			rep.NoLinkLayer++
		}
		if f.Outgoing {
			rep.Outgoing.add(len(f.Data))
			if explain[f.Number] {
				rep.Explained = append(rep.Explained, Explanation{Frame: f.Number, Offset: off,
					Len: len(f.Data), Packet: parse(f.Data).String(), Outgoing: true,
					Decision: maps.Decision{Verdict: maps.VerdictPass, Rule: -1, Level: -1},
					Text:     "sent by the capturing host: not run, " + notReceived})
			}
			continue
		}

		if len(f.Data) < ethHeaderLen {
			rep.Short.add(len(f.Data))
			rep.Malformed.add(len(f.Data))
			if explain[f.Number] {
				rep.Explained = append(rep.Explained, Explanation{Frame: f.Number, Offset: off,
					Len: len(f.Data), Packet: "no Ethernet header", Short: true,
					Decision: maps.Decision{Why: maps.WhyMalformed, Verdict: maps.VerdictPass, Rule: -1, Level: -1},
					Text:     "shorter than an Ethernet header: counted as malformed without running the program (which refuses it); the datapath passes malformed frames"})
			}
			continue
		}

		if err := l.SetClock(clockAt(off)); err != nil {
			return nil, fmt.Errorf("frame %d: setting the clock: %w", f.Number, err)
		}
		data := padToWire(f.Data, f.Length, linear)
		ret, err := l.Program().Run(&ebpf.RunOptions{Data: data, Repeat: 1})
		if err != nil {
			return nil, fmt.Errorf("frame %d: running the program: %w", f.Number, err)
		}
		seen := len(data)
		if seen > linear {
			seen = linear
			rep.Cut++
		}
		d, err := l.LastDecision()
		if err != nil {
			return nil, fmt.Errorf("frame %d: reading the decision: %w", f.Number, err)
		}
		if want := xdpAction(d.Verdict); ret != want {
			return nil, fmt.Errorf("frame %d: the program returned %d but recorded %v (%v): is the decision record out of date?", f.Number, ret, d.Verdict, d.Why)
		}
		if err := rep.tally(d, seen); err != nil {
			return nil, fmt.Errorf("frame %d: %w", f.Number, err)
		}
		pp, err := rep.tallyParse(l, d, seen)
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", f.Number, err)
		}
		if d.Verdict != maps.VerdictPass && opts.Top > 0 {
			k := sourceRule{src: sourceOf(f.Data), rule: d.Rule}
			sd := drops[k]
			if sd == nil {
				name := "deny list"
				if d.Why == maps.WhyMalformed {
					name = "unparsed"
				} else if d.Why == maps.WhyBan {
					name = "ban"
				} else if d.Rule >= 0 {
					name = p.Rules[d.Rule].Name
				}
				sd = &SourceDrops{Source: k.src, Rule: name}
				drops[k] = sd
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
		if b, ok := banStarted(p, d, f.Data); ok {
			b.Frame, b.Start = f.Number, off
			rep.Bans = append(rep.Bans, b)
		}
		if explain[f.Number] {
			e := explainFrame(p, f, off, seen, d)
			if d.Why == maps.WhyMalformed {
				e.Text = unparsedText(pp.Unparsed, d.Verdict.String())
			}
			rep.Explained = append(rep.Explained, e)
		}
	}
	for _, n := range opts.Explain {
		if n > rep.Frames {
			return nil, fmt.Errorf("--explain %d: the capture has %d frames", n, rep.Frames)
		}
	}
	slices.SortFunc(rep.Explained, func(a, b Explanation) int { return a.Frame - b.Frame })
	rep.Explained = slices.CompactFunc(rep.Explained, func(a, b Explanation) bool { return a.Frame == b.Frame })
	rep.Top = topDrops(drops, opts.Top)
	if err := rep.crossCheck(l, base); err != nil {
		return nil, err
	}
	for _, a := range opts.Sources {
		s, err := l.Source(a, opts.SourcePort)
		if err != nil {
			return nil, fmt.Errorf("--source %v: %w", a, err)
		}
		rep.Sources = append(rep.Sources, s)
	}
	return rep, nil
}
