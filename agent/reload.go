// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/xdplimit/xdplimit/loader"
)

// Reload reads and compiles the policy file again and applies it as one
// atomic switch, then brings the fleet sync, the drop log and the CrowdSec
// bouncer in line with it. It returns why the policy was refused, and then
// the previous policy stays in force; the result is also logged, with
// trigger as its cause, and counted in xdplimit_policy_reloads_total.
// Reloads are serialised; after Run has stopped the agent, Reload returns
// ErrStopped.
func (a *Agent) Reload(trigger string) error {
	_, err := a.reload(trigger)
	return err
}

// reload is Reload, returning the policy's warnings too.
func (a *Agent) reload(trigger string) (warnings []string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return nil, ErrStopped
	}
	if !a.attached {
		return nil, errNotAttached
	}
	var w bytes.Buffer
	var p loader.Policy
	pp, err := loadPolicy(a.path, io.MultiWriter(a.warnings, &w))
	if err == nil {
		p, err = a.compileMerged(pp)
	}
	for line := range strings.Lines(w.String()) {
		warnings = append(warnings, strings.TrimPrefix(strings.TrimSuffix(line, "\n"), "warning: "))
	}
	if err == nil {
		// The host's settings the policy depends on are the interface's
		// namespace's (loader.Attachment.Reload).
		err = a.inNetns(func() error { return a.att.Reload(p) })
	}
	a.exp.ReloadResult(a.att.Interface, err)
	if err != nil {
		a.log.Error("reload failed; the previous policy stays in force", "policy", a.path, "trigger", trigger, "err", err)
		return warnings, err
	}
	a.log.Info("reloaded", "policy", a.path, "trigger", trigger)
	a.autopilot.enforced(time.Now())
	// The datapath enforces the new policy: what runs beside it follows,
	// and what cannot start is logged, as at Start.
	if err := a.fleet.apply(p.Fleet); err != nil {
		a.log.Error("fleet sync not started; fleet levels enforce locally", "err", err)
	}
	if err := a.dropLog.apply(p.Log); err != nil {
		a.log.Error("drop log not started", "err", err)
	}
	if err := a.crowdsec.apply(p.CrowdSec); err != nil {
		a.log.Error("crowdsec bouncer not changed", "err", err)
	}
	a.conv.apply(p.Conversations)
	a.parsed = pp
	a.autopilot.apply(p.Autopilot)
	return warnings, nil
}

var errNotAttached = errors.New("the attach process has not attached yet (waiting for the interface?)")
