// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/pktgen"
)

// TestReloadOnFileChange edits the policy the way editors save, by writing
// a new file and renaming it over the old one, under a running flood and
// without any SIGHUP: attach --watch must notice and reload. An invalid edit then
// changes nothing, and is reported in the log and in the metrics.
func TestReloadOnFileChange(t *testing.T) {
	r := newFileReload(t)
	r.reloadUnderFlood(t)
	r.identicalSaves(t)
	r.invalidEdit(t)
}

// fileReload is the lab of TestReloadOnFileChange: an attach --watch of
// the tight policy, which its steps edit.
type fileReload struct {
	l            *lab
	p            *proc
	path         string
	tight, loose string
	frame        []byte
}

func newFileReload(t *testing.T) *fileReload {
	l := newLab(t, 1)
	r := &fileReload{l: l, path: filepath.Join(t.TempDir(), "policy.yaml"), frame: l.udpFrame(18)}
	src := l.Addr.String() + "/32"
	// tight admits almost none of a flood; loose admits all of it.
	r.tight = fmt.Sprintf(`
rules:
  - name: a
    match: {src_cidrs: [%s]}
    limit: {algorithm: token_bucket, rate: 10/s, burst: 10}
`, src)
	r.loose = fmt.Sprintf(`
rules:
  - name: a
    match: {src_cidrs: [%s]}
    limit: {algorithm: token_bucket, rate: 10M/s, burst: 10M}
`, src)
	renameOverFile(t, r.path, r.tight)
	r.p = l.start(t, "attach", l.PeerName, "--policy", r.path, "--watch")
	r.p.waitAttached(t)
	return r
}

// reloadUnderFlood: the tight limit drops a flood that runs until stopped,
// so that it is running when the edit to loose lands and goes on under the
// new policy for a while, which passes all of it.
func (r *fileReload) reloadUnderFlood(t *testing.T) {
	l, p := r.l, r.p
	lost0 := l.ringDrops(t)
	res, stopFlood := startFlood(t, l, r.frame)
	r.waitDropping(t)
	passBefore, _, _ := l.ruleCounts(t, "a")
	renameOverFile(t, r.path, r.loose)
	p.waitFor(t, `trigger="file change"`, testutil.MachineWait)
	reloaded := time.Now()
	passAtReload, dropAtReload, _ := l.ruleCounts(t, "a")
	select {
	case r := <-res:
		t.Fatalf("the flood (%v) ended before the reload", r)
	default:
	}
	time.Sleep(time.Second)
	stopFlood()
	sent := <-res
	passAfter, dropAfter, _ := l.ruleCounts(t, "a")
	span := time.Since(reloaded)
	lost := l.ringDrops(t) - lost0
	t.Logf("flood %v; passed %d before the edit, %d when the reload was logged, %d at the end (%d dropped, %d after the reload) over %v; veth dropped %d",
		sent, passBefore, passAtReload, passAfter, dropAfter, dropAfter-dropAtReload, span.Round(time.Millisecond), lost)
	if strings.Contains(p.out.String(), "trigger=SIGHUP") {
		t.Errorf("a SIGHUP reload happened; only the file changed:\n%s", p.out)
	}
	// Judged by what the flood brought after the reload, whatever its
	// rate on this machine: the loose limit passes all of it, and the
	// tight one, still in force, would pass at most its burst and 10/s
	// over the span from the reload's log line to the last count.
	tightAllows := 10 + 10*span.Seconds()
	if got := float64(passAfter - passAtReload); got <= tightAllows {
		t.Errorf("after the reload only %.0f more packets passed, no more than the old limit allows over %v (%.0f): the new limit is not in force",
			got, span.Round(time.Millisecond), tightAllows)
	}
	if dropAfter != dropAtReload {
		t.Errorf("%d packets dropped after the reload, %d passed: the new limit is not in force",
			dropAfter-dropAtReload, passAfter-passAtReload)
	}
	checkDelivered(t, passAfter+dropAfter, sent.Sent, lost)
	r.wantReloads(t, "success", 1)
}

// waitDropping waits until the flood is being dropped by the tight limit.
func (r *fileReload) waitDropping(t *testing.T) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, drop, _ := r.l.ruleCounts(t, "a"); drop > 1000 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the flood never reached the limiter")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// identicalSaves: saving the same bytes again, or touching the file,
// reloads nothing.
func (r *fileReload) identicalSaves(t *testing.T) {
	renameOverFile(t, r.path, r.loose)
	now := time.Now()
	if err := os.Chtimes(r.path, now, now); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := strings.Count(r.p.out.String(), "msg=reloaded"); n != 1 {
		t.Errorf("%d reloads logged after saving identical contents, want 1:\n%s", n, r.p.out)
	}
}

