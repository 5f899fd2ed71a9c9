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
	"encoding/binary"
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
}

// Counts is a number of packets and their bytes.
type Counts struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

func (c *Counts) add(bytes int) {
	c.Packets++
	c.Bytes += uint64(bytes)
}

// RuleResult is what one rule did.
type RuleResult struct {
	Name               string
	Line               int
	Pass, Drop, Shadow Counts
	// Cookie counts the SYNs a rule with action syncookie would answer
	// with a SYN-ACK carrying a cookie (the program sends them with
	// XDP_TX; a replay sends nothing).
	Cookie Counts
	// Reject counts the packets a rule with action reject would answer
	// with a TCP reset or an ICMP error (sent with XDP_TX; a replay sends
	// nothing); those it would drop unanswered are in Drop.
	Reject Counts
	// Refused counts the packets each level refused (dropped,
	// shadow-dropped or answered with a cookie), in policy order: 0 is the
	// rule's own limit, i the aggregate level i-1.
	Refused []uint64
}

// SourceDrops is one source's dropped packets under one rule (or the deny
// list).
type SourceDrops struct {
	Source       netip.Addr
	Rule         string // a rule name, or "deny list"
	Drop, Shadow Counts
	Cookie       Counts // SYNs answered with a cookie
	Reject       Counts // packets answered by a reject rule
}

// BanEvent is a ban a rule started during the replay: at the frame that
// exceeded the rule, until Start + For (capture time), unless a later ban
// of the same prefix renewed it.
type BanEvent struct {
	Frame  int
	Start  time.Duration // capture time since the first frame
	For    time.Duration
	Prefix netip.Prefix
	Rule   string
	Shadow bool
}

// Explanation is what decided one frame.
type Explanation struct {
	Frame  int
	Offset time.Duration // capture time since the first frame
	Len    int           // bytes the program saw
	Packet string        // a one-line summary of the frame
	// Short: shorter than an Ethernet header; counted as malformed
	// without running the program, which refuses such input.
	Short bool
	// Outgoing: sent by the capturing host; not run.
	Outgoing bool
	Decision maps.Decision
	// Text says what decided the frame, from the decision and the policy.
	Text string
}

// Report is the result of a replay.
type Report struct {
	Policy  *policy.Policy
	Capture string // the capture's file name, for the heading
	// Frames is the number of frames replayed.
	Frames      int
	First, Last time.Time // capture timestamps of the first and last frame
	Rules       []RuleResult
	Allow       Counts
	Deny        Counts // dropped by the deny list; shadow-dropped in mode: shadow
	Unmatched   Counts
	Malformed   Counts // short frames included
	// MalformedDropped: the malformed frames the policy's unparsed action
	// or limit dropped (the rest passed).
	MalformedDropped Counts
	// Unparsed counts what the parser could not judge, by maps.UnparsedKind.
	Unparsed [maps.UnparsedKinds]Counts
	NonIP    Counts
	// Banned: frames of banned sources (dropped; shadow-dropped for a
	// shadow ban). Bans are the bans rules started, in capture order.
	Banned    Counts
	Bans      []BanEvent
	Top       []SourceDrops
	Explained []Explanation
	// Things about the capture that affect how the numbers read.
	Short     Counts // frames shorter than an Ethernet header (in Malformed too)
	Truncated int    // frames captured shorter than they were on the wire
	Cut       int    // frames longer than a test run takes, which the kernel cut
	Backwards int    // frames stamped earlier than the frame before them
	NoTime    int    // frames without a timestamp, run at the previous frame's time
	// NoLinkLayer: frames captured without an Ethernet header (Linux
	// cooked, raw IP), run behind a synthesised one.
	NoLinkLayer int
	// Outgoing: frames the capturing host sent, which an XDP program never
	// sees: counted (captured bytes, with an Ethernet header), not run.
	Outgoing Counts
	// CutOff: the capture ended inside a record; the report covers the
	// frames before it.
	CutOff     *CutOff
	MaxSources uint32
	TrackAfter uint32
	// Sources is what the limiter held for Options.Sources at the end of
	// the capture, on the capture's clock.
	Sources []maps.Source
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

// probeSize is longer than any frame a test run passes whole to a program
// that does not handle fragmented buffers (xdp.frags).
const probeSize = 16 << 10

// probeLinear measures how much of a long frame the program sees. The
// kernel test-runs at most a page less head- and tailroom in the linear
// buffer (3520 bytes on x86-64) and passes the rest as fragments, which the
// program, like on a real NIC without multi-buffer support, does not see: a
// long frame is counted, and charged to byte limits, as its linear part.
// The probe is a non-IP frame; the program counts its length.
func probeLinear(l *maps.Limiter) (int, error) {
	before, err := l.Counters()
	if err != nil {
		return 0, err
	}
	frame := make([]byte, probeSize)
	binary.BigEndian.PutUint16(frame[12:], etherNonIP)
	if _, err := l.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: 1}); err != nil {
		return 0, fmt.Errorf("measuring the test-run frame size: %w", err)
	}
	after, err := l.Counters()
	if err != nil {
		return 0, err
	}
	n := after[maps.CounterNonIP].Bytes - before[maps.CounterNonIP].Bytes
	if n < ethHeaderLen || n > probeSize {
		return 0, fmt.Errorf("measuring the test-run frame size: the program counted %d bytes of a %d-byte frame", n, probeSize)
	}
	return int(n), nil
}

