// SPDX-License-Identifier: Apache-2.0

package compiler

import (
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// CompileYAML parses, validates and compiles a policy given as YAML text;
// name is what its errors and the image's provenance call the file (list
// files it names are read relative to it). It returns the parsed policy too:
// callers need its fleet:, log: and warnings beside the image.
func CompileYAML(name string, src []byte) (*maps.Image, *policy.Policy, error) {
	p, err := policy.Parse(name, src)
	if err != nil {
		return nil, nil, err
	}
	img, err := Compile(p)
	if err != nil {
		return nil, nil, err
	}
	return img, p, nil
}