// invalidEdit: an invalid edit is reported, and the loose policy stays in
// force, which a flood during and after the failed reload shows.
func (r *fileReload) invalidEdit(t *testing.T) {
	l, p := r.l, r.p
	before, dropBefore, _ := l.ruleCounts(t, "a")
	lost0 := l.ringDrops(t)
	res, stopFlood := startFlood(t, l, r.frame)
	renameOverFile(t, r.path, strings.Replace(r.loose, "10M/s", "10M/sec", 1))
	p.waitFor(t, "reload failed", testutil.MachineWait)
	time.Sleep(500 * time.Millisecond)
	stopFlood()
	sent := <-res
	after, dropAfterFail, _ := l.ruleCounts(t, "a")
	lost := l.ringDrops(t) - lost0
	t.Logf("flood across the invalid edit %v; passed %d, dropped %d; veth dropped %d", sent, after-before, dropAfterFail-dropBefore, lost)
	checkDelivered(t, after-before, sent.Sent, lost)
	if dropAfterFail != dropBefore {
		t.Errorf("after the invalid edit, %d of %d packets passed and %d were dropped: the policy in force changed",
			after-before, sent.Sent, dropAfterFail-dropBefore)
	}
	for _, want := range []string{`trigger="file change"`, `10M/sec`, "is not a rate", "the previous policy stays in force"} {
		if line := lastLine(p.out.String(), "reload failed"); !strings.Contains(line, want) {
			t.Errorf("the failure log lacks %q: %s", want, line)
		}
	}
	r.wantReloads(t, "failure", 1)
	r.wantReloads(t, "success", 1)
}

// wantReloads checks the exporter's count of reloads with result.
func (r *fileReload) wantReloads(t *testing.T, result string, want float64) {
	t.Helper()
	if got := scrapeMetric(t, r.l, `xdplimit_policy_reloads_total{interface="`+r.l.PeerName+`",result="`+result+`"}`); got != want {
		t.Errorf("%v %s reloads in the metrics, want %v", got, result, want)
	}
}

// startFlood floods the receiver from a goroutine until stop is called;
// the result comes on res.
func startFlood(t *testing.T, l *lab, frame []byte) (res chan pktgen.Result, stop func()) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	res = make(chan pktgen.Result, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// More than the generator's timeout lets it send: only stop
		// or the timeout ends it.
		r, err := l.gen.Send(ctx, l.NS.Path(), l.Name, frame, 1<<40)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("flood: %v", err)
		}
		res <- r
	}()
	// A test that fails half-way still stops its flood before the lab
	// goes away.
	t.Cleanup(func() {
		stop()
		<-done
	})
	return res, stop
}

// renameOverFile replaces path as editors save: a temporary file in the
// same directory, renamed over the original in one step.
func renameOverFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".swp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func lastLine(out, substr string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return lines[i]
		}
	}
	return ""
}

// scrapeMetric reads one series from the exporter attach serves on the
// receiver namespace's loopback. The connection is made on a thread inside
// that namespace (a socket belongs to the namespace it was created in);
// an http.Client would dial from a goroutine of its own, outside it.
func scrapeMetric(t *testing.T, l *lab, series string) float64 {
	t.Helper()
	var body []byte
	err := l.PeerNS.Do(func() error {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:9740", 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			return err
		}
		body, err = io.ReadAll(conn)
		return err
	})
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			var v float64
			if _, err := fmt.Sscan(value, &v); err != nil {
				t.Fatalf("metric %s: %q: %v", series, value, err)
			}
			return v
		}
	}
	t.Fatalf("no series %s in:\n%s", series, body)
	return 0
}

