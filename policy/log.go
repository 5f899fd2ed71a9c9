// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// Log is the log: section: how `attach --log-drops` writes sampled drops.
// The zero Log means the defaults below (a policy without the section).
type Log struct {
	// OneIn logs one in this many dropped packets on average (1 logs
	// every drop the rate cap lets through). 0 means DefaultLogOneIn.
	OneIn float64
	// MaxPerSecond caps the lines written per second; the rest are
	// counted as suppressed. 0 means DefaultLogMaxPerSecond.
	MaxPerSecond uint32
	// File is where the lines go, resolved against the policy's directory;
	// "" leaves it to --log-drops (stdout by default).
	File string
	// Set: the policy has a log: section, which turns the drop log on
	// without --log-drops.
	Set bool
}

// Defaults and bounds of the log: section.
const (
	DefaultLogOneIn        = 64
	DefaultLogMaxPerSecond = 100
	maxLogOneIn            = 1 << 24
	maxLogPerSecond        = 100000
)

// SampleOneIn is OneIn with its default applied.
func (l Log) SampleOneIn() float64 {
	if l.OneIn == 0 {
		return DefaultLogOneIn
	}
	return l.OneIn
}

// RateCap is MaxPerSecond with its default applied.
func (l Log) RateCap() uint32 {
	if l.MaxPerSecond == 0 {
		return DefaultLogMaxPerSecond
	}
	return l.MaxPerSecond
}

// String renders the section as `policy check` prints it.
func (l Log) String() string {
	s := fmt.Sprintf("one in %s drops, at most %d lines/s", strconv.FormatFloat(l.SampleOneIn(), 'g', 6, 64), l.RateCap())
	if l.File != "" {
		s += " to " + l.File
	}
	return s
}

// log decodes the top-level log section:
//
//	log: {sample: 1/100 | 100 | 1%, max_per_second: 100, file: PATH}
func (d *decoder) log(f field) Log {
	l := Log{Set: true}
	m := d.mapping(f.value, "log", "sample", "max_per_second", "file")
	if m == nil {
		return l
	}
	if sf, ok := m["sample"]; ok {
		if s, ok := d.scalar(sf.value, "log.sample", "a share like 1/100 or 1%"); ok {
			n, err := parseOneIn(s)
			if err != nil {
				d.errorf(sf.value, "log.sample", "%s", err)
			}
			l.OneIn = n
		}
	}
	if cf, ok := m["max_per_second"]; ok {
		if s, ok := d.scalar(cf.value, "log.max_per_second", "a number of lines"); ok {
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil || n < 1 || n > maxLogPerSecond {
				d.errorf(cf.value, "log.max_per_second", "max_per_second %q: a whole number of lines from 1 to %d", s, maxLogPerSecond)
			}
			l.MaxPerSecond = uint32(n)
		}
	}
	if ff, ok := m["file"]; ok {
		if s, ok := d.scalar(ff.value, "log.file", "a file path"); ok {
			l.File = d.resolve(s)
		}
	}
	return l
}

// parseOneIn reads a sampling share as "one in N": `1/N`, `N` or `P%`.
func parseOneIn(s string) (float64, error) {
	bad := fmt.Errorf("sample %q: write one in N drops as 1/N or N (N from 1 to %d), or a share like 1%%", s, maxLogOneIn)
	var n float64
	switch {
	case strings.HasSuffix(s, "%"):
		p, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
		if err != nil || !(p > 0 && p <= 100) {
			return 0, bad
		}
		n = 100 / p
	default:
		num, den, frac := strings.Cut(s, "/")
		if !frac {
			num, den = "1", s
		}
		if strings.TrimSpace(num) != "1" {
			return 0, bad
		}
		v, err := strconv.ParseUint(strings.TrimSpace(den), 10, 32)
		if err != nil {
			return 0, bad
		}
		n = float64(v)
	}
	if !(n >= 1 && n <= maxLogOneIn) {
		return 0, bad
	}
	return n, nil
}
