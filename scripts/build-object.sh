#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the production XDP program of commit REV into OUT, as that
# commit's gen/doc.go has bpf2go build it (its own flags, read from its
# go:generate line), for `make bench-against`: the bench then measures this
# tree's program beside it. Usage: build-object.sh REV OUT
set -euo pipefail
rev=${1:?usage: build-object.sh REV OUT}
out=${2:?usage: build-object.sh REV OUT}
CLANG=${CLANG:-clang-19}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$rev" bpf gen/doc.go | tar -x -C "$tmp"
flags=$(sed -n 's/^\/\/go:generate .* -output-stem xdplimit .* -- \(.*\)$/\1/p' "$tmp/gen/doc.go")
[ -n "$flags" ] || { echo "build-object.sh: no bpf2go line for xdplimit in $rev's gen/doc.go" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086 # the flags are words
(cd "$tmp/gen" && "$CLANG" -target bpfel $flags -c ../bpf/xdplimit.bpf.c -o "$tmp/xdplimit.o")
cp "$tmp/xdplimit.o" "$out"
echo "$rev's program: $out"
