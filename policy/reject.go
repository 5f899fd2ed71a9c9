// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"math/big"
	"time"
)

// Reject is the reject: section: how many answers the rules with action
// reject send, all of them together. Each answer (a TCP reset, an ICMP
// error) goes to a packet's source address, which a flood can forge: the
// budget bounds what the limiter sends to addresses it cannot trust, and
// each source gets at most one answer a second whatever the budget.
type Reject struct {
	// Budget is a token bucket in packets: answers per second, and the
	// most sent at once.
	Budget Limit
	// Set: the policy has a reject: section.
	Set bool
}

// Defaults and bounds of the reject: section.
const (
	DefaultRejectBudget = 1000 // answers per second
	// A budget's burst is a twentieth of a second's answers unless given:
	// no second sends more than the budget and a twentieth, and the burst
	// still spans a few scheduler ticks (the coarse clock).
	defaultRejectBurstDivisor = 20
	maxRejectBudget           = 1_000_000
)

// DefaultReject is the reject: section of a policy without one.
func DefaultReject() Reject {
	return Reject{Budget: rejectBudget(DefaultRejectBudget, time.Second, 0)}
}

// rejectBudget is the budget of count answers per per, with burst (0: the
// default burst).
func rejectBudget(count uint64, per time.Duration, burst uint64) Limit {
	if burst == 0 {
		perSec := count * uint64(time.Second) / uint64(per)
		burst = max(perSec/defaultRejectBurstDivisor, 1)
	}
	return Limit{Algorithm: TokenBucket, Unit: Packets, Count: count, Per: per, Burst: burst}
}

// String renders the section as `policy check` prints it.
func (r Reject) String() string {
	b := r.Budget
	rate := fmt.Sprintf("%d per %s", b.Count, formatDuration(b.Per))
	if b.Per == time.Second {
		rate = fmt.Sprintf("%d/s", b.Count)
	}
	return fmt.Sprintf("at most %s (burst %d) for every reject rule together, and one a second per source", rate, b.Burst)
}

// reject decodes the top-level reject section:
//
//	reject: {budget: 1000/s, burst: 50}
func (d *decoder) reject(f field) Reject {
	r := DefaultReject()
	r.Set = true
	m := d.mapping(f.value, "reject", "budget", "burst")
	if m == nil {
		return r
	}
	count, per := uint64(DefaultRejectBudget), time.Second
	if bf, ok := m["budget"]; ok {
		if s, ok := d.scalar(bf.value, "reject.budget", "a rate of answers like 1000/s"); ok {
			v, err := parseRate(s)
			switch {
			case err != nil:
				d.errorf(bf.value, "reject.budget", "%v", err)
			case v.unit != Packets:
				d.errorf(bf.value, "reject.budget", "budget %s counts bytes; give answers (packets) per second, like 1000/s", s)
			case v.check(s) != "":
				d.errorf(bf.value, "reject.budget", "%s", v.check(s))
			case v.perSec.Cmp(big.NewRat(maxRejectBudget, 1)) > 0:
				d.errorf(bf.value, "reject.budget", "budget %s is above %d answers a second", s, maxRejectBudget)
			default:
				count, per = v.countPer()
			}
		}
	}
	var burst uint64
	if bf, ok := m["burst"]; ok {
		if s, ok := d.scalar(bf.value, "reject.burst", "a number of answers"); ok {
			n, err := parseCount(s)
			switch {
			case err != nil:
				d.errorf(bf.value, "reject.burst", "%v", err)
			case n < 1 || n > maxRejectBudget:
				d.errorf(bf.value, "reject.burst", "burst must be 1 to %d answers, got %s", maxRejectBudget, s)
			default:
				burst = n
			}
		}
	}
	r.Budget = rejectBudget(count, per, burst)
	return r
}

// checkReject warns of a reject: section no rule uses.
func (d *decoder) checkReject(p *Policy, f field) {
	// Mode shadow makes every action shadow: nothing to say then.
	if !p.Reject.Set || p.Mode == ModeShadow {
		return
	}
	for _, r := range p.Rules {
		if r.Action == ActionReject {
			return
		}
	}
	d.warnf(f.key, "reject", "no rule has action reject: the section has no effect")
}
