// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/metrics"
	"github.com/xdplimit/xdplimit/pktgen"
)

type timing struct {
	name, note string
	d          sample // seconds
	err        string
}

type memRow struct {
	name               string
	ipv4               bool // holds per-source IPv4 keys (the default key)
	table              uint32
	keySize, valueSize uint32
	memlock            uint64
}

func (m memRow) perEntry() float64 { return float64(m.memlock) / float64(m.table) }

type controlResults struct {
	Timings []*timing
	Memory  []memRow
	// Sources the scrape measurements had in the table, counted by walking it.
	Tracked int
}

func (r *controlResults) add(name, note string) *timing {
	t := &timing{name: name, note: note}
	r.Timings = append(r.Timings, t)
	return t
}

// timed runs fn reps times and records each duration.
func (t *timing) timed(reps int, fn func() error) {
	for range reps {
		start := time.Now()
		err := try(fn)
		d := time.Since(start)
		if err != nil {
			t.err = errString(err)
			return
		}
		t.d = append(t.d, d.Seconds())
	}
}

// controlBench measures what an operator waits for: attach, detach and
// reload through the loader on a veth, a /metrics scrape with a full table,
// and the kernel's memory for the source table.
func controlBench(e *env, quick bool) (*controlResults, error) {
	res := &controlResults{}
	reps := 5
	if quick {
		reps = 2
	}
	var errs []error
	if err := attachReload(e, res, reps); err != nil {
		errs = append(errs, err)
	}
	if err := scrapeMemory(e, res, quick); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// attachReload times attach and detach through the loader on a veth, then
// reloads of large policies into the attached program.
func attachReload(e *env, res *controlResults, reps int) error {
	// The loader pins under the interface's name in the host's bpffs, and
	// locks it in /run/xdplimit: the name is unique to this process.
	v, err := e.vethPair("xbc0", attachIfname(), 15)
	if err != nil {
		return err
	}
	one, err := loaderPolicy(oneRule(tbDrop), nil)
	if err != nil {
		return err
	}
	at := &attached{v: v, cfg: loader.Config{Interface: v.PeerName, Mode: loader.ModeNative, Clock: maps.ClockCoarse, Policy: one}}
	defer at.detach()
	if err := at.timeAttachDetach(res, reps); err != nil {
		return err
	}
	if err := at.attach(); err != nil {
		return err
	}
	at.timeReloads(e, res, reps)
	return at.detach()
}

// loaderPolicy compiles yaml into the policy the loader takes.
func loaderPolicy(yaml string, files map[string][]byte) (loader.Policy, error) {
	img, p, err := compilePolicy(yaml, files)
	if err != nil {
		return loader.Policy{}, err
	}
	return loader.Policy{Image: img, Path: p.Path, SHA256: p.SHA256}, nil
}

// attached is xdplimit as the loader attaches it to the receiving end of
// v, a while it is on.
type attached struct {
	v   *netns.Veth
	cfg loader.Config
	a   *loader.Attachment
}

func (at *attached) attach() error {
	return at.v.PeerNS.Do(func() error {
		var err error
		at.a, err = loader.Attach(at.cfg)
		return err
	})
}

// detach returns once the interface is free again. Detach returns before
// the program is off the interface: the last reference to the link is the
// pin, and bpffs frees a removed inode after an RCU grace period. What an
// operator waits for is the interface free again, so the timing includes
// that.
func (at *attached) detach() error {
	if at.a == nil {
		return nil
	}
	err := at.a.Detach()
	at.a = nil
	if err != nil {
		return err
	}
	v := at.v
	return v.PeerNS.Do(func() error {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			l, err := netlink.LinkByName(v.PeerName)
			if err != nil {
				return err
			}
			if x := l.Attrs().Xdp; x == nil || !x.Attached {
				return nil
			}
		}
		return fmt.Errorf("%s still has an XDP program 10 s after detach", v.PeerName)
	})
}

// timeAttachDetach times reps attaches, each followed by a timed detach.
func (at *attached) timeAttachDetach(res *controlResults, reps int) error {
	ta := res.add("attach (load, verify, create the state tables, policy, attach, pin)", "loader.Attach on a veth, native mode, default --max-sources (1M), 1 rule")
	td := res.add("detach", "loader.Detach, until the interface has no XDP program")
	for range reps {
		ta.timed(1, at.attach)
		if ta.err != "" {
			break
		}
		td.timed(1, at.detach)
		if td.err != "" {
			break
		}
	}
	if ta.err != "" || td.err != "" {
		return fmt.Errorf("attach: %s%s", ta.err, td.err)
	}
	return nil
}

