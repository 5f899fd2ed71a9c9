// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// AutopilotMode is what the rules the autopilot generates do. The zero
// AutopilotMode is AutopilotEnforce.
type AutopilotMode int

const (
	// AutopilotEnforce: generated rules act (see AutopilotAction).
	AutopilotEnforce AutopilotMode = iota
	// AutopilotShadow: generated rules get action shadow, so an operator
	// can watch what the autopilot would do before trusting it to drop.
	AutopilotShadow
)

var autopilotModeNames = []string{"enforce", "shadow"}

func (m AutopilotMode) String() string { return enumString(int(m), autopilotModeNames) }

// AutopilotAction is what a generated rule does to what it matches. The
// zero AutopilotAction is AutopilotDrop.
type AutopilotAction int

const (
	// AutopilotDrop holds what the rule matches to 1 packet/s rather than
	// none: a fingerprint that also matches some legitimate traffic then
	// slows it instead of cutting it off.
	AutopilotDrop AutopilotAction = iota
	// AutopilotLimit holds what the rule matches to the destination's
	// baseline rate.
	AutopilotLimit
)

var autopilotActionNames = []string{"drop", "limit"}

func (a AutopilotAction) String() string { return enumString(int(a), autopilotActionNames) }

// Autopilot is the autopilot: section: the control plane watches sampled
// traffic per destination, and when a destination's packet rate passes
// both Floor and Multiple times its baseline, it looks for a fingerprint
// of the attack and installs a rule for it. Policy.Autopilot is nil when
// the section is absent: the autopilot is off.
type Autopilot struct {
	Mode   AutopilotMode
	Action AutopilotAction
	// OneIn is the sampling the autopilot detects on: a power of two, 1
	// to MaxCaptureOneIn, rounded down as capture.sample is.
	OneIn uint32
	// Floor is the packets per second to one destination below which
	// nothing is an attack, however quiet its baseline.
	Floor float64
	// Multiple of the destination's baseline rate the rate must pass too.
	Multiple float64
	// Learning is how long the autopilot watches before it declares any
	// attack: a baseline needs time to mean anything.
	Learning time.Duration
	// Coverage is the share of the attack's samples (0.5 to 1) a
	// fingerprint must match to become a rule.
	Coverage float64
	// BaselineMax is the largest share of normal traffic's samples (0 to
	// 0.1) the fingerprint may match: what bounds collateral damage.
	BaselineMax float64
	// MaxRules bounds the generated rules in force at once.
	MaxRules int
	// Expire is how long an attack must stay below the threshold before
	// its rule is removed.
	Expire time.Duration
}

// Defaults and bounds of the autopilot: section.
const (
	DefaultAutopilotOneIn       = 64
	DefaultAutopilotFloor       = 1000 // packets per second
	DefaultAutopilotMultiple    = 10
	DefaultAutopilotLearning    = 30 * time.Second
	DefaultAutopilotCoverage    = 0.95
	DefaultAutopilotBaselineMax = 0.001
	DefaultAutopilotMaxRules    = 8
	DefaultAutopilotExpire      = 60 * time.Second

	minAutopilotMultiple    = 1.5
	maxAutopilotMultiple    = 10000
	maxAutopilotLearning    = 24 * time.Hour
	minAutopilotCoverage    = 0.5
	maxAutopilotBaselineMax = 0.1
	maxAutopilotRules       = 32
	minAutopilotExpire      = time.Second
	maxAutopilotExpire      = 24 * time.Hour
)

// DefaultAutopilot is the section written as `autopilot: {}`.
func DefaultAutopilot() Autopilot {
	return Autopilot{
		OneIn: DefaultAutopilotOneIn, Floor: DefaultAutopilotFloor, Multiple: DefaultAutopilotMultiple,
		Learning: DefaultAutopilotLearning, Coverage: DefaultAutopilotCoverage,
		BaselineMax: DefaultAutopilotBaselineMax, MaxRules: DefaultAutopilotMaxRules,
		Expire: DefaultAutopilotExpire,
	}
}

// String renders the section as `policy check` prints it.
func (a Autopilot) String() string {
	hold := "1 packet/s"
	if a.Action == AutopilotLimit {
		hold = "the destination's baseline"
	}
	rules := "rules hold what they match to " + hold
	if a.Mode == AutopilotShadow {
		rules = "rules have action shadow: nothing dropped, what they would hold to " + hold + " counted"
	}
	return fmt.Sprintf("%s, action %s (%s); an attack is over %s packets/s to one destination and %s times its baseline, "+
		"after %s learning; samples one in %d packets; a rule's fingerprint matches %s of the attack and at most %s "+
		"of the baseline; up to %d rules, each removed once its attack stays below the threshold for %s",
		a.Mode, a.Action, rules, fmtNumber(a.Floor), fmtNumber(a.Multiple), formatDuration(a.Learning), a.OneIn,
		fmtPercent(a.Coverage), fmtPercent(a.BaselineMax), a.MaxRules, formatDuration(a.Expire))
}

func fmtNumber(v float64) string  { return strconv.FormatFloat(v, 'g', 6, 64) }
func fmtPercent(v float64) string { return fmtNumber(v*100) + "%" }

