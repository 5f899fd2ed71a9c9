package main

import (
	"fmt"
	"io"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/fleet"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/policy"
)

// compilePolicy reads, validates and compiles a policy file; warnings go to w.
func compilePolicy(path string, w io.Writer) (loader.Policy, error) {
	p, err := policy.Load(path)
	if err != nil {
		return loader.Policy{}, err
	}
	for _, d := range p.Warnings {
		fmt.Fprintln(w, "warning:", d)
	}
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
	return loader.Policy{Image: img, Path: p.Path, SHA256: p.SHA256, Fleet: p.Fleet, Log: p.Log}, nil
}