// timeReloads times the compile and the apply of large policies. Reloads
// alternate between two policies that differ, so that every reload writes
// a whole generation and clears the older one.
func (at *attached) timeReloads(e *env, res *controlResults, reps int) {
	for _, r := range []struct {
		name, note string
		yaml       func(variant int) (string, map[string][]byte)
	}{
		{"reload, 256 rules", "parse + compile + apply of a 256-rule policy",
			func(v int) (string, map[string][]byte) {
				return manyRules(256, fmt.Sprintf("{algorithm: token_bucket, rate: %d/s, burst: 10}", 10+v)), nil
			}},
		{"reload, 100k allow-list entries", "parse + compile + apply of 100k random /32s (netset file)",
			func(v int) (string, map[string][]byte) {
				return "allow: {files: [allow.netset]}\n" + oneRule(tbDrop), map[string][]byte{"allow.netset": allowList(100_000, uint64(v+1))}
			}},
	} {
		e.Logf("control: %s", r.name)
		var pols [2]loader.Policy
		tp := res.add(r.name+": parse and compile", "policy.Parse + compiler.Compile")
		for i := range pols {
			yaml, files := r.yaml(i)
			tp.timed(1, func() error {
				var err error
				pols[i], err = loaderPolicy(yaml, files)
				return err
			})
		}
		if tp.err != "" {
			continue
		}
		tr := res.add(r.name+": apply", "Attachment.Reload: write the inactive generation, switch")
		n := 0
		tr.timed(1, func() error { n++; return at.a.Reload(pols[n%2]) }) // warm: both generations in use
		tr.d = nil
		tr.timed(reps, func() error { n++; return at.a.Reload(pols[n%2]) })
	}
}

// scrapeMemory fills a 1M-entry table through the program itself (the
// benchmark rotation makes each of 2^20 runs a new source), times /metrics,
// and reads the table's memory as the kernel accounts it. The rules' burst
// of one packet makes the datapath track a source from its first packet
// (the admission sketch is off for limits that low), so each run inserts.
func scrapeMemory(e *env, res *controlResults, quick bool) error {
	scrapes := 20
	if quick {
		scrapes = 5
	}
	base := netip.MustParseAddr("100.64.0.0")
	frame := pktgen.UDP4(base, microDst4, 4000, 53, 18)
	for _, rules := range []int{1, 256} {
		l, err := loadLimiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: 1 << 20, BenchRotate: 1 << 20, BenchBase: base},
			manyRules(rules, tbDrop), nil)
		if err != nil {
			return err
		}
		defer l.Close()
		e.Logf("control: filling a 1M-entry table (%d rules)", rules)
		if err := onPinnedThread(0, func() error {
			_, _, err := l.Program().Benchmark(frame, 1<<20, nil)
			return err
		}); err != nil {
			return err
		}
		if rules == 1 {
			n, err := l.TrackedSources()
			if err != nil {
				return err
			}
			res.Tracked = n
		}
		ex := metrics.New(nil)
		if err := ex.Add("bench0", l, 0); err != nil {
			return err
		}
		h := ex.Handler()
		size := 0
		t := res.add(fmt.Sprintf("/metrics scrape, 1M tracked sources, %d rule(s)", rules), "HTTP GET through the exporter's handler, encoding included")
		t.timed(scrapes, func() error {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
			if w.Code != 200 {
				return fmt.Errorf("status %d", w.Code)
			}
			b, _ := io.ReadAll(w.Body)
			size = len(b)
			return nil
		})
		t.note += fmt.Sprintf(" (%d kB)", size/1000)
	}

	for _, size := range []uint32{1 << 16, 1 << 20} {
		l, err := loadLimiter(maps.Options{Clock: maps.ClockCoarse, MaxSources: size}, oneRule(tbDrop), nil)
		if err != nil {
			return err
		}
		rows, err := stateTables(l)
		l.Close()
		if err != nil {
			return err
		}
		res.Memory = append(res.Memory, rows...)
	}
	return nil
}

// ipv4Table names the table that holds per-source IPv4 keys, where the
// datapath has one of its own (an 8-byte key); without it they share the
// one state table. A literal, not a generated constant, so that the
// harness builds against either layout.
const ipv4Table = "xdpl_sources4"

// stateTables reads the memory of the state tables of l (the LRU hashes
// and the IPv4 table)
// as the kernel accounts it: `memlock` in the map's fdinfo, the figure
// `bpftool map show` prints.
func stateTables(l *maps.Limiter) ([]memRow, error) {
	var rows []memRow
	for _, name := range maps.MapNames {
		m := l.Map(name)
		ipv4 := name == ipv4Table || l.Map(ipv4Table) == nil && name == maps.SourcesMap
		if m == nil || m.Type() != ebpf.LRUHash && !ipv4 {
			continue
		}
		info, err := m.Info()
		if err != nil {
			return nil, err
		}
		ml, ok := info.Memlock()
		if !ok {
			return nil, fmt.Errorf("the kernel reports no memlock for %s", name)
		}
		table := info.MaxEntries
		if m.Type() == ebpf.Array { // sets of keys (bpf/table4.h)
			table = maps.Capacity4(m)
		}
		rows = append(rows, memRow{name: name, ipv4: ipv4, table: table, keySize: info.KeySize, valueSize: info.ValueSize, memlock: ml})
	}
	if len(rows) == 0 {
		return nil, errors.New("no state table among the limiter's maps")
	}
	return rows, nil
}
