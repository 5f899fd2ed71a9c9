// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"time"
)

// FleetShare is how a fleet token bucket's keys stay out of the exchange:
// each host admits a key up to its local share of the limit without telling
// the fleet, and a key takes part in the exchange only once it has used
// ReportAt of its share's burst. A key one host reports is exchanged by
// every host until Hold has passed without any host seeing it above its
// share.
type FleetShare struct {
	// Off: every key that admits anything is exchanged at every sync.
	Off bool
	// Fraction is each host's share of the limit (its rate and its burst);
	// 0 is auto, the limit divided by the live hosts.
	Fraction float64
	// ReportAt is the part of the share's burst a key may use before it
	// reports.
	ReportAt float64
	Hold     time.Duration
}

const (
	DefaultShareReportAt = 0.5
	DefaultShareHold     = 10 * time.Second
	MinShareHold         = time.Second
	MaxShareHold         = time.Hour
)

func defaultFleetShare() FleetShare {
	return FleetShare{ReportAt: DefaultShareReportAt, Hold: DefaultShareHold}
}

// String is the share as describe prints it.
func (s FleetShare) String() string {
	if s.Off {
		return "local share off (every key that admits is exchanged)"
	}
	share := "the limit / live hosts"
	if s.Fraction > 0 {
		share = fmtPercent(s.Fraction) + " of the limit"
	}
	return fmt.Sprintf("local share %s, a key is exchanged once it used %s of its share's burst, "+
		"and for %s after the fleet last saw it above its share", share, fmtPercent(s.ReportAt), s.Hold)
}

// fleetShare decodes share, report_at and share_hold of the fleet: section.
func (d *decoder) fleetShare(m map[string]field, fl *Fleet) {
	if sf, ok := m["share"]; ok {
		if s, ok := d.scalar(sf.value, "fleet.share", "auto, off or a share like 25%"); ok {
			switch s {
			case "auto":
			case "off":
				fl.Share.Off = true
			default:
				d.boundedShare(sf, "fleet.share", "25% or 0.25", 0.001, 1, &fl.Share.Fraction)
			}
		}
	}
	if rf, ok := m["report_at"]; ok {
		d.boundedShare(rf, "fleet.report_at", "50% or 0.5", 0.01, 1, &fl.Share.ReportAt)
	}
	if hf, ok := m["share_hold"]; ok {
		d.boundedDuration(hf.value, "fleet.share_hold", "10s", MinShareHold, MaxShareHold, &fl.Share.Hold)
		if fl.Share.Hold < 2*fl.Sync {
			d.errorf(hf.value, "fleet.share_hold", "share_hold %s is shorter than two syncs (%s): keys would leave the exchange between two syncs", fl.Share.Hold, 2*fl.Sync)
		}
	}
}

// shareBound is the part of a token bucket's fleet bound that local shares
// add: the burst the keys within their shares may use before they report,
// and the others' shares for the two syncs until they hear of a crossing.
func (s FleetShare) shareBound(burst uint64) string {
	if s.Off {
		return ""
	}
	extra := fmt.Sprintf("; local shares add at most %.0f (%s of the burst) + 2 syncs of rate",
		s.ReportAt*float64(burst), fmtPercent(s.ReportAt))
	if s.Fraction > 0 {
		extra += fmt.Sprintf(", and with more than %.0f hosts the keys within their shares may together get N x %s of the rate",
			1/s.Fraction, fmtPercent(s.Fraction))
	}
	return extra
}
