#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# deb-version.sh DESCRIBE DATE: the Debian package version for a build whose
# `git describe --tags --always --dirty` is DESCRIBE, its commit dated DATE
# (YYYYMMDD). Tags are vMAJOR.MINOR.PATCH[-PRERELEASE].
#
#   v1.2.0                  1.2.0
#   v1.2.0-rc1              1.2.0~rc1                       (before 1.2.0)
#   v1.2.0-3-g0123abc       1.2.0+git20261126.3.0123abc     (after 1.2.0)
#   0123abc (no tag yet)    0.0.0~git20261126.0123abc       (before any release)
#   ...-dirty               the same, then ~dirty           (before the clean build)
#
# The package is native (no Debian revision): it is built from this
# repository, not from an upstream tarball. The date keeps snapshots in
# commit order, which the hash alone would not.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 DESCRIBE YYYYMMDD" >&2; exit 2; }
d=$1
date=$2
case $date in [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) ;; *) echo "$0: bad date '$date'" >&2; exit 2 ;; esac

dirty=
case $d in *-dirty) dirty='~dirty'; d=${d%-dirty} ;; esac

if printf '%s\n' "$d" | grep -Eq '^[0-9a-f]{7,40}$'; then
	echo "0.0.0~git$date.$d$dirty"
	exit 0
fi

# v1.2.0[-rc1][-N-gHASH]
after=
if printf '%s\n' "$d" | grep -Eq -- '-[0-9]+-g[0-9a-f]{7,40}$'; then
	hash=${d##*-g}
	d=${d%-g*}
	n=${d##*-}
	d=${d%-*}
	after="+git$date.$n.$hash"
fi
if ! printf '%s\n' "$d" | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$'; then
	echo "$0: tag '$d' is not vMAJOR.MINOR.PATCH[-PRERELEASE]" >&2
	exit 1
fi
d=${d#v}
case $d in *-*) d="${d%%-*}~${d#*-}" ;; esac
echo "$d$after$dirty"
