// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/autopilot"
	"github.com/xdplimit/xdplimit/pktgen"
)

// TestAutopilotLabTraffic runs the live lab's pieces with no limiter: the
// real clients lose nothing without a flood, and every flood's frames
// reach the receiving end unchanged, each with the trait it is meant to
// carry, read as the autopilot reads frames (autopilot.FromFrame). What
// autopilot.Find makes of each flood against the real traffic is logged,
// not judged: that is the autopilot's test.
func TestAutopilotLabTraffic(t *testing.T) {
	l := newLab(t, 1)
	tap := startLabTap(t, l)
	sc := autopilotScale()
	rt := startRealTraffic(t, l, sc.traffic)
	time.Sleep(5 * time.Second)
	quiet := rt.Snapshot()
	t.Logf("no flood, no limiter: %v", quiet)
	judgeQuiet(t, quiet, rt.cfg)
	baseline := tap.takeBaseline()
	if stray := tap.takeAttack(); len(stray) > 0 {
		t.Errorf("%d frames from %v arrived before any flood", len(stray), attackNet)
	}

	const poolSize = 4096
	rate, count := sc.floodRate, uint64(2*sc.floodRate)
	for i, sh := range attackShapes {
		pool := sh.build(l.attackEnds(), uint64(i+1), poolSize)
		for _, p := range poolProblems(pool) {
			t.Errorf("%s: %s", sh.name, p)
		}
		before, ring0 := rt.Snapshot(), l.ringDrops(t)
		begin := time.Now()
		sent, err := l.startAttack(t, pool, rate, count, 10*time.Second).Wait()
		took := time.Since(begin)
		tap.waitAttack(sent)
		got, during := tap.takeAttack(), rt.Snapshot().sub(before)
		tapDrops, ring := tap.drops(), l.ringDrops(t)-ring0
		t.Logf("%s: sent %d in %v (%.0f/s); %d arrived (the tap dropped %d, the veth %d); real traffic meanwhile %v",
			sh.name, sent, took.Round(time.Millisecond), float64(sent)/took.Seconds(), len(got), tapDrops, ring, during)
		if err != nil || sent != count {
			t.Errorf("%s: sent %d of %d (%v)", sh.name, sent, count, err)
		}
		// veth turns frames away when the receiver's ring is full
		// (under emulation, now and then): they never reach XDP either.
		if (uint64(len(got))+ring)*1000 < sent*999 {
			t.Errorf("%s: %d of %d frames arrived, %d turned away by the veth", sh.name, len(got), sent, ring)
		}
		dst := autopilot.Dest{Addr: l.PeerAddr, Proto: sh.proto, Port: sh.port}
		samples, problems := shapeProblems(sh.name, dst, pool, got)
		for _, p := range problems {
			t.Errorf("%s: %s", sh.name, p)
		}
		base := slices.DeleteFunc(slices.Clone(baseline), func(s autopilot.Sample) bool { return s.Dst != dst })
		fp, err := autopilot.Find(dst, samples, base, autopilot.Config{})
		t.Logf("%s: autopilot.Find over %d samples and %d of the real traffic's: %v (%v)", sh.name, len(samples), len(base), fp, err)
	}

	total := rt.Stop()
	t.Logf("total: %v", total)
	if !total.Iperf.completed() || total.Iperf.Bytes == 0 {
		t.Errorf("the iperf3 transfer did not complete: %d of %d runs failed (%s), %d bytes", total.Iperf.Failed,
			total.Iperf.Runs, total.Iperf.Err, total.Iperf.Bytes)
	}
}

// judgeQuiet: with no flood and no limiter, the clients ran at about
// their rates and lost nothing.
func judgeQuiet(t *testing.T, c trafficCounts, cfg trafficConfig) {
	t.Helper()
	for _, x := range []struct {
		what       string
		sent, fail uint64
		rate       int
	}{{"DNS", c.DNS.Sent, c.DNS.Lost + c.DNS.Bad, cfg.DNSRate}, {"HTTP", c.HTTP.Sent, c.HTTP.Failed, cfg.HTTPRate}} {
		if want := uint64(0.5 * float64(x.rate) * c.Elapsed.Seconds()); x.sent < want {
			t.Errorf("%s: %d sent in %v, want at least %d", x.what, x.sent, c.Elapsed, want)
		}
		if x.fail != 0 {
			t.Errorf("%s: %d lost with no flood and no limiter", x.what, x.fail)
		}
	}
	if c.Iperf.Runs == 0 || c.Iperf.Failed != 0 || c.Iperf.Bytes == 0 {
		t.Errorf("iperf3: %d runs, %d failed (%s), %d bytes", c.Iperf.Runs, c.Iperf.Failed, c.Iperf.Err, c.Iperf.Bytes)
	}
}