// XDP return codes.
const (
	xdpDrop = 1
	xdpPass = 2
	xdpTX   = 3 // answered: a SYN cookie, a reset, an ICMP error
)

func xdpAction(v maps.Verdict) uint32 {
	switch v {
	case maps.VerdictDrop:
		return xdpDrop
	case maps.VerdictCookie, maps.VerdictReject:
		return xdpTX
	}
	return xdpPass
}

// banStarted says whether the decision started a ban: a rule with a ban
// refused the frame (the datapath bans at every refusal of such a rule).
func banStarted(p *policy.Policy, d maps.Decision, data []byte) (BanEvent, bool) {
	if d.Why != maps.WhyRule || d.Verdict == maps.VerdictPass || d.Rule < 0 || d.Rule >= len(p.Rules) {
		return BanEvent{}, false
	}
	r := p.Rules[d.Rule]
	src := sourceOf(data)
	if r.Ban == nil || !src.IsValid() {
		return BanEvent{}, false
	}
	bits := r.Ban.IPv6Prefix
	if src.Is4() {
		bits = r.Ban.IPv4Prefix
	}
	pfx, _ := src.Prefix(bits)
	return BanEvent{For: r.Ban.For, Prefix: pfx, Rule: r.Name, Shadow: d.Verdict == maps.VerdictShadow}, true
}

func (r *Report) tally(d maps.Decision, bytes int) error {
	switch d.Why {
	case maps.WhyNonIP:
		r.NonIP.add(bytes)
	case maps.WhyMalformed:
		r.Malformed.add(bytes)
	case maps.WhyAllow:
		r.Allow.add(bytes)
	case maps.WhyDeny:
		r.Deny.add(bytes)
	case maps.WhyUnmatched:
		r.Unmatched.add(bytes)
	case maps.WhyBan:
		r.Banned.add(bytes)
	case maps.WhyRule:
		if d.Rule < 0 || d.Rule >= len(r.Rules) {
			return fmt.Errorf("decided by rule %d, but the policy has %d", d.Rule, len(r.Rules))
		}
		rr := &r.Rules[d.Rule]
		switch d.Verdict {
		case maps.VerdictPass:
			rr.Pass.add(bytes)
		case maps.VerdictDrop:
			rr.Drop.add(bytes)
		case maps.VerdictShadow:
			rr.Shadow.add(bytes)
		case maps.VerdictCookie:
			rr.Cookie.add(bytes)
		case maps.VerdictReject:
			rr.Reject.add(bytes)
		default:
			return fmt.Errorf("unknown verdict %v", d.Verdict)
		}
		if d.Verdict != maps.VerdictPass {
			if d.Level < 0 || d.Level >= len(rr.Refused) {
				return fmt.Errorf("refused by level %d of rule %s, which has %d", d.Level, rr.Name, len(rr.Refused))
			}
			rr.Refused[d.Level]++
		}
	default:
		return fmt.Errorf("unknown decision %v", d.Why)
	}
	return nil
}

