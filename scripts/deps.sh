#!/usr/bin/env bash
# Installs everything the build, the tests and the benchmarks need, from Debian's packages.
# Idempotent: `apt-get update` runs once per machine (a stamp file records it), then one
# `apt-get install` that is a no-op when all packages are present.
set -euo pipefail

PKGS=(
  clang-19 llvm-19 clang-format-19
  libbpf-dev linux-libc-dev
  bpftool
  iproute2 ethtool
  nftables iptables
  tcpdump
  qemu-system-x86 busybox-static cpio kmod
  prometheus
  gnuplot-nox
  redis-server redis-tools
)

if [ "$(id -u)" -ne 0 ]; then
  echo "deps: must run as root (apt-get install)" >&2
  exit 1
fi

stamp=/var/lib/apt/.xdplimit-updated
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
  exit 0
fi
if [ ! -e "$stamp" ]; then
  apt-get update
  touch "$stamp"
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
