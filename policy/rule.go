// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"regexp"
	"slices"
	"strconv"

	"github.com/goccy/go-yaml/ast"
)

// The rules: the defaults a rule falls back on, each rule's fields, its
// key and aggregates, and the checks across rules.

// ruleDefaults is what a rule gets for a key or action it does not set.
type ruleDefaults struct {
	key     Key
	keyNode ast.Node // where the default key was written, nil for the built-in one
	action  Action
}

// defaultKey is the key of a rule that sets none, without defaults.key:
// per source address, /32 for IPv4 and /64 for IPv6 (one subscriber).
var defaultKey = Key{Kind: KeySrcIP, IPv4Prefix: 32, IPv6Prefix: 64}

func (d *decoder) defaults(f field) ruleDefaults {
	defs := ruleDefaults{key: defaultKey, action: ActionDrop}
	if f.value == nil {
		return defs
	}
	m := d.mapping(f.value, "defaults", "key", "action")
	if k, ok := m["key"]; ok {
		if key, ok := d.key(k.value, "defaults.key"); ok {
			defs.key, defs.keyNode = key, k.value
		}
	}
	if a, ok := m["action"]; ok {
		defs.action = d.action(a.value, "defaults.action")
	}
	return defs
}

// decodedRule is a rule with what the checks across rules need.
type decodedRule struct {
	Rule
	node ast.Node
	path string
	ok   bool // decoded without errors, so cross-rule checks can trust it
}

func (d *decoder) rules(f field, defs ruleDefaults, mode Mode) []Rule {
	if f.value == nil {
		return nil
	}
	n := d.deref(f.value, "rules")
	if n == nil {
		return nil
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.errorf(n, "rules", "expected a list of rules, got %s", describeNode(n))
		return nil
	}
	var decoded []decodedRule
	names := map[string]int{} // name → line of first use
	for i, rn := range seq.Values {
		path := index("rules", i)
		if i == maxRules {
			d.errorf(rn, path, "too many rules: the datapath holds at most %d", maxRules)
		}
		before := len(d.errs)
		r := d.rule(rn, path, defs, names)
		r.ok = r.ok && len(d.errs) == before
		if mode == ModeShadow {
			r.Action = ActionShadow
		}
		decoded = append(decoded, r)
	}
	d.checkRules(decoded)
	rules := make([]Rule, len(decoded))
	for i, r := range decoded {
		rules[i] = r.Rule
	}
	return rules
}

var nameRE = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)

func (d *decoder) rule(n ast.Node, path string, defs ruleDefaults, names map[string]int) decodedRule {
	r := decodedRule{node: n, path: path}
	r.Line, _ = position(n)
	m := d.mapping(n, path, "name", "match", "key", "limit", "action", "aggregate", "ban")
	if m == nil {
		return r
	}
	if f, ok := m["name"]; ok {
		if s, ok := d.scalar(f.value, join(path, "name"), "a rule name"); ok {
			switch first, dup := names[s]; {
			case !nameRE.MatchString(s):
				d.errorf(f.value, join(path, "name"), "rule name %q must be 1 to 63 characters of a-z, 0-9, _ and -", s)
			case dup:
				d.errorf(f.value, join(path, "name"), "duplicate rule name %q (first used on line %d)", s, first)
			default:
				names[s], _ = position(f.value)
			}
			r.Name = s
		}
	} else {
		d.errorf(n, path, "name is required")
	}

	r.Match = Match{Protocol: ProtoAny}
	matchOK := true
	if f, ok := m["match"]; ok {
		r.Match, matchOK = d.match(f.value, join(path, "match"))
	}

	own := Level{Key: defs.key}
	keyNode := defs.keyNode
	if f, ok := m["key"]; ok {
		own.Key, _ = d.key(f.value, join(path, "key"))
		keyNode = f.value
	}
	if f, ok := m["limit"]; ok {
		own.Limit, _ = d.limit(f.value, join(path, "limit"))
	} else {
		d.errorf(n, path, "limit is required, e.g. limit: {algorithm: token_bucket, rate: 1000/s, burst: 2000}")
	}
	r.Levels = []Level{own}
	if matchOK {
		d.checkKeyPorts(own.Key, r.Match.Protocol, keyNode, n, join(path, "key"))
	}

	r.Action = defs.action
	actionNode := n
	if f, ok := m["action"]; ok {
		r.Action = d.action(f.value, join(path, "action"))
		actionNode = f.value
	}
	if r.Action == ActionSynCookie && matchOK {
		d.checkSynCookie(r.Match, actionNode, join(path, "action"))
	}

	r.Ban = d.ban(m, n, path, r.Action, own.Key)

	if f, ok := m["aggregate"]; ok {
		r.Levels = append(r.Levels, d.aggregate(f.value, join(path, "aggregate"), r.Match.Protocol, matchOK)...)
	}
	r.ok = matchOK
	return r
}

