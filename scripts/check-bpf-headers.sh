#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when a header in bpf/ does not compile on its own: each one must
# include what it uses, so that any .bpf.c can include any of them in any
# order. The flags are gen/doc.go's (bpf2go's) for the BPF target.
# __always_inline is poisoned: a header that defines a function before it
# includes <bpf/bpf_helpers.h> would otherwise get linux/stddef.h's plain
# inline in a program that happens to include it first. The vendored
# headers in bpf/include/ are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG=${CLANG:-clang-19}
bad=0
for h in bpf/*.h; do
	if ! out=$("$CLANG" -target bpfel -fsyntax-only -nostdinc -Ibpf -Ibpf/include -O2 -g -Wall -Werror -mcpu=v3 \
		-D__always_inline=include_bpf_helpers_h_before_defining_functions \
		-include "$h" -x c /dev/null 2>&1); then
		echo "$h does not compile on its own:" >&2
		echo "$out" >&2
		bad=1
	fi
done
exit "$bad"
