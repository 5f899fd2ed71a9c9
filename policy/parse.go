// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"crypto/sha256"
	"path/filepath"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/xdplimit/xdplimit/internal/fileutil"
)

// maxPolicySize bounds the policy file itself; long address lists belong in
// list files, which have their own, larger bound.
const maxPolicySize = 1 << 20

// Load reads and parses the policy file at path. It returns an ErrorList for
// problems in the policy or the list files it names, or the error from
// reading path itself. It never returns a partial Policy.
func Load(path string) (*Policy, error) {
	data, err := fileutil.ReadRegular(path, maxPolicySize)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses and validates a policy given as bytes. path names the file in
// messages, and list files resolve against its directory. Problems are
// returned as an ErrorList, sorted by position; warnings are in the Policy.
func Parse(path string, data []byte) (*Policy, error) {
	d := &decoder{file: path, dir: filepath.Dir(path)}
	p := d.policy(data)
	if len(d.errs) > 0 {
		return nil, sortErrors(path, d.errs)
	}
	p.Path = path
	p.SHA256 = sha256.Sum256(data)
	p.ListFiles = d.listFiles
	p.Warnings = sortWarnings(path, d.warns)
	return p, nil
}

// NamedListFiles returns the list files a policy names (resolved as Load
// resolves them), without reading them and as far as the policy can be
// decoded: an invalid policy still names the files its valid parts name. A
// file watcher uses it to know which list files to watch before the policy
// loads, for example while it waits for a list file the policy newly names.
func NamedListFiles(path string, data []byte) []string {
	d := &decoder{file: path, dir: filepath.Dir(path), namesOnly: true}
	d.policy(data)
	return d.listFiles
}

// policy decodes the whole policy: its one document, then each section.
func (d *decoder) policy(data []byte) *Policy {
	body := d.document(data)
	if body == nil {
		return nil
	}
	top := d.mappingExt(body, "", isExtension, "version", "mode", "defaults", "rules", "allow", "deny", "unparsed", "fleet", "log", "bans", "crowdsec", "geoip", "reject", "conversations", "capture", "autopilot")
	if top == nil {
		return nil
	}
	p := &Policy{}
	if f, ok := top["version"]; ok {
		if s, ok := d.scalar(f.value, "version", "1"); ok && s != "1" {
			d.errorf(f.value, "version", "unsupported version %q; this xdplimit reads version 1", s)
		}
	}
	if f, ok := top["mode"]; ok {
		if v, ok := d.enum(f.value, "mode", "mode", modeNames); ok {
			p.Mode = Mode(v)
		}
	}
	if f, ok := top["geoip"]; ok {
		d.geoipSection(f)
	}
	defs := d.defaults(top["defaults"])
	p.Rules = d.rules(top["rules"], defs, p.Mode)
	allow := d.addrList(top["allow"], "allow")
	deny := d.addrList(top["deny"], "deny")
	if len(d.errs) == 0 {
		// Reading databases for a policy refused anyway would only
		// slow its errors down.
		d.resolveGeo(p, &allow, &deny)
	}
	p.Allow, p.Deny = d.checkOverlap(allow, deny)
	p.Unparsed = d.unparsed(top["unparsed"])
	if f, ok := top["fleet"]; ok {
		p.Fleet = d.fleet(f)
	}
	if f, ok := top["log"]; ok {
		p.Log = d.log(f)
	}
	if f, ok := top["capture"]; ok {
		p.Capture = d.capture(f)
	}
	if f, ok := top["autopilot"]; ok {
		p.Autopilot = d.autopilot(f)
	}
	p.Bans = DefaultBanLimits()
	if f, ok := top["bans"]; ok {
		p.Bans = d.banLimits(f)
	}
	if f, ok := top["crowdsec"]; ok {
		p.CrowdSec = d.crowdsec(f)
	}
	p.Reject = DefaultReject()
	if f, ok := top["reject"]; ok {
		p.Reject = d.reject(f)
		d.checkReject(p, f)
	}
	p.Conversations = DefaultConversations()
	if f, ok := top["conversations"]; ok {
		p.Conversations = d.conversations(f)
	}
	d.checkFleet(p)
	return p
}

// isExtension lets top-level keys starting with x- hold anything, typically
// anchors shared by rules, as in Compose files.
func isExtension(key string) bool { return strings.HasPrefix(key, "x-") }

// enum decodes one of names and returns its index, which is the value of
// the Go constant of that name.
func (d *decoder) enum(n ast.Node, path, what string, names []string) (int, bool) {
	choices := orList(names)
	s, ok := d.scalar(n, path, choices)
	if !ok {
		return 0, false
	}
	for i, name := range names {
		if s == name {
			return i, true
		}
	}
	d.errorf(n, path, "unknown %s %q; use %s", what, s, choices)
	return 0, false
}

// orList writes names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func (d *decoder) action(n ast.Node, path string) Action {
	v, _ := d.enum(n, path, "action", actionNames)
	return Action(v)
}
