// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/xdplimit/xdplimit/autopilot"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/policy"
)

// compileMerged compiles p with the autopilot's rules ahead of its own:
// the first matching rule wins, so a generated rule judges its attack's
// packets before any rule of the policy does (the allow list still comes
// first). A generated rule that cannot be put in force (the policy now has
// a rule of its name, or the policy's payload windows leave no room for
// it) is dropped and logged; the policy's own errors are returned as they
// would be without the autopilot.
func (a *Agent) compileMerged(p *policy.Policy) (loader.Policy, error) {
	gen := a.autopilot.generated(p.Autopilot)
	if len(gen) == 0 {
		return compilePolicy(p)
	}
	var rules []policy.Rule
	var bad []string
	for _, g := range gen {
		// The mode of the policy being compiled, which a reload may
		// have just changed.
		g := *g
		g.Shadow = p.Autopilot.Mode == policy.AutopilotShadow
		r, err := generatedRule(p, &g)
		if err != nil {
			a.log.Warn("autopilot: rule dropped", "rule", g.Name, "why", err.Error())
			bad = append(bad, g.Name)
			continue
		}
		rules = append(rules, r)
	}
	q := *p
	q.Rules = slices.Concat(rules, p.Rules)
	lp, err := compilePolicy(&q)
	if err != nil {
		if _, own := compilePolicy(p); own != nil {
			return loader.Policy{}, own
		}
		// One of the generated rules: keep those that compile, in order.
		var ok []policy.Rule
		for _, r := range rules {
			q.Rules = slices.Concat(ok, []policy.Rule{r}, p.Rules)
			if _, err := compilePolicy(&q); err != nil {
				a.log.Warn("autopilot: rule dropped", "rule", r.Name, "why", err.Error())
				bad = append(bad, r.Name)
				continue
			}
			ok = append(ok, r)
		}
		q.Rules = slices.Concat(ok, p.Rules)
		if lp, err = compilePolicy(&q); err != nil {
			return loader.Policy{}, err
		}
	}
	if len(bad) > 0 {
		a.autopilot.drop(bad)
	}
	return lp, nil
}

// generatedRule parses g's rule as the policy language reads it, so that
// a generated rule passes every check an operator's does.
func generatedRule(p *policy.Policy, g *autopilot.Generated) (policy.Rule, error) {
	if slices.ContainsFunc(p.Rules, func(r policy.Rule) bool { return r.Name == g.Name }) {
		return policy.Rule{}, fmt.Errorf("the policy has a rule named %s, which replaces it", g.Name)
	}
	gp, err := policy.Parse(p.Path+" (autopilot rule "+g.Name+")", []byte("rules:\n"+g.YAML()))
	if err != nil {
		return policy.Rule{}, err
	}
	return gp.Rules[0], nil
}

// applyGenerated puts the autopilot's rules in force with the policy last
// loaded: the file is not read again, so an edit in progress does not
// hold back the autopilot, nor does the autopilot apply a half-made edit.
func (a *Agent) applyGenerated(trigger string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return ErrStopped
	}
	if !a.attached || a.parsed == nil {
		return errNotAttached
	}
	lp, err := a.compileMerged(a.parsed)
	if err == nil {
		err = a.inNetns(func() error { return a.att.Reload(lp) })
	}
	if err != nil {
		return err
	}
	a.autopilot.enforced(time.Now())
	a.log.Info("autopilot: rules in force", "trigger", trigger, "generated", len(a.autopilot.generated(a.parsed.Autopilot)),
		"rules", len(lp.Image.Rules))
	return nil
}