// SIGHUP under a flood: a rule whose limit is unchanged keeps its state, one
// whose limit changed starts from its new parameters, and an invalid file
// changes nothing.
func TestReloadUnderFlood(t *testing.T) {
	l := newLab(t, 1)
	path := writePolicy(t, `
rules:
  - name: a
    match: {src_cidrs: [198.18.0.1/32]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 100}
`)
	p := l.start(t, "attach", l.PeerName, "--policy", path)
	p.waitAttached(t)
	began := time.Now()
	res := l.flood(t, l.udpFrame(18), pktgen.Sources{}, floodCount(1_000_000))
	passA, _, _ := l.ruleCounts(t, "a")
	t.Logf("before reload: %v, passed %d", res, passA)

	// Invalid: reported, the old policy stays.
	if err := os.WriteFile(path, []byte("rules: [ {name: a, limit: {algorithm: token_bucket, rate: 10/sec}} ]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitFor(t, "reload failed", testutil.MachineWait)

	// Valid: a keeps its limit (and its bucket), b is new.
	if err := os.WriteFile(path, []byte(`
rules:
  - name: a
    match: {src_cidrs: [198.18.0.1/32]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 100}
  - name: b
    match: {src_cidrs: [198.18.0.9/32]}
    limit: {algorithm: token_bucket, rate: 50000/s, burst: 5000}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	waitReloads(t, p, 1, testutil.MachineWait)
	checkKeptBucket(t, l, began, passA)
	checkNewRule(t, l)
	// A changed limit starts from its new parameters: a fresh burst.
	if err := os.WriteFile(path, []byte(`
rules:
  - name: a
    match: {src_cidrs: [198.18.0.1/32]}
    limit: {algorithm: token_bucket, rate: 1/s, burst: 300}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	waitReloads(t, p, 2, testutil.MachineWait)
	checkFreshBurst(t, l)
}

// checkKeptBucket: rule a, whose limit the reload kept, kept its bucket.
// The bucket is empty after the flood that began at began (passA admitted
// by then) and refills one a second: kept state admits its burst and one a
// second since, however long the reloads took; a bucket reset after the
// flood admits another burst of 100. A second is the rate, and not a
// tenth, so that a reload a hundred times slower than here (about a
// second) still tells the two apart.
func checkKeptBucket(t *testing.T, l *lab, began time.Time, passA uint64) {
	t.Helper()
	l.flood(t, l.udpFrame(18), pktgen.Sources{}, 150)
	passA2, _, _ := l.ruleCounts(t, "a")
	span := time.Since(began)
	kept := 100 + span.Seconds() + 1 // burst, 1/s, and a token begun
	t.Logf("rule a admitted %d of 150 after the reload, %d in all over %v: a kept bucket allows %.0f",
		passA2-passA, passA2, span.Round(time.Millisecond), kept)
	if float64(passA2) > kept {
		t.Errorf("rule a admitted %d of 150 right after the reload, %d in all over %v where its bucket allows %.0f: its bucket was reset",
			passA2-passA, passA2, span.Round(time.Millisecond), kept)
	}
	if kept >= float64(passA)+100 {
		t.Fatalf("the flood and the reloads took %v: a kept bucket refills as much as a reset one, the test cannot tell them apart", span)
	}
}

// checkNewRule: rule b, new in the reload, is in force: another source
// passes under it.
func checkNewRule(t *testing.T, l *lab) {
	t.Helper()
	f := pktgen.Frame{SrcMAC: l.MAC, DstMAC: l.PeerMAC, Src: netip.MustParseAddr("198.18.0.9"), Dst: l.PeerAddr,
		SrcPort: 40000, DstPort: 9, Payload: 18}
	// Compared with what was sent: the generator may send a few more
	// than asked (it repeats an interrupted call whole).
	lost0 := l.ringDrops(t)
	resB := l.flood(t, f.MustBuild(), pktgen.Sources{}, 1000)
	passB, dropB, _ := l.ruleCounts(t, "b")
	checkDelivered(t, passB, resB.Sent, l.ringDrops(t)-lost0)
	if dropB != 0 {
		t.Errorf("rule b (5000 burst) dropped %d of %d", dropB, resB.Sent)
	}
}

// checkFreshBurst: rule a, its burst changed to 300, admits a fresh burst.
func checkFreshBurst(t *testing.T, l *lab) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		before, _, _ := l.ruleCounts(t, "a")
		l.flood(t, l.udpFrame(18), pktgen.Sources{}, 400)
		after, _, _ := l.ruleCounts(t, "a")
		if after-before >= 290 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after changing a's burst to 300, it admits %d of 400", after-before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReloads waits until the attach has logged n successful reloads.
func waitReloads(t *testing.T, p *proc, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(p.out.String(), "msg=reloaded") < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d reloads logged after %v:\n%s", n, timeout, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
