// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in    string
		unit  Unit
		count uint64
		per   time.Duration
		err   string // from parse or check, "" when accepted
	}{
		{in: "1000/s", unit: Packets, count: 1000, per: time.Second},
		{in: "60000/m", unit: Packets, count: 1000, per: time.Second},
		{in: "90/m", unit: Packets, count: 90, per: time.Minute},
		{in: "1M/h", unit: Packets, count: 1_000_000, per: time.Hour},
		{in: "3600/h", unit: Packets, count: 1, per: time.Second},
		{in: "1/h", unit: Packets, count: 1, per: time.Hour},
		{in: "2k/s", unit: Packets, count: 2000, per: time.Second},
		{in: "2K/s", unit: Packets, count: 2000, per: time.Second},
		{in: "1.5k/s", unit: Packets, count: 1500, per: time.Second},
		{in: "0.5/s", unit: Packets, count: 1, per: 2 * time.Second},
		{in: "100M/s", unit: Packets, count: 100_000_000, per: time.Second},
		{in: "8Mbit/s", unit: Bytes, count: 1_000_000, per: time.Second},
		{in: "1MB/s", unit: Bytes, count: 1_000_000, per: time.Second},
		{in: "10Gbit/s", unit: Bytes, count: 1_250_000_000, per: time.Second},
		{in: "100Gbit/s", unit: Bytes, count: 12_500_000_000, per: time.Second},
		{in: "500kbit/s", unit: Bytes, count: 62_500, per: time.Second},
		{in: "64KB/s", unit: Bytes, count: 64_000, per: time.Second},
		{in: "12bit/s", unit: Bytes, count: 3, per: 2 * time.Second},
		{in: "8bit/s", unit: Bytes, count: 1, per: time.Second},
		// Byte rates below 1 B/s: cost (frame bytes) * interval would
		// overflow the datapath's 64-bit arithmetic.
		{in: "1bit/s", err: "rate 1bit/s is below the minimum byte rate of 1B/s (8bit/s)"},
		{in: "1B/h", err: "rate 1B/h is below the minimum byte rate of 1B/s (8bit/s)"},
		{in: "1/h", unit: Packets, count: 1, per: time.Hour},
		{in: "1bit/h", err: "rate 1bit/h is below the minimum byte rate of 1B/s (8bit/s)"},
		{in: "1/s ", err: `"1/s " is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "1000/sec", err: `"1000/sec" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "1000", err: `"1000" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "1m/s", err: `"1m/s" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "8Mb/s", err: `"8Mb/s" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "8Mbps", err: `"8Mbps" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "1KiB/s", err: `"1KiB/s" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "-1/s", err: `"-1/s" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "1e3/s", err: `"1e3/s" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "1.2345k/s", err: `"1.2345k/s": at most 3 decimal places`},
		{in: "0/s", err: "rate must be greater than zero; to drop all traffic from an address, use deny"},
		{in: "1/d", err: `"1/d" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "2/3h", err: `"2/3h" is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s`},
		{in: "0.5/h", err: "rate 0.5/h is below the minimum of 1 per hour"},
		{in: "101M/s", err: "rate 101M/s is above the maximum of 100M/s (100000000 packets per second)"},
		{in: "100.001Gbit/s", err: "rate 100.001Gbit/s is above the maximum of 100Gbit/s"},
		{in: "13GB/s", err: "rate 13GB/s is above the maximum of 100Gbit/s"},
		{in: "99999999999999999999999999999999G/s", err: `"99999999999999999999999999999999G/s": too many digits`},
	} {
		r, err := parseRate(tc.in)
		msg := ""
		if err != nil {
			msg = err.Error()
		} else {
			msg = r.check(tc.in)
		}
		if msg != tc.err {
			t.Errorf("%q: error %q, want %q", tc.in, msg, tc.err)
			continue
		}
		if msg != "" {
			continue
		}
		count, per := r.countPer()
		if r.unit != tc.unit || count != tc.count || per != tc.per {
			t.Errorf("%q: %v %d per %v, want %v %d per %v", tc.in, r.unit, count, per, tc.unit, tc.count, tc.per)
		}
	}
}

