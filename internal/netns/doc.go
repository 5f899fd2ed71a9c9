// SPDX-License-Identifier: Apache-2.0

// Package netns creates, enters and deletes network namespaces, builds veth
// pairs between them and reads their SNMP counters. It is the one place
// xdplimit does this: production uses it (the demo's lab, the traffic
// generator's namespaces), and so do the benchmark program and the tests,
// through internal/testkit/testutil, which adds testing.TB cleanup. It imports no
// other xdplimit package but internal/cpupin, and not package testing.
//
// Namespaces belong to OS threads, not goroutines: every function here that
// enters one runs on a cpupin.Locked thread, which is never handed back to
// the Go scheduler, so no other goroutine inherits the namespace.
//
// Everything here uses netlink and raw syscalls, never the ip binary, so it
// works on the host and inside a busybox VM alike.
package netns