// autopilot decodes the top-level autopilot section:
//
//	autopilot: {mode: enforce, action: drop, sample: 1/64, floor: 1000/s,
//	            multiple: 10, learning: 30s, coverage: 95%,
//	            baseline_max: 0.1%, max_rules: 8, expire: 60s}
func (d *decoder) autopilot(f field) *Autopilot {
	a := DefaultAutopilot()
	m := d.mapping(f.value, "autopilot", "mode", "action", "sample", "floor", "multiple",
		"learning", "coverage", "baseline_max", "max_rules", "expire")
	if m == nil {
		return &a
	}
	if vf, ok := m["mode"]; ok {
		if v, ok := d.enum(vf.value, "autopilot.mode", "mode", autopilotModeNames); ok {
			a.Mode = AutopilotMode(v)
		}
	}
	if vf, ok := m["action"]; ok {
		if v, ok := d.enum(vf.value, "autopilot.action", "action", autopilotActionNames); ok {
			a.Action = AutopilotAction(v)
		}
	}
	if vf, ok := m["sample"]; ok {
		if s, ok := d.scalar(vf.value, "autopilot.sample", "a share like 1/64 or 1.5%"); ok {
			n, err := parseOneIn(s)
			if err != nil || n > MaxCaptureOneIn {
				d.errorf(vf.value, "autopilot.sample", "sample %q: write one in N packets as 1/N or N (N from 1 to %d), or a share like 1.5%%", s, MaxCaptureOneIn)
			} else {
				a.OneIn = sampleOneIn(n)
			}
		}
	}
	if vf, ok := m["floor"]; ok {
		d.autopilotFloor(vf, &a)
	}
	if vf, ok := m["multiple"]; ok {
		if s, ok := d.scalar(vf.value, "autopilot.multiple", "a number like 10"); ok {
			v, ok := parseDecimal(s)
			if !ok || v < minAutopilotMultiple || v > maxAutopilotMultiple {
				d.errorf(vf.value, "autopilot.multiple", "multiple %q: a number from %g to %d", s, minAutopilotMultiple, maxAutopilotMultiple)
			} else {
				a.Multiple = v
			}
		}
	}
	if vf, ok := m["learning"]; ok {
		d.boundedDuration(vf.value, "autopilot.learning", "30s", 0, maxAutopilotLearning, &a.Learning)
	}
	if vf, ok := m["coverage"]; ok {
		d.boundedShare(vf, "autopilot.coverage", "95% or 0.95", minAutopilotCoverage, 1, &a.Coverage)
	}
	if vf, ok := m["baseline_max"]; ok {
		d.boundedShare(vf, "autopilot.baseline_max", "0.1% or 0.001", 0, maxAutopilotBaselineMax, &a.BaselineMax)
	}
	if vf, ok := m["max_rules"]; ok {
		d.boundedInt(vf, "autopilot", "max_rules", "a whole number of rules", 1, maxAutopilotRules, &a.MaxRules)
	}
	if vf, ok := m["expire"]; ok {
		d.boundedDuration(vf.value, "autopilot.expire", "60s", minAutopilotExpire, maxAutopilotExpire, &a.Expire)
	}
	return &a
}

// autopilotFloor decodes autopilot.floor, a packet rate of 1/s or more:
// the autopilot counts packets, so a byte rate would compare unlike things.
func (d *decoder) autopilotFloor(f field, a *Autopilot) {
	if v, ok := d.packetRate(f.value, "autopilot.floor", maxPacketRate); ok {
		a.Floor = v
	}
}

// packetRate reads a rate of packets from 1/s to hi/s, named by the last
// element of field in its messages.
func (d *decoder) packetRate(n ast.Node, field string, hi int64) (float64, bool) {
	s, ok := d.scalar(n, field, "a packet rate like 1000/s")
	if !ok {
		return 0, false
	}
	name := lastElem(field)
	v, err := parseRate(s)
	switch {
	case err != nil:
		d.errorf(n, field, "%v", err)
	case v.unit != Packets:
		d.errorf(n, field, "%s %s counts bytes; give packets per second, like 1000/s", name, s)
	case v.perSec.Cmp(big.NewRat(1, 1)) < 0 || v.perSec.Cmp(big.NewRat(hi, 1)) > 0:
		d.errorf(n, field, "%s %s: give 1/s to %d/s", name, s, hi)
	default:
		q, _ := v.perSec.Float64()
		return q, true
	}
	return 0, false
}

// decimalRE is a plain decimal number: no sign, exponent, hex or
// underscores, which strconv.ParseFloat would all take.
var decimalRE = regexp.MustCompile(`^[0-9]+(?:\.[0-9]+)?$`)

// parseDecimal reads a plain decimal number.
func parseDecimal(s string) (float64, bool) {
	if !decimalRE.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// parseShare reads a share as a percentage, "95%", or a fraction, "0.95",
// and returns the fraction. It divides exactly, so that "0.1%" is the
// same float64 as 0.001.
func parseShare(s string) (float64, bool) {
	p, percent := strings.CutSuffix(s, "%")
	if !decimalRE.MatchString(p) {
		return 0, false
	}
	r, ok := new(big.Rat).SetString(p)
	if !ok {
		return 0, false
	}
	if percent {
		r.Quo(r, big.NewRat(100, 1))
	}
	v, _ := r.Float64()
	return v, true
}

// boundedShare decodes a share from lo to hi (fractions) into *dst; dst
// keeps its value on an error. example is one, as a percentage and a
// fraction.
func (d *decoder) boundedShare(f field, path, example string, lo, hi float64, dst *float64) {
	s, ok := d.scalar(f.value, path, "a share like "+example)
	if !ok {
		return
	}
	name := lastElem(path)
	v, ok := parseShare(s)
	if !ok || v < lo || v > hi {
		d.errorf(f.value, path, "%s %q: a share from %s to %s, like %s", name, s, fmtPercent(lo), fmtPercent(hi), example)
		return
	}
	*dst = v
}
