#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Keeps what ships apart from what tests. Test kits live in internal/testkit
# and are the only non-test code that may import package testing; test/
# holds end-to-end suites. Everything else, and every binary users run
# (cmd/xdplimit; bench, which `make bench` runs), must link neither, and the
# xdplimit binary does not link the benchmark harnesses (internal/harness).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
mod=$($GO list -m)
bad=0

# Non-test imports of every package (.Imports leaves _test.go files out).
while read -r pkg imports; do
	case "$pkg" in "$mod"/internal/testkit/* | "$mod"/test/*) continue ;; esac
	for imp in $imports; do
		case "$imp" in
		testing | "$mod"/internal/testkit/* | "$mod"/test/*)
			echo "check-test-imports: $pkg imports $imp outside its tests (test kits live in internal/testkit)" >&2
			bad=1
			;;
		esac
	done
done < <($GO list -f '{{.ImportPath}} {{join .Imports " "}}' ./...)

# What each binary links, all the way down (a third-party module that
# imported testing would show here).
check_deps() {
	local bin=$1 deny=$2
	local hits
	hits=$($GO list -deps "$bin" | grep -E "$deny" || true)
	if [ -n "$hits" ]; then
		echo "check-test-imports: $bin links $(echo $hits)" >&2
		bad=1
	fi
}
check_deps ./cmd/xdplimit "^(testing|$mod/internal/(testkit|harness)/.*|$mod/test/.*)\$"
check_deps ./bench "^(testing|$mod/internal/testkit/.*|$mod/test/.*)\$"
exit "$bad"