// poolProblems: a pool's frames are distinct and spread over the
// sources and ports.
func poolProblems(pool [][]byte) []string {
	frames, srcs, ports := map[string]bool{}, map[[4]byte]bool{}, map[uint16]bool{}
	for _, b := range pool {
		frames[string(b)], srcs[[4]byte(b[26:30])] = true, true
		ports[binary.BigEndian.Uint16(b[34:])] = true
	}
	var p []string
	if len(frames) != len(pool) {
		p = append(p, fmt.Sprintf("%d distinct frames in a pool of %d", len(frames), len(pool)))
	}
	if len(srcs)*10 < len(pool)*9 || len(ports)*10 < len(pool)*9 {
		p = append(p, fmt.Sprintf("%d sources and %d ports in a pool of %d", len(srcs), len(ports), len(pool)))
	}
	return p
}

// shapeProblems decodes the frames that arrived and checks each against
// the pool it came from and its shape's trait; it returns the samples and
// what was wrong, with how many frames it was wrong in.
func shapeProblems(shape string, dst autopilot.Dest, pool, got [][]byte) ([]autopilot.Sample, []string) {
	inPool := make(map[string]bool, len(pool))
	for _, b := range pool {
		inPool[string(b)] = true
	}
	bad := map[string]int{}
	var samples []autopilot.Sample
	for _, b := range got {
		s, ok := autopilot.FromFrame(b, time.Now())
		if !ok {
			bad["not TCP or UDP"]++
			continue
		}
		samples = append(samples, s)
		for _, p := range frameProblems(shape, dst, b, &s) {
			bad[p]++
		}
		if !inPool[string(b)] {
			bad["changed on the way or not sent"]++
		}
	}
	if shape == "randomFlood" {
		for _, p := range spreadProblems(samples) {
			bad[p] = len(samples)
		}
	}
	var out []string
	for p, n := range bad {
		out = append(out, fmt.Sprintf("%s (%d of %d frames)", p, n, len(got)))
	}
	sort.Strings(out)
	return samples, out
}

// frameProblems: what is wrong with one frame of shape.
func frameProblems(shape string, dst autopilot.Dest, b []byte, s *autopilot.Sample) []string {
	var p []string
	check := func(ok bool, what string) {
		if !ok {
			p = append(p, what)
		}
	}
	check(s.Dst == dst, "not to "+dst.String())
	check(attackNet.Contains(netip.AddrFrom4([4]byte(b[26:30]))), "source not in "+attackNet.String())
	check(s.DSCP == 0, "DSCP not 0")
	check(pktgen.Checksum(0, b[14:14+int(b[14]&0xf)*4]) == 0, "wrong IP checksum")
	check(l4Sum(b) == 0, "wrong TCP/UDP checksum")
	switch shape {
	case "udpPrefixFlood":
		check(s.Length == 20+8+64 && string(s.Payload[:len(attackPrefix)]) == attackPrefix, "no 64-byte payload with the prefix")
	case "tcpWindowFlood":
		check(s.TCPFlags == uint8(pktgen.TCPSyn) && s.Window == 1024 && s.Options == "2" && s.TTL == 64,
			"not a SYN with window 1024, options [2], TTL 64")
	case "ttlLenFlood":
		check(s.TTL >= 50 && s.TTL <= 60 && s.Length >= 1200 && s.Length <= 1210, "TTL or length out of 50..60, 1200..1210")
	case "dnsQueryFlood":
		var d layers.DNS
		err := d.DecodeFromBytes(b[14+20+8:14+s.Length], gopacket.NilDecodeFeedback)
		check(err == nil && !d.QR && d.OpCode == layers.DNSOpCodeQuery && d.RD && len(d.Questions) == 1 &&
			d.ANCount+d.NSCount+d.ARCount == 0 && string(d.Questions[0].Name) == attackName &&
			d.Questions[0].Type == layers.DNSTypeA && d.Questions[0].Class == layers.DNSClassIN,
			"not one query for "+attackName+" A")
	case "randomFlood":
		check(s.TTL >= 1 && s.Length >= 100 && s.Length <= 1400, "TTL or length out of 1..255, 100..1400")
	}
	return p
}

