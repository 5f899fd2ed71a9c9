// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"time"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// Meta is the control plane's bookkeeping stored next to the maps: what
// attached them, how, and with which policy. Only this file converts it to
// and from the map's layout.
type Meta struct {
	LayoutVersion uint32
	NextStateID   uint32 // the state id the next new limiter level takes
	AttachMode    AttachMode
	Clock         Clock
	Attached      time.Time     // zero until an attach records it
	Tick          time.Duration // the coarse clock's tick when loaded
	NetnsIno      uint64        // the network namespace of the interface
	Ifindex       int
	Pid           uint32 // the attach process
	PolicySHA256  [32]byte
	PolicyPath    string // at most 255 bytes are kept
	ManualBans    uint64 // bans made by hand (xdplimit ban), ever
	Table4Seed    uint64 // the IPv4 state table's hash seed, made with it
	// BanLimits is the policy's bans: section Apply last wrote.
	BanLimits BanLimits
}

// BanLimits is how far bans from outside may reach (policy.BanLimits, the
// compiler's copy in the image): kept in the metadata so that `xdplimit
// ban`, which runs without the policy, and the feeds read the limits of the
// policy in force.
type BanLimits struct {
	MinPrefix4, MinPrefix6  int
	MaxImported, MaxPerSync int
	// Set: an applied policy recorded them; else a reader uses the
	// defaults (policy.DefaultBanLimits).
	Set bool
}

// AttachMode is the XDP attach mode an attach recorded.
type AttachMode uint32

const (
	AttachNone    AttachMode = iota // loaded, never attached
	AttachNative                    // in the driver
	AttachGeneric                   // after skb allocation
)

func (m AttachMode) String() string {
	switch m {
	case AttachNative:
		return "native"
	case AttachGeneric:
		return "generic"
	}
	return "none"
}

func metaFrom(g *gen.XdplimitXdplMetadata) Meta {
	m := Meta{
		LayoutVersion: g.LayoutVersion,
		NextStateID:   g.NextStateId,
		AttachMode:    AttachMode(g.AttachMode),
		Clock:         Clock(g.ClockMode),
		Tick:          time.Duration(g.TickNs),
		NetnsIno:      g.NetnsIno,
		Ifindex:       int(g.Ifindex),
		Pid:           g.Pid,
		PolicySHA256:  g.PolicySha256,
		ManualBans:    g.ManualBans,
		Table4Seed:    g.Table4Seed,
	}
	if g.BanLimitsSet != 0 {
		m.BanLimits = BanLimits{MinPrefix4: int(g.BanMinPrefix4), MinPrefix6: int(g.BanMinPrefix6),
			MaxImported: int(g.BanMaxImported), MaxPerSync: int(g.BanMaxPerSync), Set: true}
	}
	if g.AttachedUnixNs != 0 {
		m.Attached = time.Unix(0, int64(g.AttachedUnixNs))
	}
	path := make([]byte, 0, len(g.PolicyPath))
	for _, c := range g.PolicyPath {
		if c == 0 {
			break
		}
		path = append(path, byte(c))
	}
	m.PolicyPath = string(path)
	return m
}

func (m *Meta) raw() *gen.XdplimitXdplMetadata {
	g := &gen.XdplimitXdplMetadata{
		LayoutVersion: m.LayoutVersion,
		NextStateId:   m.NextStateID,
		AttachMode:    uint32(m.AttachMode),
		ClockMode:     uint32(m.Clock),
		TickNs:        uint64(m.Tick),
		NetnsIno:      m.NetnsIno,
		Ifindex:       uint32(m.Ifindex),
		Pid:           m.Pid,
		PolicySha256:  m.PolicySHA256,
		ManualBans:    m.ManualBans,
		Table4Seed:    m.Table4Seed,
	}
	if b := m.BanLimits; b.Set {
		g.BanLimitsSet = 1
		g.BanMinPrefix4, g.BanMinPrefix6 = uint8(b.MinPrefix4), uint8(b.MinPrefix6)
		g.BanMaxImported, g.BanMaxPerSync = uint32(b.MaxImported), uint32(b.MaxPerSync)
	}
	if !m.Attached.IsZero() {
		g.AttachedUnixNs = uint64(m.Attached.UnixNano())
	}
	// NUL-terminated: the last byte stays 0.
	for i := 0; i < len(m.PolicyPath) && i < len(g.PolicyPath)-1; i++ {
		g.PolicyPath[i] = int8(m.PolicyPath[i])
	}
	return g
}

// Meta reads the metadata.
func (l *Limiter) Meta() (Meta, error) {
	var g gen.XdplimitXdplMetadata
	if err := l.objs.XdplMeta.Lookup(uint32(0), &g); err != nil {
		return Meta{}, err
	}
	return metaFrom(&g), nil
}

// SetMeta writes the metadata.
func (l *Limiter) SetMeta(m Meta) error {
	return l.objs.XdplMeta.Update(uint32(0), m.raw(), ebpf.UpdateAny)
}

// SetPolicyInfo records which policy file is in force.
func (l *Limiter) SetPolicyInfo(path string, sha [32]byte) error {
	m, err := l.Meta()
	if err != nil {
		return err
	}
	m.PolicySHA256 = sha
	m.PolicyPath = path
	return l.SetMeta(m)
}

// BanLimits reads the limits on bans from outside that the policy in force
// set; Set is false while no policy recorded them.
func (l *Limiter) BanLimits() (BanLimits, error) {
	m, err := l.Meta()
	return m.BanLimits, err
}
