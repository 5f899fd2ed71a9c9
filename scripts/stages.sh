#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs make targets one after another, as `make test` does, and prints how
# long each took, as it ends and again together at the end (also when one
# fails: the stages before it and the one that failed are listed). Stops at
# the first that fails, with its exit status.
set -uo pipefail
MAKE=${MAKE:-make}
names=() secs=()
summary() {
	echo "==== make test: stage times ===="
	local total=0
	for i in "${!names[@]}"; do
		printf '==== %-16s %6ds\n' "${names[$i]}" "${secs[$i]}"
		total=$((total + secs[i]))
	done
	printf '==== %-16s %6ds (%dm%02ds)\n' total "$total" $((total / 60)) $((total % 60))
}
for target in "$@"; do
	start=$(date +%s)
	$MAKE --no-print-directory "$target"
	rc=$?
	names+=("$target") secs+=($(($(date +%s) - start)))
	echo "==== stage $target took ${secs[-1]}s"
	if [ "$rc" -ne 0 ]; then
		summary
		echo "==== stage $target FAILED (exit $rc)"
		exit "$rc"
	fi
done
summary
