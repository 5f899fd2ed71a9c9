// SPDX-License-Identifier: Apache-2.0

// Package gen holds the Go bindings bpf2go generates from the C programs in
// bpf/. The .go and .o files here are committed: they are built with a pinned
// clang (clang-19) by `make generate`, and CI fails when they are stale.
// -nostdinc: the system headers come from bpf/include, copies refreshed by
// scripts/vendor-bpf-headers.sh, so the output does not depend on the
// versions of the machine's libbpf-dev and linux-libc-dev.
//
// The fleet apply program is an object of its own (FleetApply: one source
// file per bpf2go run) that declares the same maps; maps.Load loads it onto
// the limiter's maps. Its types are the limiter's (-no-global-types). So is
// the wipe program (Wipe), which maps.Limiter.Reset runs to zero the large
// arrays, and the egress program (Egress), the reflection guard's request
// recorder, which the loader puts on the interface's egress.
//
// XdplimitStages is the limiter built for the stage benchmark
// (-DXDPL_BENCH_STAGES: it can end a packet after any stage, bpf/bench.h);
// maps.Load loads it only for Options.BenchStop, so that production's build
// carries no test between its stages.
package gen

//go:generate go tool bpf2go -cc clang-19 -target bpfel -go-package gen -output-stem xdplimit -type xdpl_const -type xdpl_key -type xdpl_set4 -type xdpl_rule -type xdpl_level -type xdpl_gen_cfg -type xdpl_synack_cfg -type xdpl_bitmap -type xdpl_lpm4 -type xdpl_lpm6 -type xdpl_rule_stats -type xdpl_control -type xdpl_state -type xdpl_counter -type xdpl_name -type xdpl_metadata -type xdpl_drop_sample -type xdpl_drop_ring -type xdpl_decision -type xdpl_fleet_sync -type xdpl_fleet_op -type xdpl_pkt -type xdpl_unparsed_stats -type xdpl_unparsed_cfg -type xdpl_ban -type xdpl_ban_key4 -type xdpl_ban_key6 -type xdpl_log -type xdpl_host4 -type xdpl_host6 Xdplimit ../bpf/xdplimit.bpf.c -- -nostdinc -I../bpf -I../bpf/include -O2 -g -Wall -Werror -mcpu=v3
//go:generate go tool bpf2go -cc clang-19 -target bpfel -go-package gen -output-stem xdplimit_stages -no-global-types XdplimitStages ../bpf/xdplimit.bpf.c -- -nostdinc -I../bpf -I../bpf/include -O2 -g -Wall -Werror -mcpu=v3 -DXDPL_BENCH_STAGES
//go:generate go tool bpf2go -cc clang-19 -target bpfel -go-package gen -output-stem fleet_apply -no-global-types FleetApply ../bpf/fleet_apply.bpf.c -- -nostdinc -I../bpf -I../bpf/include -O2 -g -Wall -Werror -mcpu=v3
//go:generate go tool bpf2go -cc clang-19 -target bpfel -go-package gen -output-stem wipe -no-global-types Wipe ../bpf/wipe.bpf.c -- -nostdinc -I../bpf -I../bpf/include -O2 -g -Wall -Werror -mcpu=v3
//go:generate go tool bpf2go -cc clang-19 -target bpfel -go-package gen -output-stem egress -no-global-types Egress ../bpf/egress.bpf.c -- -nostdinc -I../bpf -I../bpf/include -O2 -g -Wall -Werror -mcpu=v3
//go:generate go tool bpf2go -cc clang-19 -target bpfel -go-package gen -output-stem pktgen -type pktgen_mode -type pktgen_flags -type pktgen_stat -type pktgen_limits Pktgen ../bpf/pktgen.bpf.c -- -nostdinc -I../bpf -I../bpf/include -O2 -g -Wall -Werror -mcpu=v3
