// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/xdplimit/xdplimit/pktgen"
)

// dropLine is the part of a drop-log line the test checks (docs/logging.md).
type dropLine struct {
	Event     string `json:"event"`
	Interface string `json:"interface"`
	Rule      string `json:"rule"`
	Level     *int   `json:"level"`
	Action    string `json:"action"`
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	Proto     string `json:"proto"`
	Sport     int    `json:"sport"`
	Dport     int    `json:"dport"`
	Len       int    `json:"len"`
	TTL       int    `json:"ttl"`
	RateCap   uint64 `json:"rate_cap"`
	Backlog   uint64 `json:"backlog"`
	Ring      uint64 `json:"ring"`
}

// The binary's --log-drops under a flood from one source: every line names
// the flood's packet, and the lines and the samples the reader reported
// lost (to the ring, the cap, the queue) add up to the datapath's one in
// 64 of what the rule dropped.
func TestAttachLogDrops(t *testing.T) {
	l := newLab(t, 1)
	path := filepath.Join(t.TempDir(), "drops.jsonl")
	p := l.attach(t, "log: {sample: 1/64, max_per_second: 100000}\nrules:\n  - name: flood\n"+
		"    limit: {algorithm: token_bucket, rate: 1/m, burst: 1}\n", "--log-drops="+path)
	l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(400_000))
	_, drop, _ := l.ruleCounts(t, "flood")
	// No wait for the reader's next poll: the log's close reads what it
	// has not, as its first poll read what the limiter sampled before the
	// log started.
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("attach: %v", err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, _ := f.Stat(); st.Mode().Perm() != 0o640 {
		t.Errorf("log file mode %v, want 0640", st.Mode().Perm())
	}
	var lines, lost uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d dropLine
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		switch d.Event {
		case "suppressed":
			lost += d.RateCap + d.Backlog + d.Ring
		case "drop":
			lines++
			want := dropLine{Event: "drop", Interface: l.PeerName, Rule: "flood", Level: d.Level, Action: "drop",
				Src: l.Addr.String(), Dst: l.PeerAddr.String(), Proto: "udp", Sport: 40000, Dport: 9,
				Len: 20 + 8 + 18, TTL: 64}
			if d != want || d.Level == nil || *d.Level != 0 {
				t.Fatalf("line %q\nwant the flood's packet: %+v", sc.Text(), want)
			}
		default:
			t.Fatalf("unknown event in %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d drops, %d lines, %d samples lost (ring, cap, queue)", drop, lines, lost)
	if lines == 0 {
		t.Fatal("no drop lines")
	}
	// Each drop is sampled on its own with probability 1/64: the count is
	// binomial, and five of its standard deviations (12% of the VM's
	// ~50k-drop flood, 4% of the host's 400k) still fail a missed start
	// (a quarter of the samples here once) or a wrong rate.
	n, q := float64(drop), 1.0/64
	within(t, "lines and lost samples", float64(lines+lost), n*q, 5*math.Sqrt(n*q*(1-q))/(n*q))
}
