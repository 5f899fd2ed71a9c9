// Package fleetlab puts a fleet of xdplimit hosts on one machine, for the
// fleet tests and the benchmark program. It comes two ways, for two kinds
// of question:
//
//   - Sim (sim.go) simulates the hosts: each is the real XDP program, loaded
//     with an injected clock (maps.ClockMap) and run with BPF_PROG_TEST_RUN,
//     and its real sync engine talking to a real Redis. One clock drives
//     them all, so a simulated 10 s flood is deterministic and takes far
//     less than 10 s, whatever else the machine runs. The fleet package's
//     tests and `make bench` use it; it needs no testing.TB.
//   - Lab (lab.go, flood.go) builds them for real: network namespaces, veth
//     links, a Redis namespace behind a bridge, floods from the live-frames
//     generator, faults (partitions, a slow link), for test/fleet's
//     end-to-end tests of real attach processes. It works on testing.TB,
//     through internal/testutil.
//
// It imports compiler, fleet, maps, pktgen and policy, so neither it nor
// the Lab can live in internal/testutil, which their own tests import; the
// benchmark program links package testing through the Lab half, unused.
package fleetlab
