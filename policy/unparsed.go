// SPDX-License-Identifier: Apache-2.0

package policy

// Unparsed is what happens to frames the parser cannot judge: no IP header
// found where one was announced, or a header the Linux stack would drop
// (truncated, a bad length, checksum or version, more VLAN tags than the
// parser pops). Frames of other ethertypes that parse fine (ARP, LLDP, ...)
// are not unparsed: they are non-IP and always pass. The zero Unparsed passes
// every such frame unlimited.
type Unparsed struct {
	// Drop drops every unparsed frame; otherwise they pass, within Limit.
	Drop bool
	// Limit, when set, is one global bucket over every unparsed frame that
	// Drop lets through: a flood of garbage frames is capped at it.
	Limit *Limit
}

// unparsedActions are the actions of the unparsed section, in the order of
// Unparsed.Drop's values.
var unparsedActions = []string{"pass", "drop"}

// String renders the section as `policy check` prints it.
func (u Unparsed) String() string {
	switch {
	case u.Drop:
		return "drop"
	case u.Limit != nil:
		return "pass, limited to " + u.Limit.String() + " (one global bucket)"
	}
	return "pass, unlimited"
}

// unparsed decodes the top-level unparsed section:
//
//	unparsed: {action: pass | drop, limit: {...}}
func (d *decoder) unparsed(f field) Unparsed {
	var u Unparsed
	if f.value == nil {
		return u
	}
	m := d.mapping(f.value, "unparsed", "action", "limit")
	if m == nil {
		return u
	}
	if a, ok := m["action"]; ok {
		v, _ := d.enum(a.value, "unparsed.action", "action", unparsedActions)
		u.Drop = v == 1
	}
	if lf, ok := m["limit"]; ok {
		if u.Drop {
			d.errorf(lf.key, "unparsed.limit", "a limit has no effect with action drop: every unparsed frame is dropped")
			return u
		}
		if l, ok := d.limit(lf.value, "unparsed.limit"); ok {
			if l.Scope == ScopeFleet {
				// Unparsed frames have no key to share: the limit is
				// this host's own.
				d.errorf(lf.value, "unparsed.limit", "scope: fleet is for rules' limits; the unparsed limit is this host's")
				return u
			}
			u.Limit = &l
		}
	}
	return u
}
