// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/model"
)

// Bitmap is the set of rules (by index in file order) a field value admits.
type Bitmap = gen.XdplimitXdplBitmap

// LevelSpec is one compiled limiter level before state ids are assigned.
type LevelSpec struct {
	Params      model.Params
	Bytes       bool
	KeyKind     uint8
	V4Prefix    int
	V6Prefix    int
	ToleranceNs uint64 // token bucket burst as time; windows: the window
	// Origin is the level's index in the policy (0 = the rule's own
	// limit); Levels are in evaluation order, which differs.
	Origin int
	// Fleet: the limit is shared by the fleet's hosts (scope: fleet).
	Fleet bool
}

// RuleSpec is one compiled rule.
type RuleSpec struct {
	Name   string
	Shadow bool
	Levels []LevelSpec
	Ban    *BanSpec // action: ban; nil otherwise
	// SynCookie: action syncookie. A SYN over the limit is answered with a
	// SYN-ACK carrying a SYN cookie instead of dropped (bpf/syncookie.h).
	SynCookie bool
	// Reject: action reject. A packet over the limit is answered with a
	// TCP reset or an ICMP error, within Image.RejectBudget and one a
	// second per source, and dropped (bpf/reject.h).
	Reject bool
}

// BanSpec is what a rule with action ban bans: the exceeding packet's
// source masked to V4Bits or V6Bits, for For.
type BanSpec struct {
	For            time.Duration
	V4Bits, V6Bits int
}

// PrefixBitmap is an LPM entry of a classification trie.
type PrefixBitmap struct {
	Prefix netip.Prefix
	Rules  Bitmap
}

// Image is a whole policy in datapath form, independent of the generation
// it will be written to and of the state ids and counter slots the running
// limiter assigns.
type Image struct {
	Rules  []RuleSpec
	Dims   uint32
	Shadow bool

	Proto        []Bitmap       // ProtoSlots entries, when DimProto is used
	DPort, SPort []Bitmap       // PortSlots entries
	TCPFlags     []Bitmap       // TCPFlagSlots entries
	VLAN         []Bitmap       // VLANSlots entries
	Len          []Bitmap       // LenSlots entries
	TTL          []Bitmap       // TTLSlots entries
	TOS          []Bitmap       // TOSSlots entries
	ICMPType     []Bitmap       // ICMPSlots entries
	ICMPCode     []Bitmap       // ICMPSlots entries
	Payload      []PayloadShape // at most PayloadShapes, when DimPayload is used
	Src, Dst     []PrefixBitmap
	Allow, Deny  []netip.Prefix
	Unparsed     UnparsedSpec
	// SampleOneIn is the datapath's drop sampling, one in this many (a
	// power of two; 0 means DefaultSampleOneIn): what top and the drop log
	// read from xdpl_drops.
	SampleOneIn uint32
	// TrafficOneIn is the sampling of every packet, whatever its verdict,
	// one in this many (a power of two; 0: off), into the rings
	// TrafficRing reads (captures, fingerprints).
	TrafficOneIn uint32
	// BanLimits is the policy's bans: section, recorded in the metadata by
	// Apply (when Set) for the commands and feeds that import bans.
	BanLimits BanLimits
	// SynAck is what the SYN-ACKs of syncookie rules offer; the zero value
	// is DefaultSynAck. It describes the host, not the policy: attach
	// fills it in from the interface and the sysctls.
	SynAck SynAck
	// RejectBudget is the global budget of the answers of reject rules:
	// a token bucket (a global level); Apply refuses an image with reject
	// rules and none.
	RejectBudget *LevelSpec
	// Conversations is how the conversation checks run
	// (bpf/conversation.h); the zero value turns them off.
	Conversations Conversations
	// Local, when not nil, is this host's local addresses and prefixes,
	// which Apply writes (SetLocal) before the switch: the checks judge
	// only what is addressed to them. It describes the host, not the
	// policy: attach fills it in from the local routing table.
	Local []netip.Prefix
}

// SlidingLogs says whether some level of some rule is a sliding_log, the
// only algorithm that needs the sliding_log table.
func (img *Image) SlidingLogs() bool {
	for _, r := range img.Rules {
		for _, ls := range r.Levels {
			if ls.Params.Algorithm == model.AlgSlidingLog {
				return true
			}
		}
	}
	return false
}

