// Package gen holds the Go bindings bpf2go generates from the C programs in
// bpf/. The .go and .o files here are committed: they are built with a pinned
// clang (clang-19) by `make generate`, and CI fails when they are stale.
package gen

//go:generate go tool bpf2go -cc clang-19 -target bpfel -go-package gen -output-stem xdplimit -type xdpl_const -type xdpl_key -type xdpl_key4 -type xdpl_rule -type xdpl_level -type xdpl_gen_cfg -type xdpl_bitmap -type xdpl_lpm4 -type xdpl_lpm6 -type xdpl_rule_stats -type xdpl_control -type xdpl_state -type xdpl_counter -type xdpl_name -type xdpl_metadata -type xdpl_drop_sample -type xdpl_drop_ring -type xdpl_decision -type xdpl_pkt -type xdpl_unparsed_stats -type xdpl_unparsed_cfg Xdplimit ../bpf/xdplimit.bpf.c -- -I../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3
//go:generate go tool bpf2go -cc clang-19 -target bpfel -go-package gen -output-stem pktgen -type pktgen_mode -type pktgen_flags -type pktgen_stat -type pktgen_limits Pktgen ../bpf/pktgen.bpf.c -- -I../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3
