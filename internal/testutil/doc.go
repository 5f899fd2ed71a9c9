// Package testutil holds the helpers every xdplimit test package shares:
// feature gates that cannot hide a test forever in CI, named network
// namespaces with guaranteed cleanup, veth pairs across two namespaces, an
// independent receive counter read from the kernel's SNMP tables, and a
// bounded runner for external commands.
//
// Everything here uses netlink and raw syscalls, never the ip or nft
// binaries, so the same tests run on the host and inside a busybox VM.
package testutil
