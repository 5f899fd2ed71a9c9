// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// Mode is the XDP attach mode.
type Mode int

const (
	// ModeAuto: native, falling back to generic where the driver lacks
	// XDP. Native and generic are what the metadata records.
	ModeAuto    Mode = 0
	ModeNative       = Mode(maps.AttachNative)  // in the driver
	ModeGeneric      = Mode(maps.AttachGeneric) // after skb allocation: works everywhere, slower
)

func (m Mode) String() string {
	switch m {
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return "auto"
}

// ParseMode parses --mode.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto", "":
		return ModeAuto, nil
	case "native", "driver", "drv":
		return ModeNative, nil
	case "generic", "skb":
		return ModeGeneric, nil
	}
	return 0, fmt.Errorf("--mode %q: use auto, native or generic", s)
}

// Policy is a compiled policy and where it came from.
type Policy struct {
	Image  *maps.Image
	Path   string
	SHA256 [32]byte
	// Fleet is the policy's fleet: section (nil without one), for the
	// fleet sync that runs beside the attachment.
	Fleet *policy.Fleet
	// Log is the policy's log: section, for the drop log beside it.
	Log policy.Log
	// CrowdSec is the policy's crowdsec: section (nil without one), for
	// the bouncer beside it.
	CrowdSec *policy.CrowdSec
	// Conversations is the policy's conversations: section, for the
	// local addresses and the arming kept beside it.
	Conversations policy.Conversations
	// Autopilot is the policy's autopilot: section (nil without one), for
	// the autopilot beside it.
	Autopilot *policy.Autopilot
}

// Config for Attach.
type Config struct {
	Interface  string
	Mode       Mode
	Force      bool   // replace another XDP program
	MaxSources uint32 // IPv4 per-source state entries
	// MaxOtherSources: entries for every other key (IPv6, global,
	// src_ip+dst_port); 0 means MaxSources / 4.
	MaxOtherSources uint32
	// MaxBans sizes the ban table (a power of two; 0: maps.DefaultMaxBans);
	// a pinned table keeps its size.
	MaxBans uint32
	Clock   maps.Clock
	Policy  Policy
	// Warn receives warnings that do not stop the attach.
	Warn func(string)
	// Lock, when set, is the interface's lock, taken by the caller
	// (LockInterface); the Attachment then holds it. When Attach fails
	// the caller still holds it. Without it Attach takes the lock itself.
	Lock *Lock
}

// Attachment is the limiter attached to an interface by this process.
type Attachment struct {
	Interface string
	Ifindex   int
	Mode      Mode // the mode in effect: native or generic
	Adopted   bool // took over pinned state left by an earlier attach
	// NativeErr is why native mode failed when ModeAuto fell back to
	// generic mode (nil otherwise).
	NativeErr error
	// Migrated describes the pinned limiter of another map layout that
	// this attachment replaced (nil when there was none): see migrate.
	Migrated *Migration
	Limiter  *maps.Limiter

	link link.Link
	dir  string
	lock *os.File
}

