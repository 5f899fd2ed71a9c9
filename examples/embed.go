// SPDX-License-Identifier: Apache-2.0

// Package examples embeds the example policies, so that `xdplimit demo`
// ships its policy inside the binary and tests load every example.
package examples

import "embed"

// FS holds every *.yaml file of this directory.
//
//go:embed *.yaml
var FS embed.FS

// Demo is the policy `xdplimit demo` enforces.
const Demo = "demo.yaml"
