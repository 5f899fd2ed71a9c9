// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// ban decodes a rule's ban: {for: D}. It goes with action ban, or with
// action shadow (a ban recorded, never enforced); action ban needs it.
func (d *decoder) ban(m map[string]field, rule ast.Node, path string, action Action, key Key) *Ban {
	f, ok := m["ban"]
	if !ok {
		if action == ActionBan {
			d.errorf(rule, path, "action ban needs ban: {for: D}, e.g. ban: {for: 10m}")
		}
		return nil
	}
	bpath := join(path, "ban")
	if action == ActionDrop || action == ActionSynCookie || action == ActionReject {
		d.errorf(f.key, bpath, "ban: needs action: ban (or shadow, to record bans without enforcing them)")
		return nil
	}
	bm := d.mapping(f.value, bpath, "for")
	if bm == nil {
		return nil
	}
	ff, ok := bm["for"]
	if !ok {
		d.errorf(f.value, bpath, "for is required, e.g. ban: {for: 10m}")
		return nil
	}
	fpath := join(bpath, "for")
	s, ok := d.scalar(ff.value, fpath, "a duration")
	if !ok {
		return nil
	}
	dur, err := ParseBanDuration(s)
	if err != nil {
		d.errorf(ff.value, fpath, "%v", err)
		return nil
	}
	b := &Ban{For: dur, IPv4Prefix: key.IPv4Prefix, IPv6Prefix: key.IPv6Prefix}
	if key.Kind == KeyGlobal {
		b.IPv4Prefix, b.IPv6Prefix = 32, 128
	}
	return b
}

// ParseBanDuration parses a ban's duration: a Go duration, or a whole
// number of days ("7d"), from 1s to 30d.
func ParseBanDuration(s string) (time.Duration, error) {
	var dur time.Duration
	var days int
	if _, err := fmt.Sscanf(s, "%dd", &days); err == nil && fmt.Sprintf("%dd", days) == s {
		dur = time.Duration(days) * 24 * time.Hour
	} else if dur, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf("%q is not a duration; use Go durations like 30s, 10m or 12h, or days like 7d", s)
	}
	if dur < MinBan || dur > MaxBan {
		return 0, fmt.Errorf("ban of %s is out of range; use 1s to 30d", s)
	}
	return dur, nil
}
