#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs make targets one after another, as `make test` does, and prints how
# long each took, as it ends and again together at the end (also when one
# fails: the stages before it and the one that failed are listed). Stops at
# the first stage that fails, with its exit status.
#
# A stage "a+b" runs the targets a and b at once: a's output comes live, b's
# is kept in a file and printed whole once b ends (two live streams would
# interleave line by line). The stage ends when both have; it fails when
# either does. Each part's own time is listed under the stage's.
set -uo pipefail
MAKE=${MAKE:-make}
names=() secs=()
summary() {
	echo "==== make test: stage times ===="
	local total=0
	for i in "${!names[@]}"; do
		printf '==== %-22s %6ds\n' "${names[$i]}" "${secs[$i]}"
		# A part of a parallel stage is listed, not added to the total.
		[[ ${names[$i]} == "  "* ]] || total=$((total + secs[i]))
	done
	printf '==== %-22s %6ds (%dm%02ds)\n' total "$total" $((total / 60)) $((total % 60))
}

# parallel runs the targets of one "a+b" stage and sets rc.
parallel() {
	local first=$1
	shift
	local tmp pids=() logs=() starts=() parts=("$first" "$@")
	tmp=$(mktemp -d)
	trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
	for t in "$@"; do
		logs+=("$tmp/$t.log") starts+=("$(date +%s)")
		# Its end time kept beside its log: it may end before the first.
		{
			$MAKE --no-print-directory "$t" >"$tmp/$t.log" 2>&1
			r=$?
			date +%s >"$tmp/$t.end"
			exit "$r"
		} &
		pids+=($!)
	done
	local s0 r0
	s0=$(date +%s)
	$MAKE --no-print-directory "$first"
	r0=$?
	local partsecs=($(($(date +%s) - s0))) partrc=("$r0")
	echo "==== $first took ${partsecs[0]}s; waiting for: $*"
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}"
		partrc+=($?)
		partsecs+=($(($(cat "${logs[$i]%.log}.end" 2>/dev/null || date +%s) - starts[i])))
		echo "==== output of ${parts[$((i + 1))]} ===="
		cat "${logs[$i]}"
	done
	pids=()
	rm -rf "$tmp"
	trap - EXIT
	rc=0
	for i in "${!parts[@]}"; do
		names+=("  ${parts[$i]}") secs+=("${partsecs[$i]}")
		[ "${partrc[$i]}" -eq 0 ] || rc=${partrc[$i]}
	done
}

for target in "$@"; do
	start=$(date +%s)
	if [[ $target == *+* ]]; then
		IFS=+ read -ra parts <<<"$target"
		n=${#names[@]}
		parallel "${parts[@]}"
		# The stage's own line goes before its parts'.
		names=("${names[@]:0:n}" "$target" "${names[@]:n}")
		secs=("${secs[@]:0:n}" $(($(date +%s) - start)) "${secs[@]:n}")
		took=${secs[n]}
	else
		$MAKE --no-print-directory "$target"
		rc=$?
		took=$(($(date +%s) - start))
		names+=("$target") secs+=("$took")
	fi
	echo "==== stage $target took ${took}s"
	if [ "$rc" -ne 0 ]; then
		summary
		echo "==== stage $target FAILED (exit $rc)"
		exit "$rc"
	fi
done
summary
