#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails naming each source file whose first line (the line after the
# shebang, for a script) is not its SPDX licence identifier. The BPF C (.c
# and .h: every C file here is a BPF program or its header) is under
# (GPL-2.0-only OR BSD-2-Clause), as its programs declare to the kernel
# ("Dual BSD/GPL"); everything else under Apache-2.0 (README, "Licence").
# Checked: Go, C, shell scripts (.sh, or any file with a shebang), the
# Makefile, and the configurations that take comments: packaging/nfpm.yaml,
# deploy/ (but its JSON) and bench/chart.gp. Markdown, JSON, the example
# policies and test data are not source files. What is not written here is
# skipped: generated Go ("// Code generated ... DO NOT EDIT.", bpf2go's
# gen/*_bpfel.go), the compiled objects, and the system headers vendored in
# bpf/include/, which keep their own licences.
set -euo pipefail
cd "$(dirname "$0")/.."
apache='SPDX-License-Identifier: Apache-2.0'
dual='SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)'
bad=0

# want FILE: the line FILE must start with, after its shebang if it has
# one (alternatives split by |); nothing when FILE is not a kind this check
# covers.
want() {
	case "$1" in
	bpf/include/* | testdata/* | */testdata/* | *.o | deploy/*.json) ;;
	*.c) echo "// $dual|/* $dual */" ;;
	*.h) echo "/* $dual */|// $dual" ;;
	*.go) echo "// $apache" ;;
	*.sh | Makefile | */Makefile | packaging/nfpm.yaml | deploy/* | *.gp) echo "# $apache" ;;
	*) [ "$2" = script ] && echo "# $apache" ;;
	esac
	return 0
}

while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	l1= l2=
	{ IFS= read -r l1 || true; IFS= read -r l2 || true; } <"$f"
	n=1 got=$l1 kind=
	case "$l1" in '#!'*) n=2 got=$l2 kind=script ;; esac
	w=$(want "$f" "$kind")
	[ -n "$w" ] || continue
	ok=
	IFS='|' read -ra alts <<<"$w"
	for a in "${alts[@]}"; do
		[ "$got" = "$a" ] && ok=1
	done
	[ -n "$ok" ] && continue
	case "$f" in *.go) grep -qE '^// Code generated .* DO NOT EDIT\.$' "$f" && continue ;; esac
	echo "$f:$n: want \"${alts[0]}\" as line $n, have \"$got\""
	bad=1
done < <(git ls-files -z)

if [ "$bad" -ne 0 ]; then
	echo "check-spdx: give each file above its licence's SPDX line (README, \"Licence\")" >&2
fi
exit "$bad"
