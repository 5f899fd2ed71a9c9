// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"time"
)

// The units of the policy language. All multipliers are decimal (k = 1000)
// because network rates are: 1Gbit/s is 10^9 bits per second.

// Limits of what the datapath represents. They are checked here so the
// compiler never meets a value it cannot store.
const (
	maxRules          = 256
	maxAggregate      = 3 // aggregate levels, on top of the rule's own
	minWindow         = time.Millisecond
	maxWindow         = 24 * time.Hour
	maxWindowCount    = 1<<40 - 1
	maxBurst          = 1 << 32
	maxPacketRate     = 100_000_000         // packets per second
	maxByteRate       = 100_000_000_000 / 8 // bytes per second (100Gbit/s)
	maxFractionDigits = 3
)

var (
	// A quantity is digits, an optional fraction and an optional multiplier.
	// Lowercase m and g are not multipliers: "1m" would read as milli or minute.
	rateRE    = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))?([kKMG])?(B|bit)?/([smh])$`)
	countRE   = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))?([kKMG])?$`)
	byteSizRE = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))?(?:([kKMG])?B)?$`)

	multipliers = map[string]int64{"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
	perUnits    = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}
)

// quantity turns the digits, fraction and multiplier matched by one of the
// expressions above into an exact rational.
func quantity(intPart, frac, mult string) (*big.Rat, error) {
	if len(frac) > maxFractionDigits {
		return nil, fmt.Errorf("at most %d decimal places", maxFractionDigits)
	}
	if len(intPart)+len(frac) > 30 {
		return nil, errors.New("too many digits")
	}
	q, ok := new(big.Rat).SetString(intPart + "." + frac + "0")
	if !ok {
		return nil, errors.New("not a number")
	}
	return q.Mul(q, new(big.Rat).SetInt64(multipliers[mult])), nil
}

// rateValue is a parsed rate: an exact number of units per second.
type rateValue struct {
	unit   Unit
	perSec *big.Rat
	per    time.Duration // the unit of time written: 1s, 1m or 1h
}

// parseRate parses "1000/s", "60000/m", "1M/h", "2k/s" (packets) and
// "8Mbit/s", "1MB/s", "64KB/s" (bytes, with bits converted to bytes).
func parseRate(s string) (rateValue, error) {
	bad := fmt.Errorf("%q is not a rate; use N/s, N/m, N/h or a byte rate like 8Mbit/s", s)
	m := rateRE.FindStringSubmatch(s)
	if m == nil {
		return rateValue{}, bad
	}
	q, err := quantity(m[1], m[2], m[3])
	if err != nil {
		return rateValue{}, fmt.Errorf("%q: %v", s, err)
	}
	r := rateValue{unit: Packets, per: perUnits[m[5]]}
	switch m[4] {
	case "B":
		r.unit = Bytes
	case "bit":
		r.unit = Bytes
		q.Quo(q, big.NewRat(8, 1))
	}
	r.perSec = q.Quo(q, big.NewRat(int64(r.per/time.Second), 1))
	return r, nil
}

// countPer is the normalised form of a rate documented on Limit: Per is 1s
// when the rate is a whole number per second, else the written unit of time
// times the smallest factor that makes Count whole.
func (r rateValue) countPer() (uint64, time.Duration) {
	if r.perSec.IsInt() {
		return r.perSec.Num().Uint64(), time.Second
	}
	perUnit := new(big.Rat).Mul(r.perSec, big.NewRat(int64(r.per/time.Second), 1))
	k := perUnit.Denom().Int64() // at most 8 (bits) × 10^3 (decimals)
	return perUnit.Num().Uint64(), time.Duration(k) * r.per
}

// checkRate enforces the datapath's range: one packet per hour or 1 B/s up
// to 100M packets/s or 100Gbit/s. It returns a message, or "" when r is in range.
func (r rateValue) check(s string) string {
	if r.perSec.Sign() == 0 {
		return "rate must be greater than zero; to drop all traffic from an address, use deny"
	}
	if r.unit == Packets && r.perSec.Cmp(big.NewRat(1, 3600)) < 0 {
		return fmt.Sprintf("rate %s is below the minimum of 1 per hour", s)
	}
	if r.unit == Bytes && r.perSec.Cmp(big.NewRat(1, 1)) < 0 {
		return fmt.Sprintf("rate %s is below the minimum byte rate of 1B/s (8bit/s)", s)
	}
	if r.unit == Packets && r.perSec.Cmp(big.NewRat(maxPacketRate, 1)) > 0 {
		return fmt.Sprintf("rate %s is above the maximum of 100M/s (100000000 packets per second)", s)
	}
	if r.unit == Bytes && r.perSec.Cmp(big.NewRat(maxByteRate, 1)) > 0 {
		return fmt.Sprintf("rate %s is above the maximum of 100Gbit/s", s)
	}
	return ""
}

// parseCount parses a number of packets: 100, 2k, 1.5M.
func parseCount(s string) (uint64, error) {
	bad := fmt.Errorf("%q is not a packet count; use N, Nk, NM or NG (decimal: 1k = 1000)", s)
	m := countRE.FindStringSubmatch(s)
	if m == nil {
		return 0, bad
	}
	return wholeQuantity(s, "packets", m[1], m[2], m[3])
}

// parseByteSize parses a number of bytes: 1500, 1500B, 64KB, 10MB, 1.5GB.
func parseByteSize(s string) (uint64, error) {
	bad := fmt.Errorf("%q is not a byte size; use N, NB, NKB, NMB or NGB (decimal: 1KB = 1000 B)", s)
	m := byteSizRE.FindStringSubmatch(s)
	if m == nil {
		return 0, bad
	}
	return wholeQuantity(s, "bytes", m[1], m[2], m[3])
}

func wholeQuantity(s, what, intPart, frac, mult string) (uint64, error) {
	q, err := quantity(intPart, frac, mult)
	if err != nil {
		return 0, fmt.Errorf("%q: %v", s, err)
	}
	if !q.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of %s", s, what)
	}
	if !q.Num().IsUint64() {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return q.Num().Uint64(), nil
}

// parseWindow parses a Go duration and checks the datapath's range.
func parseWindow(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; use Go durations like 100ms, 1s, 1m or 1h", s)
	}
	if d < minWindow || d > maxWindow {
		return 0, fmt.Errorf("window %s is out of range; use 1ms to 24h", s)
	}
	return d, nil
}