func TestParseCountAndSize(t *testing.T) {
	for _, tc := range []struct {
		in    string
		bytes bool
		want  uint64
		err   string
	}{
		{in: "100", want: 100},
		{in: "2k", want: 2000},
		{in: "1.5M", want: 1_500_000},
		{in: "4G", want: 4_000_000_000},
		{in: "1.5", err: `"1.5" is not a whole number of packets`},
		{in: "64KB", err: `"64KB" is not a packet count; use N, Nk, NM or NG (decimal: 1k = 1000)`},
		{in: "2m", err: `"2m" is not a packet count; use N, Nk, NM or NG (decimal: 1k = 1000)`},
		{in: "1500", bytes: true, want: 1500},
		{in: "1500B", bytes: true, want: 1500},
		{in: "64KB", bytes: true, want: 64_000},
		{in: "64kB", bytes: true, want: 64_000},
		{in: "10MB", bytes: true, want: 10_000_000},
		{in: "1.5GB", bytes: true, want: 1_500_000_000},
		{in: "0.0005KB", bytes: true, err: `"0.0005KB": at most 3 decimal places`},
		{in: "0.5B", bytes: true, err: `"0.5B" is not a whole number of bytes`},
		{in: "64KiB", bytes: true, err: `"64KiB" is not a byte size; use N, NB, NKB, NMB or NGB (decimal: 1KB = 1000 B)`},
		{in: "64K", bytes: true, err: `"64K" is not a byte size; use N, NB, NKB, NMB or NGB (decimal: 1KB = 1000 B)`},
		{in: "8Mbit", bytes: true, err: `"8Mbit" is not a byte size; use N, NB, NKB, NMB or NGB (decimal: 1KB = 1000 B)`},
	} {
		parse := parseCount
		if tc.bytes {
			parse = parseByteSize
		}
		got, err := parse(tc.in)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != tc.err || got != tc.want && tc.err == "" {
			t.Errorf("%q: %d, %q; want %d, %q", tc.in, got, msg, tc.want, tc.err)
		}
	}
}

func TestParseWindow(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "1ms", want: time.Millisecond},
		{in: "100ms", want: 100 * time.Millisecond},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "1m", want: time.Minute},
		{in: "24h", want: 24 * time.Hour},
		{in: "999us", err: "window 999us is out of range; use 1ms to 24h"},
		{in: "24h1ns", err: "window 24h1ns is out of range; use 1ms to 24h"},
		{in: "-1s", err: "window -1s is out of range; use 1ms to 24h"},
		{in: "0", err: "window 0 is out of range; use 1ms to 24h"},
		{in: "1sec", err: `"1sec" is not a duration; use Go durations like 100ms, 1s, 1m or 1h`},
		{in: "1000", err: `"1000" is not a duration; use Go durations like 100ms, 1s, 1m or 1h`},
		{in: "1d", err: `"1d" is not a duration; use Go durations like 100ms, 1s, 1m or 1h`},
	} {
		got, err := parseWindow(tc.in)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != tc.err || got != tc.want && tc.err == "" {
			t.Errorf("%q: %v, %q; want %v, %q", tc.in, got, msg, tc.want, tc.err)
		}
	}
}

func TestLimitString(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		want string
	}{
		{Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1000, Per: time.Second, Burst: 2000}, "token_bucket 1000 pkt/s burst 2000"},
		{Limit{Algorithm: TokenBucket, Unit: Packets, Count: 1_000_000, Per: time.Hour, Burst: 10}, "token_bucket 1000000 pkt per 1h burst 10"},
		{Limit{Algorithm: TokenBucket, Unit: Bytes, Count: 1, Per: 8 * time.Second, Burst: 1500}, "token_bucket 1 B per 8s burst 1500"},
		{Limit{Algorithm: SlidingWindow, Unit: Bytes, Count: 10_000_000, Window: time.Second}, "sliding_window 10000000 B per 1s"},
		{Limit{Algorithm: FixedWindow, Unit: Packets, Count: 100, Window: 1500 * time.Millisecond}, "fixed_window 100 pkt per 1500ms"},
	} {
		if got := tc.l.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.l, got, tc.want)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{ModeEnforce.String(), "enforce"}, {ModeShadow.String(), "shadow"}, {Mode(7).String(), "invalid(7)"},
		{ActionDrop.String(), "drop"}, {ActionShadow.String(), "shadow"},
		{ProtoAny.String(), "any"}, {ProtoTCP.String(), "tcp"}, {ProtoUDP.String(), "udp"},
		{ProtoICMP.String(), "icmp"}, {ProtoICMPv6.String(), "icmpv6"}, {Protocol(47).String(), "Protocol(47)"},
		{KeySrcIP.String(), "src_ip"}, {KeySrcIPDstPort.String(), "src_ip+dst_port"}, {KeySrcIPSrcPort.String(), "src_ip+src_port"}, {KeyGlobal.String(), "global"},
		{TokenBucket.String(), "token_bucket"}, {FixedWindow.String(), "fixed_window"}, {SlidingWindow.String(), "sliding_window"},
		{Packets.String(), "packets"}, {Bytes.String(), "bytes"},
		{TCPFlags{Set: TCPFlagSYN, Clear: TCPFlagACK}.String(), "syn,!ack"},
		{PortRange{53, 53}.String(), "53"}, {PortRange{1024, 65535}.String(), "1024-65535"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