// spreadProblems: no field the autopilot reads is shared by a fifth of
// the samples, nor for TTL and length a band as wide as it pins.
func spreadProblems(samples []autopilot.Sample) []string {
	fields := []struct {
		name string
		band uint64
		get  func(*autopilot.Sample) uint64
	}{
		{"ttl", 15, func(s *autopilot.Sample) uint64 { return uint64(s.TTL) }},
		{"length", 63, func(s *autopilot.Sample) uint64 { return uint64(s.Length) }},
		{"source port", 0, func(s *autopilot.Sample) uint64 { return uint64(s.SrcPort) }},
		{"ip id", 0, func(s *autopilot.Sample) uint64 { return uint64(s.IPID) }},
	}
	for i := range autopilot.PayloadBytes {
		fields = append(fields, struct {
			name string
			band uint64
			get  func(*autopilot.Sample) uint64
		}{fmt.Sprintf("payload[%d]", i), 0, func(s *autopilot.Sample) uint64 { return uint64(s.Payload[i]) }})
	}
	var p []string
	for _, f := range fields {
		vals := make([]uint64, len(samples))
		for i := range samples {
			vals[i] = f.get(&samples[i])
		}
		slices.Sort(vals)
		most := 0
		for i, j := 0, 0; j < len(vals); j++ {
			for vals[j]-vals[i] > f.band {
				i++
			}
			most = max(most, j-i+1)
		}
		if most*5 > len(vals) {
			p = append(p, fmt.Sprintf("%d samples share a %s within %d", most, f.name, f.band))
		}
	}
	return p
}

// labTap reads what reaches l's receiving end with a packet socket, as
// the stack gets it (after XDP, where one is attached): the floods' frames
// (from attackNet) whole, and the samples of the real clients' frames to
// ports 53 and 80, the normal traffic a fingerprint is judged against.
type labTap struct {
	fd       int
	client   netip.Addr
	done     chan struct{}
	stopOnce sync.Once
	stopping chan struct{}
	mu       sync.Mutex
	attack   [][]byte
	baseline []autopilot.Sample
}

func startLabTap(t *testing.T, l *lab) *labTap {
	t.Helper()
	tp := &labTap{client: l.Addr, done: make(chan struct{}), stopping: make(chan struct{})}
	err := l.PeerNS.Do(func() (err error) {
		// Protocol 0 until bound to the interface: nothing from elsewhere queues first.
		if tp.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		// A flood's seconds, should the reader fall behind.
		_ = unix.SetsockoptInt(tp.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		if err := unix.SetsockoptTimeval(tp.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(tp.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: l.PeerIndex})
	})
	if err != nil {
		t.Fatalf("tap: %v", err)
	}
	go tp.read()
	t.Cleanup(tp.stop)
	return tp
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (tp *labTap) read() {
	defer close(tp.done)
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-tp.stopping:
			return
		default:
		}
		n, from, err := unix.Recvfrom(tp.fd, buf, 0)
		if ll, ok := from.(*unix.SockaddrLinklayer); err != nil || n < 34 || ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		b := buf[:n]
		switch src := netip.AddrFrom4([4]byte(b[26:30])); {
		case attackNet.Contains(src):
			tp.mu.Lock()
			tp.attack = append(tp.attack, slices.Clone(b))
			tp.mu.Unlock()
		case src == tp.client:
			if s, ok := autopilot.FromFrame(b, time.Now()); ok && (s.Dst.Port == 53 || s.Dst.Port == labHTTPPort) {
				tp.mu.Lock()
				tp.baseline = append(tp.baseline, s)
				tp.mu.Unlock()
			}
		}
	}
}

func (tp *labTap) stop() {
	tp.stopOnce.Do(func() { close(tp.stopping); <-tp.done; unix.Close(tp.fd) })
}

// takeAttack returns the flood frames read since the last call.
func (tp *labTap) takeAttack() [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	a := tp.attack
	tp.attack = nil
	return a
}

func (tp *labTap) takeBaseline() []autopilot.Sample {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	b := tp.baseline
	tp.baseline = nil
	return b
}

// drops is what the socket's full buffer dropped since the last call.
func (tp *labTap) drops() uint64 {
	if st, err := unix.GetsockoptTpacketStats(tp.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		return uint64(st.Drops)
	}
	return 0
}

// waitAttack waits until n flood frames were read, or none came for
// 200 ms (lost on the way), for at most 5 s.
func (tp *labTap) waitAttack(n uint64) {
	last, still := -1, time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tp.mu.Lock()
		got := len(tp.attack)
		tp.mu.Unlock()
		if uint64(got) >= n {
			return
		}
		if got != last {
			last, still = got, time.Now()
		} else if time.Since(still) > 200*time.Millisecond {
			return
		}
	}
}
