// SPDX-License-Identifier: Apache-2.0

// Package xdpltest is the project-aware test kit: the one place tests get a
// compiled policy, a loaded program or a native attach on a veth of their
// own, the way cilium/ebpf's internal/testutils is the one place its tests
// get a loaded program. It builds on internal/testkit/testutil, the plain kit, for
// capabilities, namespaces and veth pairs. Tests only use it.
//
// It imports compiler, loader, maps and policy (and what they import), so
// their own in-package tests (package maps, not maps_test) cannot use it:
// those keep a tiny local helper, or move to the external test package. Any
// other test may import it. Helpers one package alone needs stay in that
// package's helpers_test.go.
package xdpltest
