package fleet

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/maps"
)

// BanTable is the local ban table (maps.Limiter). A datapath that has one
// shares its bans with the fleet: a ban started on any host, by a rule or
// by hand, is enforced by every host after their next syncs, and an unban
// on any host ends it everywhere.
type BanTable interface {
	Bans() ([]maps.Ban, error)
	Ban(p netip.Prefix, d time.Duration, reason string) (netip.Prefix, error)
	Unban(p netip.Prefix) (bool, error)
	BanLookupOn() (bool, error)
	EnableBanLookup() error
}

// The fleet's bans are one Redis hash: prefix -> "expiry|origin|reason",
// the expiry in wall-clock ms. Each host merges it with its table every
// sync, remembering what both sides agreed on last time (known): a ban
// known and now missing on one side was unbanned there.
func (e *Engine) bansKey() string { return "xdpl:" + e.opts.Fleet.Namespace + ":bans" }

type fleetBan struct {
	expiresMs int64
	origin    string
	reason    string
}

func (b fleetBan) String() string {
	return strconv.FormatInt(b.expiresMs, 10) + "|" + b.origin + "|" + b.reason
}

func parseFleetBan(s string) (fleetBan, bool) {
	parts := strings.SplitN(s, "|", 3)
	if len(parts) != 3 {
		return fleetBan{}, false
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	return fleetBan{ms, parts[1], parts[2]}, err == nil
}

// banSlack: expiries closer than this are the same ban (each host turns
// the time left into its own clock's expiry).
const banSlack = int64(time.Second / time.Millisecond)

// syncBans merges the local ban table with the fleet's.
func (e *Engine) syncBans(ctx context.Context, bt BanTable) error {
	nowMs := e.opts.Wall() / 1e6
	bans, err := bt.Bans()
	if err != nil {
		return fmt.Errorf("%w: reading the ban table: %v", errDatapath, err)
	}
	local := map[netip.Prefix]fleetBan{}
	for _, b := range bans {
		if b.Shadow {
			continue // never enforced here: not the fleet's either
		}
		local[b.Prefix] = fleetBan{nowMs + b.Left.Milliseconds(), e.opts.HostID + " " + b.Origin, b.Reason}
	}
	raw, err := e.client.HGetAll(ctx, e.bansKey()).Result()
	if err != nil {
		return err
	}
	remote := map[netip.Prefix]fleetBan{}
	var gone []string // expired or unreadable fields
	for f, v := range raw {
		p, perr := netip.ParsePrefix(f)
		b, ok := parseFleetBan(v)
		if perr != nil || !ok || b.expiresMs <= nowMs {
			gone = append(gone, f)
			continue
		}
		remote[p] = b
	}
	push := map[string]any{}
	known := map[netip.Prefix]int64{}
	for p, l := range local {
		r, inRedis := remote[p]
		k, wasKnown := e.knownBans[p]
		switch {
		case !inRedis && wasKnown && l.expiresMs <= k+banSlack:
			// Unbanned elsewhere (the hash lost it): unban here.
			if _, err := bt.Unban(p); err != nil {
				return fmt.Errorf("%w: %v", errDatapath, err)
			}
			e.opts.Logf("fleet: %s unbanned by another host", p)
			continue
		case !inRedis || l.expiresMs > r.expiresMs+banSlack:
			push[p.String()] = l.String()
		case r.expiresMs > l.expiresMs+banSlack:
			if err := e.banHere(bt, p, r, nowMs); err != nil {
				return err
			}
		}
		known[p] = max(l.expiresMs, r.expiresMs)
	}
	for p, r := range remote {
		if _, ok := local[p]; ok {
			continue
		}
		if k, wasKnown := e.knownBans[p]; wasKnown && r.expiresMs <= k+banSlack {
			gone = append(gone, p.String()) // unbanned here
			continue
		}
		if err := e.banHere(bt, p, r, nowMs); err != nil {
			return err
		}
		known[p] = r.expiresMs
	}
	if len(push)+len(gone) > 0 {
		pipe := e.client.TxPipeline()
		if len(push) > 0 {
			pipe.HSet(ctx, e.bansKey(), push)
		}
		if len(gone) > 0 {
			pipe.HDel(ctx, e.bansKey(), gone...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	e.knownBans = known
	return nil
}

// banHere enforces a fleet ban on this host, and makes sure the datapath
// looks (this process owns the control word).
func (e *Engine) banHere(bt BanTable, p netip.Prefix, b fleetBan, nowMs int64) error {
	left := max(time.Duration(b.expiresMs-nowMs)*time.Millisecond, maps.MinBan)
	reason := "fleet: " + b.origin
	if b.reason != "" {
		reason += ": " + b.reason
	}
	if len(reason) > maps.BanReasonLen {
		reason = reason[:maps.BanReasonLen]
	}
	if _, err := bt.Ban(p, min(left, maps.MaxBan), reason); err != nil {
		return fmt.Errorf("%w: %v", errDatapath, err)
	}
	on, err := bt.BanLookupOn()
	if err == nil && !on {
		err = bt.EnableBanLookup()
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errDatapath, err)
	}
	return nil
}