// crossCheck compares the tally of recorded decisions with the counters
// the program keeps itself. They agree unless a decision was not recorded
// (a path that returns without recording would leave the previous frame's
// decision in place), which would make the report wrong.
func (r *Report) crossCheck(l *maps.Limiter, base map[maps.Counter]maps.CounterValue) error {
	stats, err := l.RuleStats()
	if err != nil {
		return err
	}
	if len(stats) != len(r.Rules) {
		return fmt.Errorf("the program holds %d rules, the policy has %d", len(stats), len(r.Rules))
	}
	for i, s := range stats {
		rr := r.Rules[i]
		for v, c := range map[maps.Verdict]Counts{maps.VerdictPass: rr.Pass, maps.VerdictDrop: rr.Drop,
			maps.VerdictShadow: rr.Shadow, maps.VerdictCookie: rr.Cookie, maps.VerdictReject: rr.Reject} {
			if got := s.Verdicts[v]; got.Packets != c.Packets || got.Bytes != c.Bytes {
				return fmt.Errorf("rule %s: the program counted %v %d packets, %d bytes; its recorded decisions add up to %d, %d",
					rr.Name, v, got.Packets, got.Bytes, c.Packets, c.Bytes)
			}
		}
	}
	cs, err := l.Counters()
	if err != nil {
		return err
	}
	for c, v := range base {
		cs[c] = maps.CounterValue{Packets: cs[c].Packets - v.Packets, Bytes: cs[c].Bytes - v.Bytes}
	}
	deny := cs[maps.CounterDeny]
	deny.Packets += cs[maps.CounterDenyShadow].Packets
	deny.Bytes += cs[maps.CounterDenyShadow].Bytes
	// Short frames never ran.
	malformed := Counts{r.Malformed.Packets - r.Short.Packets, r.Malformed.Bytes - r.Short.Bytes}
	for _, c := range []struct {
		name string
		got  maps.CounterValue
		want Counts
	}{
		{"allow", cs[maps.CounterAllow], r.Allow},
		{"deny", deny, r.Deny},
		{"unmatched", cs[maps.CounterUnmatched], r.Unmatched},
		{"malformed", cs[maps.CounterMalformed], malformed},
		{"non-IP", cs[maps.CounterNonIP], r.NonIP},
		{"ban", maps.CounterValue{Packets: cs[maps.CounterBanDrop].Packets + cs[maps.CounterBanShadow].Packets,
			Bytes: cs[maps.CounterBanDrop].Bytes + cs[maps.CounterBanShadow].Bytes}, r.Banned},
	} {
		if c.got.Packets != c.want.Packets || c.got.Bytes != c.want.Bytes {
			return fmt.Errorf("%s: the program counted %d packets, %d bytes; its recorded decisions add up to %d, %d",
				c.name, c.got.Packets, c.got.Bytes, c.want.Packets, c.want.Bytes)
		}
	}
	return nil
}

// padToWire restores a frame the capture's snap length cut to its length on
// the wire (at most max, what a test run takes), with zeros: the parser
// checks the IP length against the frame, as the stack does, and would
// otherwise count every snapped frame as truncated. Headers are what
// limiting reads, and snap lengths keep them.
func padToWire(data []byte, wire, max int) []byte {
	n := min(wire, max)
	if len(data) >= n {
		return data
	}
	return append(append(make([]byte, 0, n), data...), make([]byte, n-len(data))...)
}
