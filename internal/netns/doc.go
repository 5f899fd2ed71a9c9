// Package netns creates, enters and deletes network namespaces, builds veth
// pairs between them, reads their SNMP counters, and runs code on a locked
// OS thread inside a namespace or pinned to a CPU. It is the one place
// xdplimit does this, for the tests (through internal/testutil, which adds
// testing.TB cleanup), the demo, the traffic generator and the benchmark
// program; it does not import package testing.
//
// Namespaces and CPU affinity belong to OS threads, not goroutines: every
// function here that changes either runs on a thread that is never handed
// back to the Go scheduler, so no other goroutine inherits the change.
//
// Everything here uses netlink and raw syscalls, never the ip binary, so it
// works on the host and inside a busybox VM alike.
package netns
