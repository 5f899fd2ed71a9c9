// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/maps"
)

// The reflection guard against memcached, the largest amplifier: Debian's
// memcached in the client's namespace answers a get of a 1000-byte value
// over UDP, and copies of that very answer flood the listener from port
// 11211 and random reflector addresses, as an attack that fetched the
// value through many open servers would. The listener asked none of them;
// meanwhile its own gets to the real server are answered.

const (
	memcachedPort = 11211
	memcachedKey  = "reflected"
	// The listener sends at least memcachedGets gets under the flood, and
	// goes on until memcachedFlood forged frames have met the program:
	// on the host 500 gets take a fraction of a second, in which the
	// flood has hardly begun.
	memcachedGets  = 500
	memcachedFlood = 500000
	// memcachedFloodPort has no socket on the listener: a forged answer
	// that got through would be answered with a port unreachable.
	memcachedFloodPort = 40000
)

// startMemcached runs memcached in ns on addr, TCP and UDP, until the test
// ends. UDP is off unless -U names its port; run by root, memcached wants
// -u; one worker thread is enough.
func startMemcached(t *testing.T, ns *testutil.Netns, addr string) {
	t.Helper()
	bin, err := exec.LookPath("memcached")
	testutil.Require(t, err == nil, "memcached not found (Debian package memcached; run make deps)")
	port := fmt.Sprint(memcachedPort)
	startDaemon(t, ns, "memcached", exec.Command(bin, "-u", "root", "-l", addr, "-p", port, "-U", port, "-t", "1", "-m", "16"))
}

// memcachedSet stores value under key through memcached's TCP text
// protocol, from ns, once the server listens.
func memcachedSet(t *testing.T, ns *testutil.Netns, addr, key string, value []byte) {
	t.Helper()
	var c net.Conn
	waitFor(t, "memcached to listen", 30*time.Second, func() bool {
		err := ns.Do(func() (err error) {
			c, err = net.DialTimeout("tcp4", net.JoinHostPort(addr, fmt.Sprint(memcachedPort)), time.Second)
			return err
		})
		return err == nil
	})
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "set %s 0 0 %d\r\n%s\r\n", key, len(value), value)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "STORED\r\n" {
		t.Fatalf("memcached set: %q, %v", line, err)
	}
}

// memcachedUDP is a client of memcached's UDP protocol (its protocol.txt,
// "UDP protocol"): every datagram, request or answer, starts with an
// 8-byte frame header (the request ID, the datagram's sequence number, the
// message's number of datagrams, two zero bytes) before the text
// protocol's command or reply. An answer carries its request's ID; one of
// up to 1400 bytes comes in one datagram.
type memcachedUDP struct {
	conn     net.Conn
	id       uint16
	received int // answer datagrams read, late ones to earlier requests too
}

