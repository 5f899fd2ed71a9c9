#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when a tracked file outside gen/ is an ELF binary: build outputs
# (`go build ./test/vm/qemu` leaves ./qemu behind) must never be committed.
# gen/ holds the BPF objects bpf2go builds, which are committed on purpose.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r -d '' f; do
	case "$f" in gen/*) continue ;; esac
	[ -f "$f" ] || continue
	if [ "$(head -c4 -- "$f" | od -An -tx1 | tr -d ' \n')" = "7f454c46" ]; then
		echo "tracked binary: $f (remove it and ignore the build output)" >&2
		bad=1
	fi
done < <(git ls-files -z)
exit "$bad"
