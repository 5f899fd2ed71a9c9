// SPDX-License-Identifier: Apache-2.0

// Package testutil is the plain test kit: feature gates that cannot hide a
// test forever in CI, and testing.TB wrappers around the leaf internals
// (named network namespaces and veth pairs deleted by the test's cleanup,
// SNMP counter snapshots, a thread pinned to a CPU until the test ends,
// redis-server children, a delaying TCP proxy).
// Tests only use it.
//
// It may import the standard library, third-party modules and the leaf
// internals (internal/netns, internal/cpupin, internal/command,
// internal/harness/redisproc), and no product package: maps, compiler, loader,
// policy, pktgen and the rest all test themselves with it, so an import of
// any of them here would be a cycle for that package's tests. What needs the
// product (a compiled policy, a loaded or attached program) is in
// internal/testkit/xdpltest, the project-aware kit built on this one.
package testutil
