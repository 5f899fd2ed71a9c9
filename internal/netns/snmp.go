// SPDX-License-Identifier: Apache-2.0

package netns

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Counters is a snapshot of a namespace's IP and UDP SNMP counters, read
// from the kernel's own tables (/proc/net/snmp, snmp6 and netstat) so that
// tests can check what reached the IP stack without trusting xdplimit's
// counters.
type Counters struct {
	// IPInReceives counts IPv4 packets handed to the stack (before any
	// validation); IP6InReceives likewise for IPv6.
	IPInReceives, IP6InReceives uint64
	// IPInDelivers/IP6InDelivers count packets passed to a transport.
	IPInDelivers, IP6InDelivers uint64
	// UDP counters, IPv4 and IPv6. NoPorts counts datagrams with a valid
	// checksum and no socket; InCsumErrors those with a bad checksum.
	// InDatagrams is counted when a socket reads a datagram, not on arrival.
	UDPInDatagrams, UDPNoPorts, UDPInErrors, UDPRcvbufErrors, UDPInCsumErrors      uint64
	UDP6InDatagrams, UDP6NoPorts, UDP6InErrors, UDP6RcvbufErrors, UDP6InCsumErrors uint64

	// Raw holds every counter of the three files, keyed "Ip.InReceives",
	// "Udp.NoPorts", "Icmp.InMsgs" (snmp), "Ip6InReceives" (snmp6) and
	// "TcpExt.SyncookiesSent" (netstat, the TCP extensions nstat shows as
	// TcpExtSyncookiesSent).
	Raw map[string]uint64
}

// fields maps the named fields to their Raw keys.
func (c *Counters) fields() map[string]*uint64 {
	return map[string]*uint64{
		"Ip.InReceives":    &c.IPInReceives,
		"Ip6InReceives":    &c.IP6InReceives,
		"Ip.InDelivers":    &c.IPInDelivers,
		"Ip6InDelivers":    &c.IP6InDelivers,
		"Udp.InDatagrams":  &c.UDPInDatagrams,
		"Udp.NoPorts":      &c.UDPNoPorts,
		"Udp.InErrors":     &c.UDPInErrors,
		"Udp.RcvbufErrors": &c.UDPRcvbufErrors,
		"Udp.InCsumErrors": &c.UDPInCsumErrors,
		"Udp6InDatagrams":  &c.UDP6InDatagrams,
		"Udp6NoPorts":      &c.UDP6NoPorts,
		"Udp6InErrors":     &c.UDP6InErrors,
		"Udp6RcvbufErrors": &c.UDP6RcvbufErrors,
		"Udp6InCsumErrors": &c.UDP6InCsumErrors,
	}
}

// IPReceives is the number of IPv4 plus IPv6 packets that reached the stack.
func (c Counters) IPReceives() uint64 { return c.IPInReceives + c.IP6InReceives }

// Delta returns c - before, counter by counter. Counters that went
// backwards (impossible for these) come out as 0 rather than wrapping.
func (c Counters) Delta(before Counters) Counters {
	d := Counters{Raw: make(map[string]uint64, len(c.Raw))}
	for k, v := range c.Raw {
		if b := before.Raw[k]; v > b {
			d.Raw[k] = v - b
		} else {
			d.Raw[k] = 0
		}
	}
	d.fillFields()
	return d
}

func (c *Counters) fillFields() {
	for k, p := range c.fields() {
		*p = c.Raw[k]
	}
}

// Counters reads the namespace's counters from a thread inside it:
// /proc/thread-self/net shows the namespace of the reading thread, while
// /proc/self/net would show the main thread's.
func (n *Netns) Counters() (Counters, error) {
	var c Counters
	err := n.Do(func() error {
		var err error
		c, err = readCounters("/proc/thread-self/net")
		return err
	})
	return c, err
}

func readCounters(dir string) (Counters, error) {
	c := Counters{Raw: map[string]uint64{}}
	snmp, err := os.ReadFile(dir + "/snmp")
	if err != nil {
		return c, err
	}
	if err := parseSNMP(snmp, c.Raw); err != nil {
		return c, err
	}
	// netstat has snmp's layout.
	netstat, err := os.ReadFile(dir + "/netstat")
	if err != nil {
		return c, err
	}
	if err := parseSNMP(netstat, c.Raw); err != nil {
		return c, fmt.Errorf("netstat: %w", err)
	}
	// snmp6 is absent when IPv6 is disabled; that is no error.
	if snmp6, err := os.ReadFile(dir + "/snmp6"); err == nil {
		if err := parseSNMP6(snmp6, c.Raw); err != nil {
			return c, err
		}
	} else if !os.IsNotExist(err) {
		return c, err
	}
	c.fillFields()
	return c, nil
}

// parseSNMP reads /proc/net/snmp: pairs of lines, "Proto: Name Name ..."
// then "Proto: value value ...". Some values (Ip.Forwarding, Tcp.MaxConn)
// can be negative; they are kept only when they parse as unsigned.
func parseSNMP(b []byte, out map[string]uint64) error {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		header := strings.Fields(s.Text())
		if !s.Scan() {
			return fmt.Errorf("snmp: header %q without values", header)
		}
		values := strings.Fields(s.Text())
		if len(header) != len(values) || len(header) == 0 || header[0] != values[0] {
			return fmt.Errorf("snmp: mismatched lines %q and %q", header, values)
		}
		proto := strings.TrimSuffix(header[0], ":")
		for i := 1; i < len(header); i++ {
			if v, err := strconv.ParseUint(values[i], 10, 64); err == nil {
				out[proto+"."+header[i]] = v
			}
		}
	}
	return s.Err()
}

// parseSNMP6 reads /proc/net/snmp6: one "Name value" pair per line.
func parseSNMP6(b []byte, out map[string]uint64) error {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("snmp6: %q: %w", s.Text(), err)
		}
		out[f[0]] = v
	}
	return s.Err()
}
