#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Keeps each file and function small enough to read whole: a hand-written
# .go, .c or .h file over MAX_FILE_LINES lines, or a Go function over
# MAX_FUNC_LINES lines (a test's table of cases left out of its count,
# scripts/funclen), fails. Generated code (gen/, a "Code generated ... DO NOT
# EDIT" header), vendored headers (bpf/include/) and testdata/ are not
# written by hand and are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
MAX_FILE_LINES=${MAX_FILE_LINES:-420}
MAX_FUNC_LINES=${MAX_FUNC_LINES:-80}
bad=0

files=()
while IFS= read -r -d '' f; do
	case "$f" in gen/* | bpf/include/* | testdata/* | */testdata/*) continue ;; esac
	[ -f "$f" ] || continue
	if head -n 20 -- "$f" | grep -qE 'Code generated .* DO NOT EDIT'; then
		continue
	fi
	files+=("$f")
done < <(git ls-files -z -- '*.go' '*.c' '*.h')

for f in "${files[@]}"; do
	n=$(wc -l <"$f")
	if [ "$n" -gt "$MAX_FILE_LINES" ]; then
		echo "$f:1: file is $n lines (limit $MAX_FILE_LINES)"
		bad=1
	fi
done

gofiles=()
for f in "${files[@]}"; do
	case "$f" in *.go) gofiles+=("$f") ;; esac
done
# Built rather than run with `go run`, which adds its own "exit status 1".
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$GO build -o "$tmp/funclen" ./scripts/funclen
if ! "$tmp/funclen" -max "$MAX_FUNC_LINES" "${gofiles[@]}"; then
	bad=1
fi

if [ "$bad" -ne 0 ]; then
	echo "check-sizes: split the files and functions above along their seams" >&2
fi
exit "$bad"