// SynCookies says whether some rule answers SYNs with cookies.
func (img *Image) SynCookies() bool {
	for _, r := range img.Rules {
		if r.SynCookie {
			return true
		}
	}
	return false
}

// Rejects says whether some rule answers with resets and ICMP errors.
func (img *Image) Rejects() bool {
	for _, r := range img.Rules {
		if r.Reject {
			return true
		}
	}
	return false
}

// SetBit adds rule i to b.
func SetBit(b *Bitmap, i int) { b.W[i/64] |= 1 << (i % 64) }

// PayloadShape is one window of payload matches (bpf/classify_payload.h):
// Need bytes from Off of the transport payload, read under Mask.
type PayloadShape struct {
	Off  uint16
	Need uint8
	Mask [PayloadWindow]byte
	// Absent is the rules that do not read this window: they match
	// whatever it holds, and a payload too short to hold it.
	Absent Bitmap
	// Values maps the window's masked bytes to the rules naming them,
	// Absent's included.
	Values map[[PayloadWindow]byte]Bitmap
}

// needsFineClock says whether a level's burst or window is too short for the
// coarse clock, which advances once per tick: a token bucket whose burst
// lasts less than a few ticks would lose refill each tick (a burst of 1 at
// 10k/s would admit one packet per 4 ms tick), and a window only a few ticks
// long would have its boundaries off by a large share.
func (ls LevelSpec) needsFineClock(tickNs uint64) bool {
	if ls.Params.Algorithm == model.AlgTokenBucket {
		return ls.ToleranceNs < 4*tickNs
	}
	return ls.ToleranceNs < 100*tickNs
}

// untrackedMax is the most a key without a state entry can pass at one level
// per second: track_after - 1 packets per CPU per sketch epoch.
func untrackedMax(trackAfter uint32, cpus int) float64 {
	epoch := float64(uint64(1)<<gen.XdplimitXdplConstXDPL_SKETCH_EPOCH_SHIFT) / 1e9
	return float64(trackAfter-1) * float64(cpus) / epoch
}

// maxFrameBytes is the frame size assumed for byte-counting levels when
// deciding whether the sketch may leave keys untracked (Ethernet MTU frames).
const maxFrameBytes = 1518

// trackFirst says whether a level must create state at a key's first
// packet: when an untracked key could pass more than half its limit, leaving
// keys untracked would let a source evade the limit by staying below the
// sketch's threshold.
func (ls LevelSpec) trackFirst(trackAfter uint32, cpus int) bool {
	if trackAfter <= 1 || ls.KeyKind == KeyGlobal {
		return false
	}
	// Exact means every admission is logged: none may pass untracked.
	if ls.Params.Algorithm == model.AlgSlidingLog {
		return true
	}
	var rate float64 // units per second
	switch ls.Params.Algorithm {
	case model.AlgTokenBucket:
		rate = 1e9 * float64(uint64(1)<<model.FPShift) / float64(ls.Params.P1)
	default:
		rate = float64(ls.Params.P2) / (float64(ls.Params.P1) / 1e9)
	}
	untracked := untrackedMax(trackAfter, cpus)
	if ls.Bytes {
		untracked *= maxFrameBytes
	}
	return 2*untracked > rate
}

// prefixMask4 returns the IPv4 mask as the datapath compares it: network
// order bytes read as a native-endian u32, like the packet's address.
func prefixMask4(bits int) uint32 {
	var b [4]byte
	for i := 0; i < bits; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return binary.NativeEndian.Uint32(b[:])
}

func prefixMask6(bits int) [4]uint32 {
	var b [16]byte
	for i := 0; i < bits; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	var m [4]uint32
	for i := range m {
		m[i] = binary.NativeEndian.Uint32(b[i*4:])
	}
	return m
}

// UnparsedSpec is the compiled unparsed section of a policy: what the
// datapath does with frames its parser cannot judge.
type UnparsedSpec struct {
	Drop  bool
	Limit *LevelSpec // a global level, or nil
}
