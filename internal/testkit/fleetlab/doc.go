// SPDX-License-Identifier: Apache-2.0

// Package fleetlab builds a fleet of real xdplimit hosts on one machine, for
// test/fleet's end-to-end tests of real attach processes: network
// namespaces, veth links, a Redis namespace behind a bridge, floods from the
// live-frames generator, faults (partitions, a slow link). It works on
// testing.TB, through internal/testkit/testutil. Tests only use it.
//
// It imports compiler, fleet, maps, pktgen and policy, so it cannot live in
// internal/testkit/testutil, which their own tests import. The simulated
// fleet (the real program run with BPF_PROG_TEST_RUN on one injected clock),
// which the benchmark program uses too, is internal/harness/fleetsim.
package fleetlab