func dialMemcachedUDP(t *testing.T, ns *testutil.Netns, addr string) *memcachedUDP {
	t.Helper()
	c := &memcachedUDP{}
	if err := ns.Do(func() (err error) {
		c.conn, err = net.Dial("udp4", net.JoinHostPort(addr, fmt.Sprint(memcachedPort)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.conn.Close() })
	return c
}

// get asks for key and returns the answer, frame header included, or nil
// when no answer with the request's ID came within timeout.
func (c *memcachedUDP) get(key string, timeout time.Duration) []byte {
	c.id++
	req := append(binary.BigEndian.AppendUint16(nil, c.id), 0, 0, 0, 1, 0, 0)
	req = append(req, "get "+key+"\r\n"...)
	_ = c.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := c.conn.Write(req); err != nil {
		return nil
	}
	buf := make([]byte, 2048)
	for {
		n, err := c.conn.Read(buf)
		if err != nil {
			return nil
		}
		c.received++
		if n > 8 && binary.BigEndian.Uint16(buf) == c.id && bytes.Equal(buf[2:8], []byte{0, 0, 0, 1, 0, 0}) {
			return buf[:n]
		}
	}
}

// memcachedValue is the value an answer to a get of key carries, nil if
// it carries none.
func memcachedValue(answer []byte, key string) []byte {
	if len(answer) < 8 {
		return nil
	}
	head, rest, ok := strings.Cut(string(answer[8:]), "\r\n")
	if !ok {
		return nil
	}
	var k string
	var flags, size int
	if _, err := fmt.Sscanf(head, "VALUE %s %d %d", &k, &flags, &size); err != nil || k != key {
		return nil
	}
	data, ok := strings.CutSuffix(rest, "\r\nEND\r\n")
	if !ok || len(data) != size {
		return nil
	}
	return []byte(data)
}

// gets sends n gets of key, one at a time with a second's deadline each,
// and returns how many came back with value.
func (c *memcachedUDP) gets(key string, value []byte, n int) int {
	ok := 0
	for range n {
		if bytes.Equal(memcachedValue(c.get(key, time.Second), key), value) {
			ok++
		}
	}
	return ok
}

// TestReflectionMemcached: a flood of a real memcached's answer against
// the listener, which never asked, is dropped whole, none of it answered
// with a port unreachable, while the listener's own gets are answered.
func TestReflectionMemcached(t *testing.T) {
	cl := newCookieLab(t)
	server := clientNet.Addr().String()
	startMemcached(t, cl.C, server)
	value := make([]byte, 1000)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	memcachedSet(t, cl.C, server, memcachedKey, value)
	cl.attachPolicy(t, "conversations: {reflection: always}\nrules: []\n")
	mc := dialMemcachedUDP(t, cl.PeerNS, server)

	// Without a flood, every answer is one the guard must pass. The
	// first one is the flood's payload.
	m := cl.startMeter(t)
	answer := mc.get(memcachedKey, 5*time.Second)
	if !bytes.Equal(memcachedValue(answer, memcachedKey), value) {
		t.Fatalf("memcached's UDP answer to a get does not carry the value: %q", answer)
	}
	if ok, quiet := mc.gets(memcachedKey, value, 100), m.read(t); ok != 100 || quiet.noReq != 0 {
		t.Fatalf("without a flood, %d of 100 gets answered; %v", ok, quiet)
	}

	m, received0 := cl.startMeter(t), mc.received
	flood := cl.startFlood(t, cl.forgedAnswer(memcachedPort, memcachedFloodPort, answer), forgedSources, floodBound)
	waitFor(t, "the flood to reach the listener", 30*time.Second, func() bool {
		return cl.conversationCounters(t)[maps.CounterNoRequest] > m.noReq0+1000
	})
	asked, ok := 0, 0
	for asked < memcachedGets || cl.PeerNS.RxSeen(t, cl.PeerName)-m.rx0 < memcachedFlood {
		if flood.ended() {
			break
		}
		ok += mc.gets(memcachedKey, value, 100)
		asked += 100
	}
	_, running := flood.stop(t)
	v, received := m.read(t), uint64(mc.received-received0)
	t.Logf("%d of %d gets answered under a flood of %d-byte memcached answers, the server sent %d answers; %v",
		ok, asked, len(answer), v.served, v)
	if !running {
		t.Errorf("the flood ended before the gets did")
	}
	// As in the NTP test: the server's answers are the base, and the ring
	// turns some of them away with the flood.
	if v.served*10 < uint64(asked)*9 {
		t.Errorf("the server answered %d of %d gets: the lab lost too many to judge the guard", v.served, asked)
	}
	v.judgeLostAnswers(t, v.served-min(v.served, uint64(ok)), v.served, "come back")
	// Every forged answer that met the program was dropped: none reached
	// the stack, and all but the few frames that are not IP (ARP) were
	// counted as no_request.
	if v.st.noPorts != 0 || v.st.unreach != 0 {
		t.Errorf("forged answers reached the listener's stack: %v", v.st)
	}
	if forged := v.forged(received); v.noReq+20 < forged {
		t.Errorf("%d frames of the flood met the program, %d were dropped as no_request", forged, v.noReq)
	}
}
