// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"io"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/crowdsec"
	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/policy"
)

// CompilePolicy reads, validates and compiles a policy file (with its list
// files and GeoIP databases, its fleet password and CrowdSec key files)
// exactly as an agent does at start and at every reload, so that a command
// checking a policy ahead of time can refuse what an agent would refuse. Warnings go to
// warnings, one "warning: " line each, as soon as the file has parsed (also
// when compiling then fails). A policy with errors returns the
// policy.ErrorList of policy.Load unwrapped, each error with its file, line
// and column. The parsed policy is returned beside what the loader applies,
// as compiler.CompileYAML does, for callers that describe it.
func CompilePolicy(path string, warnings io.Writer) (loader.Policy, *policy.Policy, error) {
	p, err := loadPolicy(path, warnings)
	if err != nil {
		return loader.Policy{}, nil, err
	}
	lp, err := compilePolicy(p)
	return lp, p, err
}

// loadPolicy reads and validates the policy file, its warnings written as
// soon as it has parsed.
func loadPolicy(path string, warnings io.Writer) (*policy.Policy, error) {
	p, err := policy.Load(path)
	if err != nil {
		return nil, err
	}
	for _, d := range p.Warnings {
		fmt.Fprintln(warnings, "warning:", d)
	}
	return p, nil
}

// compilePolicy compiles a parsed policy and checks the files its fleet
// and CrowdSec sections name.
func compilePolicy(p *policy.Policy) (loader.Policy, error) {
	img, err := compiler.Compile(p)
	if err != nil {
		return loader.Policy{}, err
	}
	if p.Fleet != nil {
		// A password that cannot be read is a bad policy: refused before
		// anything changes, not found out at the first sync.
		if _, err := fleet.Password(p.Fleet); err != nil {
			return loader.Policy{}, err
		}
	}
	if p.CrowdSec != nil {
		// So is a bouncer key that cannot be read, or that others may.
		if _, err := crowdsec.ReadKeyFile(p.CrowdSec.APIKeyFile); err != nil {
			return loader.Policy{}, err
		}
	}
	return loader.Policy{Image: img, Path: p.Path, SHA256: p.SHA256, Fleet: p.Fleet, Log: p.Log, CrowdSec: p.CrowdSec,
		Conversations: p.Conversations, Autopilot: p.Autopilot}, nil
}
