// SPDX-License-Identifier: Apache-2.0

// Package banfeed is the gate every ban from outside the host passes before
// it reaches the ban table: the fleet's Redis hash, and any other feed of
// bans (a CrowdSec bouncer). Whoever can write to a feed can offer any ban;
// the gate keeps what they can do within the policy's bans: section.
//
// Check judges one offer on its own (a pure function: normalise, refuse
// what is too wide, out of time or malformed, escape the text); a Gate per
// source counts and logs each refusal once, and bounds how many bans the
// source applies per sync and holds in total.
package banfeed

import (
	"fmt"
	"math/big"
	"net/netip"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/internal/termsafe"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// Kind is why an offered ban was refused: the reason label of
// xdplimit_bans_refused_total.
type Kind string

const (
	// Malformed: not a ban at all (a field that is not a prefix, a value
	// that cannot be read, an entry longer than any ban's).
	Malformed Kind = "malformed"
	// TooWide: a prefix shorter than bans.min_prefix.
	TooWide Kind = "too_wide"
	// Expired: it ended already.
	Expired Kind = "expired"
	// TooLong: it ends further ahead than a ban can last (maps.MaxBan).
	TooLong Kind = "too_long"
	// Datapath: the ban table refused it (a trie full).
	Datapath Kind = "datapath"
)

// Kinds lists every Kind, for metrics.
var Kinds = []Kind{Malformed, TooWide, Expired, TooLong, Datapath}

// Skew is how far past maps.MaxBan an offered end may be and still be
// taken (as MaxBan): the hosts' clocks differ by this much at most.
const Skew = time.Minute

// Limits returns the limits a source obeys: those the policy in force
// recorded, else the defaults.
func Limits(b maps.BanLimits) maps.BanLimits {
	if b.Set {
		return b
	}
	d := policy.DefaultBanLimits()
	return maps.BanLimits{MinPrefix4: d.MinPrefixIPv4, MinPrefix6: d.MinPrefixIPv6,
		MaxImported: d.MaxImported, MaxPerSync: d.MaxPerSync}
}

// Offer is a ban as a source offers it, before any check.
type Offer struct {
	Prefix netip.Prefix
	Left   time.Duration // until it ends, by the source's clock
	Origin string        // who banned it, as the source says (a host and rule, a scenario)
	Reason string
}

// Verdict is what Check makes of an offer.
type Verdict struct {
	// Ban is the request for the ban table; valid only when Refused is "".
	Ban     maps.BanRequest
	Refused Kind
	// Why says what was wrong, for the log (never outside text unescaped).
	Why string
	// Escaped: the origin or reason held characters a terminal acts on,
	// now escaped in Ban.Reason.
	Escaped bool
}

// Check judges one offer from source (a short name of ours, as "fleet"):
// the prefix is normalised (masked, IPv4-mapped as IPv4) and refused when
// wider than lim allows; a ban that ended is refused, one ending within
// Skew past maps.MaxBan is cut to MaxBan and one ending later refused, one
// ending sooner than maps.MinBan lasts MinBan; origin and reason are
// escaped and cut to what the table holds (Reason).
func Check(source string, o Offer, lim maps.BanLimits) Verdict {
	if !o.Prefix.IsValid() {
		return Verdict{Refused: Malformed, Why: "not a prefix"}
	}
	p := maps.CanonicalBanPrefix(o.Prefix)
	if min := MinBits(p, lim); p.Bits() < min {
		return Verdict{Refused: TooWide, Why: fmt.Sprintf("wider than /%d: %s", min, Covers(p))}
	}
	switch {
	case o.Left <= 0:
		return Verdict{Refused: Expired, Why: "ended already"}
	case o.Left > maps.MaxBan+Skew:
		return Verdict{Refused: TooLong, Why: fmt.Sprintf("ends %d days ahead, more than a ban lasts (%d days)",
			int64(o.Left/(24*time.Hour)), int64(maps.MaxBan/(24*time.Hour)))}
	}
	reason, escaped := Reason(source, o.Origin, o.Reason)
	return Verdict{Ban: maps.BanRequest{Prefix: p, For: min(max(o.Left, maps.MinBan), maps.MaxBan), Reason: reason},
		Escaped: escaped}
}

// MinBits is the shortest prefix lim accepts for p's family.
func MinBits(p netip.Prefix, lim maps.BanLimits) int {
	if maps.CanonicalBanPrefix(p).Addr().Is4() {
		return lim.MinPrefix4
	}
	return lim.MinPrefix6
}

// TooWideFor says whether lim refuses p from outside (and `xdplimit ban`
// without --force).
func TooWideFor(p netip.Prefix, lim maps.BanLimits) bool {
	return maps.CanonicalBanPrefix(p).Bits() < MinBits(p, lim)
}

// Reason is the reason a ban from source is stored with: "SOURCE: ORIGIN:
// REASON" (or "SOURCE: ORIGIN" without a reason), the origin and reason
// escaped for a terminal and the whole cut to what the ban table holds.
// escaped says whether escaping changed anything. The source prefix is also
// how the bans held from a source are told apart (From).
func Reason(source, origin, reason string) (s string, escaped bool) {
	s = source + ": " + origin
	if reason != "" {
		s += ": " + reason
	}
	return termsafe.Clip(s, maps.BanReasonLen), !termsafe.Clean(origin) || !termsafe.Clean(reason)
}

// From says whether b came from source (its reason is one Reason made).
func From(b maps.Ban, source string) bool {
	return !b.Shadow && marks(b.Reason, source)
}

// marks says whether reason starts as Reason starts those of source.
func marks(reason, source string) bool {
	return strings.HasPrefix(reason, source+": ")
}

// The feeds' sources: a CrowdSec bouncer's bans, and those a host takes
// from its fleet's ban hash.
const (
	CrowdSec = "crowdsec"
	Fleet    = "fleet"
)

// feeds are every source whose bans are written as manual ones.
var feeds = []string{CrowdSec, Fleet}

// Origin is the origin an operator reads for b (the bans' list, their
// JSON, the bans_active series): the feed's source for a feed's ban, which
// the table stores as a manual one (its origin field holds a rule's counter
// slot or "by hand", and the source is in the reason), else b.Origin.
func Origin(b maps.Ban) string {
	for _, s := range feeds {
		if b.Origin == maps.OriginManual && From(b, s) {
			return s
		}
	}
	return b.Origin
}

// FeedOf is the feed whose bans a reason marks ("SOURCE: ", Reason), or
// "". A ban by hand must not carry such a reason: its feed would lift it.
func FeedOf(reason string) string {
	for _, s := range feeds {
		if marks(reason, s) {
			return s
		}
	}
	return ""
}

// hostFeeds are the sources whose bans belong to the host that applied
// them: every host reads such a feed for itself (each host's bouncer asks
// the LAPI), so the fleet neither shares their bans, which every host
// would then hold twice and could not lift when the feed deletes them, nor
// overwrites them with its own.
var hostFeeds = []string{CrowdSec}

// HostFeed says whether b came from a feed the fleet leaves to each host.
func HostFeed(b maps.Ban) bool {
	for _, s := range hostFeeds {
		if From(b, s) {
			return true
		}
	}
	return false
}

// Covers says what a ban of p covers, in words an operator checks before
// forcing it: "0.0.0.0/0 covers every IPv4 address (4294967296 addresses)".
func Covers(p netip.Prefix) string {
	p = maps.CanonicalBanPrefix(p)
	family := "IPv6"
	if p.Addr().Is4() {
		family = "IPv4"
	}
	host := p.Addr().BitLen() - p.Bits()
	n := new(big.Int).Lsh(big.NewInt(1), uint(host))
	count := n.String()
	if host > 64 {
		count = fmt.Sprintf("2^%d", host)
	}
	switch {
	case p.Bits() == 0:
		return fmt.Sprintf("%s covers every %s address (%s addresses)", p, family, count)
	case host == 0:
		return fmt.Sprintf("%s covers one %s address", p, family)
	}
	return fmt.Sprintf("%s covers %s %s addresses, %s to %s", p, count, family, p.Addr(), last(p))
}

// last is the last address of p.
func last(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
