#!/usr/bin/env bash
# Installs everything the build, the tests and the benchmarks need, from Debian's packages.
# Idempotent: `apt-get update` runs once per machine (a stamp file records it), then one
# `apt-get install` that is a no-op when all packages are present. Packages that must not be
# installed (see fetch_crowdsec) are unpacked into a cache directory instead.
set -euo pipefail

PKGS=(
  clang-19 llvm-19 clang-format-19
  libbpf-dev linux-libc-dev
  bpftool
  iproute2 ethtool
  nftables iptables
  tcpdump
  lintian systemd
  qemu-system-x86 busybox-static cpio kmod
  prometheus
  gnuplot-nox
  redis-server redis-tools
  libsqlite3-0
  # stress-ng: reproduces a loaded machine beside the timing tests (docs/fleet.md, test/vm).
  stress-ng
  # Real servers and clients for the conversation checks' end-to-end tests: a DNS
  # server and load generator, a TCP transfer.
  dnsmasq-base dnsperf bind9-dnsutils iperf3
)

if [ "$(id -u)" -ne 0 ]; then
  echo "deps: must run as root (apt-get install)" >&2
  exit 1
fi

stamp=/var/lib/apt/.xdplimit-updated
apt_update_once() {
  if [ ! -e "$stamp" ]; then
    apt-get update
    touch "$stamp"
  fi
}

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
else
  apt_update_once
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# crowdsec: the crowdsec package tests run a real Local API from Debian's binaries
# (internal/testkit/crowdsecproc). Installing the package is not an option: its postinst registers
# with the online API, fails offline and leaves dpkg half-configured, which breaks every later
# apt-get install. So it is downloaded and unpacked with dpkg-deb -x into a fixed directory;
# its binaries need only libc and libsqlite3 (in PKGS). The stamp holds the unpacked version:
# a later run with the stamp and both binaries present does nothing.
CROWDSEC_DIR=${XDPLIMIT_CROWDSEC_DIR:-/var/cache/xdplimit-deps/crowdsec}
fetch_crowdsec() {
  local cs_stamp=$CROWDSEC_DIR/.xdplimit-stamp
  if [ -s "$cs_stamp" ] && [ -x "$CROWDSEC_DIR/usr/bin/crowdsec" ] && [ -x "$CROWDSEC_DIR/usr/bin/cscli" ]; then
    echo "deps: crowdsec $(cat "$cs_stamp") unpacked in $CROWDSEC_DIR"
    return
  fi
  apt_update_once
  tmp=$(mktemp -d "$(dirname "$CROWDSEC_DIR")/.crowdsec.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # Downloading as root into a directory _apt cannot write makes apt warn; it is harmless,
  # and running the download as root avoids it.
  (cd "$tmp" && apt-get -q -o APT::Sandbox::User=root download crowdsec)
  local deb
  deb=$(ls "$tmp"/crowdsec_*.deb)
  mkdir "$tmp/root"
  dpkg-deb -x "$deb" "$tmp/root"
  dpkg-deb -f "$deb" Version >"$tmp/root/.xdplimit-stamp"
  # Replace the directory whole (rename), so an interrupted run never leaves a half-unpacked
  # tree behind a stamp.
  rm -rf "$CROWDSEC_DIR"
  mv "$tmp/root" "$CROWDSEC_DIR"
  rm -rf "$tmp"
  echo "deps: crowdsec $(cat "$cs_stamp") unpacked in $CROWDSEC_DIR"
}
mkdir -p "$(dirname "$CROWDSEC_DIR")"
fetch_crowdsec