// Attach loads the limiter with the policy and attaches it, or adopts the
// pinned state of an earlier attach on the same interface, replacing its
// program atomically. On failure the interface and bpffs are left as they
// were.
func Attach(cfg Config) (*Attachment, error) {
	if cfg.Warn == nil {
		cfg.Warn = func(string) {}
	}
	warn := cfg.Warn
	if err := CheckInterfaceName(cfg.Interface); err != nil {
		return nil, err
	}
	nl, err := netlink.LinkByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", cfg.Interface, err)
	}
	if cfg.Policy.Image == nil {
		return nil, errors.New("no policy")
	}
	if cfg.Policy.Image, err = withHost(cfg.Policy.Image, cfg.Interface, nl.Attrs().MTU); err != nil {
		return nil, err
	}
	if err := CheckKernel(); err != nil {
		return nil, err
	}
	if err := ensureBPFFS(); err != nil {
		return nil, err
	}
	if PrivateMountNamespace() {
		warn("running in a private mount namespace (ip netns exec?): the pins under " + PinRoot +
			" die with it, so enforcement stops when this process exits; use nsenter --net=/var/run/netns/NAME to keep it")
	}
	var lock *os.File
	if cfg.Lock != nil {
		lock = cfg.Lock.f
	} else if lock, err = lockInterface(cfg.Interface); err != nil {
		return nil, err
	}
	a := &Attachment{Interface: cfg.Interface, Ifindex: nl.Attrs().Index, dir: pinDir(cfg.Interface), lock: lock}
	ok := false
	defer func() {
		if !ok && cfg.Lock == nil {
			unlockInterface(a.lock)
		}
	}()

	if _, err := os.Stat(a.dir); err == nil {
		err := a.adopt(cfg)
		if err == nil {
			ok = true
			return a, nil
		}
		if !errors.Is(err, errStale) {
			return nil, err
		}
		warn(fmt.Sprintf("removing stale pins in %s: %v", a.dir, errors.Unwrap(err)))
		if err := os.RemoveAll(a.dir); err != nil {
			return nil, err
		}
	}
	if err := a.attachNew(cfg, nl); err != nil {
		return nil, err
	}
	ok = true
	return a, nil
}

var errStale = errors.New("stale pinned state")

// adopt takes over a running limiter: the pinned maps keep the counters and
// every source's state, and the new program replaces the old one in the
// pinned link with one atomic update, so enforcement has no gap.
func (a *Attachment) adopt(cfg Config) error {
	lk, err := link.LoadPinnedLink(filepath.Join(a.dir, "link"), nil)
	if err != nil {
		return fmt.Errorf("%w: link: %v", errStale, err)
	}
	info, err := lk.Info()
	if err != nil || info.XDP() == nil || int(info.XDP().Ifindex) != a.Ifindex {
		lk.Close()
		return fmt.Errorf("%w: the pinned link is not attached to %s any more", errStale, a.Interface)
	}
	pinned, complete := loadPinnedMaps(a.dir)
	defer func() {
		for _, m := range pinned {
			m.Close()
		}
	}()
	// Pins of another layout, or lacking a map this program uses, are
	// another program's maps: carried over into new ones.
	if layout, err := maps.PinnedLayout(pinned); err != nil || layout != maps.LayoutVersion || !complete {
		if err := a.migrate(cfg, lk, pinned, layout); err != nil {
			lk.Close()
			return err
		}
		return nil
	}
	// The sliding_log table follows the policy: allocated for its first
	// sliding_log level, released when none is left.
	opts := maps.Options{Clock: cfg.Clock, Pinned: pinned}
	resized := resizeLogs(&opts, cfg.Policy.Image)
	l, err := maps.Load(opts)
	if err != nil {
		lk.Close()
		return err
	}
	meta, err := l.Meta()
	if err == nil {
		if ino, _ := NetnsInode(); meta.NetnsIno != 0 && ino != meta.NetnsIno {
			err = fmt.Errorf("%s holds the state of an interface %s in another network namespace", a.dir, a.Interface)
		}
	}
	if err == nil {
		err = l.Apply(cfg.Policy.Image)
	}
	if err == nil {
		err = syncEgress(a.Ifindex, l, cfg.Policy.Image.Conversations.Reflection.On)
	}
	if err == nil {
		err = lk.Update(l.Program())
	}
	if err != nil {
		l.Close()
		lk.Close()
		return err
	}
	a.link, a.Limiter, a.Adopted = lk, l, true
	a.Mode = Mode(meta.AttachMode)
	if resized {
		if err := a.repin(maps.LogsMap); err != nil {
			cfg.Warn(fmt.Sprintf("the program uses a new sliding_log table that could not be pinned (%v): "+
				"the commands that read the pins see the old one, and the next attach allocates it again", err))
		}
	}
	return a.recordMeta(cfg, false)
}