// checkSynCookie rejects action syncookie on a rule that can match anything
// but a TCP SYN: the answer is a SYN-ACK, which is right for a SYN alone.
func (d *decoder) checkSynCookie(m Match, n ast.Node, path string) {
	syn := m.TCPFlags != nil && m.TCPFlags.Set&TCPFlagSYN != 0 && m.TCPFlags.Clear&TCPFlagACK != 0
	if m.Protocol != ProtoTCP || !syn {
		d.errorf(n, path, "action syncookie answers TCP SYNs: the rule needs match: {protocol: tcp, tcp_flags: [syn]}")
	}
}

// checkKeyPorts rejects a port key on packets without ports. keyNode is
// where the key was written (the rule, an aggregate level or defaults.key);
// when it is the built-in default there is no port in it.
func (d *decoder) checkKeyPorts(k Key, proto Protocol, keyNode, ruleNode ast.Node, path string) {
	if !k.Kind.hasPort() || proto.hasPorts() {
		return
	}
	at := keyNode
	if at == nil {
		at = ruleNode
	}
	d.errorf(at, path, "key %s needs protocol tcp or udp in the rule's match (protocol is %s)", k.Kind, proto)
}

func (d *decoder) aggregate(n ast.Node, path string, proto Protocol, matchOK bool) []Level {
	n = d.deref(n, path)
	if n == nil {
		return nil
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.errorf(n, path, "expected a list of levels like [{key: global, limit: {...}}], got %s", describeNode(n))
		return nil
	}
	var levels []Level
	for i, ln := range seq.Values {
		lpath := index(path, i)
		if i == maxAggregate {
			d.errorf(ln, lpath, "at most %d aggregate levels: the datapath applies %d levels per rule, the rule's own and %d aggregates", maxAggregate, maxAggregate+1, maxAggregate)
		}
		m := d.mapping(ln, lpath, "key", "limit")
		if m == nil {
			continue
		}
		var l Level
		if f, ok := m["key"]; ok {
			l.Key, _ = d.key(f.value, join(lpath, "key"))
			if matchOK {
				d.checkKeyPorts(l.Key, proto, f.value, ln, join(lpath, "key"))
			}
		} else {
			d.errorf(ln, lpath, "key is required in an aggregate level, e.g. key: global")
		}
		if f, ok := m["limit"]; ok {
			l.Limit, _ = d.limit(f.value, join(lpath, "limit"))
		} else {
			d.errorf(ln, lpath, "limit is required in an aggregate level")
		}
		levels = append(levels, l)
	}
	return levels
}

// key decodes `global`, `src_ip`, `src_ip+dst_port` or a mapping with an
// optional type and prefixes. Prefixes not given are 32 and 64: a key is
// complete where it is written and inherits nothing from defaults.key.
func (d *decoder) key(n ast.Node, path string) (Key, bool) {
	before := len(d.errs)
	n = d.deref(n, path)
	if n == nil {
		return defaultKey, false
	}
	k := defaultKey
	if _, ok := n.(*ast.MappingNode); !ok {
		s, ok := d.scalar(n, path, "a key")
		if !ok {
			return k, false
		}
		kind := slices.Index(keyKindNames, s)
		if kind < 0 {
			d.errorf(n, path, "unknown key %q; use src_ip, src_ip+dst_port, src_ip+src_port, global or a mapping like {ipv4_prefix: 24, ipv6_prefix: 48}", s)
			return k, false
		}
		k.Kind = KeyKind(kind)
		if k.Kind == KeyGlobal {
			k.IPv4Prefix, k.IPv6Prefix = 0, 0
		}
		return k, true
	}
	m := d.mapping(n, path, "type", "ipv4_prefix", "ipv6_prefix")
	if f, ok := m["type"]; ok {
		if v, ok := d.enum(f.value, join(path, "type"), "key type", keyKindNames); ok {
			k.Kind = KeyKind(v)
		}
	}
	for _, pf := range []struct {
		name string
		max  int
		dst  *int
	}{{"ipv4_prefix", 32, &k.IPv4Prefix}, {"ipv6_prefix", 128, &k.IPv6Prefix}} {
		f, ok := m[pf.name]
		if !ok {
			continue
		}
		fpath := join(path, pf.name)
		if k.Kind == KeyGlobal {
			d.errorf(f.key, fpath, "key type global takes no prefix")
			continue
		}
		s, ok := d.scalar(f.value, fpath, "a prefix length")
		if !ok {
			continue
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > pf.max {
			d.errorf(f.value, fpath, "%s must be 1 to %d, got %q (for one bucket for everything, use key: global)", pf.name, pf.max, s)
			continue
		}
		*pf.dst = v
	}
	if k.Kind == KeyGlobal {
		k.IPv4Prefix, k.IPv6Prefix = 0, 0
	}
	return k, len(d.errs) == before
}
