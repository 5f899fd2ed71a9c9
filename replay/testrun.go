// SPDX-License-Identifier: Apache-2.0

// Handing a captured frame to BPF_PROG_TEST_RUN as the datapath would see
// it: how much of a long frame the program sees, padding snapped frames back
// to their wire length, and the return code each verdict must come with.

package replay

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/maps"
)

// probeSize is longer than any frame a test run passes whole to a program
// that does not handle fragmented buffers (xdp.frags).
const probeSize = 16 << 10

// probeLinear measures how much of a long frame the program sees. The
// kernel test-runs at most a page less head- and tailroom in the linear
// buffer (3520 bytes with 4 KiB pages) and passes the rest as fragments, which the
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