func (a *Attachment) attachNew(cfg Config, nl netlink.Link) (err error) {
	// Another XDP program there: refuse unless --force, and then put it back
	// if anything below fails.
	var restore func()
	if x := nl.Attrs().Xdp; x != nil && x.Attached {
		if !cfg.Force {
			return fmt.Errorf("%s already has an XDP program (id %d, %s mode): not replacing it without --force",
				a.Interface, x.ProgId, attachedMode(x.AttachMode))
		}
		restore, err = removeForeign(nl, x)
		if err != nil {
			return err
		}
		defer func() {
			if err != nil {
				restore()
			}
		}()
	}
	l, err := maps.Load(maps.Options{MaxSources: cfg.MaxSources, MaxOtherSources: cfg.MaxOtherSources,
		MaxLogs: maps.LogsFor(cfg.Policy.Image, cfg.MaxSources), MaxBans: cfg.MaxBans, Clock: cfg.Clock})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	// The policy is in the maps, and the reflection guard's recorder on
	// the egress, before the first packet meets the program.
	if err = l.Apply(cfg.Policy.Image); err != nil {
		return err
	}
	if cfg.Policy.Image.Conversations.Reflection.On {
		if err = syncEgress(a.Ifindex, l, true); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				_ = removeEgress(a.Ifindex)
			}
		}()
	}
	lk, mode, nativeErr, err := attachXDP(l.Program(), a.Ifindex, cfg.Mode)
	if err != nil {
		return fmt.Errorf("attaching to %s: %w", a.Interface, err)
	}
	defer func() {
		if err != nil {
			lk.Close() // unpinned: closing detaches
		}
	}()
	a.link, a.Limiter, a.Mode, a.NativeErr = lk, l, mode, nativeErr
	if err = a.recordMeta(cfg, true); err != nil {
		return err
	}
	return a.pin()
}

func (a *Attachment) recordMeta(cfg Config, fresh bool) error {
	m, err := a.Limiter.Meta()
	if err != nil {
		return err
	}
	if fresh {
		m.AttachMode = maps.AttachMode(a.Mode)
		m.Attached = time.Now()
	}
	m.Ifindex = a.Ifindex
	m.NetnsIno, _ = NetnsInode()
	m.Pid = uint32(os.Getpid())
	m.Clock = a.Limiter.Clock()
	if err := a.Limiter.SetMeta(m); err != nil {
		return err
	}
	return a.Limiter.SetPolicyInfo(cfg.Policy.Path, cfg.Policy.SHA256)
}

// Reload applies a new policy as one atomic switch; on error the old one
// stays in force.
//
// The host's settings a policy depends on (what a syncookie rule's SYN-ACK
// offers) are read again, in the calling thread's network namespace: call
// it from the interface's.
func (a *Attachment) Reload(p Policy) error {
	nl, err := netlink.LinkByIndex(a.Ifindex)
	if err != nil {
		return fmt.Errorf("interface %s: %w", a.Interface, err)
	}
	img, err := withHost(p.Image, a.Interface, nl.Attrs().MTU)
	if err != nil {
		return err
	}
	// The recorder goes on before a policy with the reflection guard is
	// applied, and off after one without it is.
	refl := img.Conversations.Reflection.On
	if refl {
		if err := syncEgress(a.Ifindex, a.Limiter, true); err != nil {
			return err
		}
	}
	if err := a.Limiter.Apply(img); err != nil {
		return err
	}
	if !refl {
		if err := removeEgress(a.Ifindex); err != nil {
			return err
		}
	}
	return a.Limiter.SetPolicyInfo(p.Path, p.SHA256)
}

// Close releases this process's hold; the pinned link keeps the program
// attached and enforcing.
func (a *Attachment) Close() error {
	a.link.Close()
	a.Limiter.Close()
	return unlockInterface(a.lock)
}

// Detach removes the program from the interface and every pin. The link is
// detached explicitly: closing it only drops a reference, and the program
// would leave the interface an RCU grace period later, after we returned
// (an immediate re-attach would find it still there).
func (a *Attachment) Detach() error {
	defer unlockInterface(a.lock)
	err := errors.Join(detachLink(a.link), removeEgress(a.Ifindex))
	a.link.Close()
	a.Limiter.Close()
	return errors.Join(err, removePins(a.dir))
}
