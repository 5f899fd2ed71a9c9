#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs everything the build, the tests and the benchmarks need, from Debian's packages.
# Idempotent: `apt-get update` runs once per machine (a stamp file records it), then one
# `apt-get install` that is a no-op when all packages are present. Packages that must not be
# installed (see unpack) are unpacked into a cache directory instead.
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
  # qemu-aarch64-static: the packaging tests run the arm64 release binary under user-mode
  # emulation.
  qemu-user-static
  # qemu-system-aarch64: make test-vm-arm64 boots Debian's arm64 cloud kernel under emulation.
  qemu-system-arm
  prometheus
  gnuplot-nox
  redis-server redis-tools
  libsqlite3-0
  # stress-ng: reproduces a loaded machine beside the timing tests (docs/fleet.md, test/vm).
  stress-ng
  # Real servers and clients for the conversation checks' end-to-end tests: a DNS
  # server and load generator, a TCP transfer.
  dnsmasq-base dnsperf bind9-dnsutils iperf3
  # memcached: real UDP answers for the reflection guard's memcached test. Its postinst
  # would start a server; install_pkgs keeps it from doing so (where systemd runs, its unit
  # is still enabled for the next boot, as redis-server's is).
  memcached
  # What chronyd and chronyc (unpacked below, not installed) link against.
  libcap2 libedit2 libgnutls30 libnettle8 libseccomp2
  # The container test runs the image `make image` builds, rootful, with storage in a temp
  # dir and the test's own network namespace (test/container): podman and runc, which, unlike
  # Debian 12's crun, runs containers on a host with hybrid cgroups (v1 controllers beside v2).
  # skopeo inspects the image archives (docs/kubernetes.md).
  podman runc skopeo
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

# install_pkgs installs packages without letting their maintainer scripts start a daemon
# (memcached's would; the tests start their own servers in their namespaces): invoke-rc.d and
# deb-systemd-invoke ask /usr/sbin/policy-rc.d, and its exit status 101 refuses every start.
# An existing policy-rc.d (a container image's) is left as it is; one added here is removed
# afterwards, also when the install fails.
install_pkgs() {
  local policy=/usr/sbin/policy-rc.d added=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# xdplimit scripts/deps.sh: no service starts while it installs.\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    added=1
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" || rc=$?
  if [ -n "$added" ]; then rm -f "$policy"; fi
  return $rc
}

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
else
  apt_update_once
  install_pkgs "${missing[@]}"
fi

# unpack PKG DIR BIN...: downloads Debian's PKG and unpacks it with dpkg-deb -x into DIR,
# without installing it (no maintainer script runs, dpkg does not know it). The stamp holds the
# unpacked version: a later run with the stamp and every BIN (paths inside DIR) present does
# nothing.
unpack() {
  local pkg=$1 dir=$2
  shift 2
  local pstamp=$dir/.xdplimit-stamp ok=1 b
  for b in "$@"; do [ -x "$dir/$b" ] || ok=; done
  if [ -s "$pstamp" ] && [ -n "$ok" ]; then
    echo "deps: $pkg $(cat "$pstamp") unpacked in $dir"
    return
  fi
  "${APT_UPDATE:-apt_update_once}"
  mkdir -p "$(dirname "$dir")"
  tmp=$(mktemp -d "$(dirname "$dir")/.$pkg.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # Downloading as root into a directory _apt cannot write makes apt warn; it is harmless,
  # and running the download as root avoids it.
  (cd "$tmp" && apt-get -q -o APT::Sandbox::User=root download "$pkg")
  local deb
  deb=$(ls "$tmp/${pkg}_"*.deb)
  mkdir "$tmp/root"
  dpkg-deb -x "$deb" "$tmp/root"
  dpkg-deb -f "$deb" Version >"$tmp/root/.xdplimit-stamp"
  # Replace the directory whole (rename), so an interrupted run never leaves a half-unpacked
  # tree behind a stamp.
  rm -rf "$dir"
  mv "$tmp/root" "$dir"
  rm -rf "$tmp"
  trap - EXIT
  echo "deps: $pkg $(cat "$pstamp") unpacked in $dir"
}

# crowdsec: the crowdsec package tests run a real Local API from Debian's binaries
# (internal/testkit/crowdsecproc). Installing the package is not an option: its postinst registers
# with the online API, fails offline and leaves dpkg half-configured, which breaks every later
# apt-get install. Its binaries need only libc and libsqlite3 (in PKGS).
unpack crowdsec "${XDPLIMIT_CROWDSEC_DIR:-/var/cache/xdplimit-deps/crowdsec}" usr/bin/crowdsec usr/bin/cscli

# chrony: the reflection guard's NTP test runs chronyd as a client and as a server in its
# namespaces, with -x (the system clock untouched). Installing the package is not an option
# either: it conflicts with systemd-timesyncd (apt would remove the host's time service), and
# its postinst starts a chronyd that sets the host's clock. Its libraries are in PKGS.
unpack chrony "${XDPLIMIT_CHRONY_DIR:-/var/cache/xdplimit-deps/chrony}" usr/sbin/chronyd usr/bin/chronyc

# arm64: make test-vm-arm64 boots Debian's arm64 cloud kernel with an arm64 busybox in its
# initramfs. The runner resolves and downloads the kernel with apt-cache and apt-get, as for
# amd64, but through a private apt state that knows only arm64 (APT_CONFIG=<dir>/apt.conf):
# the host's dpkg gets no foreign architecture, and its own package lists are untouched. The
# sources are the host's (/etc/apt). Its lists are fetched once (a stamp, as for the host).
ARM64_APT=${XDPLIMIT_ARM64_APT_DIR:-/var/cache/xdplimit-deps/apt-arm64}
mkdir -p "$ARM64_APT/state/lists/partial" "$ARM64_APT/cache/archives/partial"
touch "$ARM64_APT/status"
cat >"$ARM64_APT/apt.conf" <<CONF
// Written by xdplimit's scripts/deps.sh: apt for arm64 packages, without dpkg.
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
Dir::State "$ARM64_APT/state";
Dir::State::status "$ARM64_APT/status";
Dir::Cache "$ARM64_APT/cache";
CONF
arm64_update_once() {
  if [ ! -e "$ARM64_APT/.xdplimit-updated" ]; then
    APT_CONFIG="$ARM64_APT/apt.conf" apt-get -q update
    touch "$ARM64_APT/.xdplimit-updated"
  fi
}
arm64_update_once
APT_CONFIG="$ARM64_APT/apt.conf" APT_UPDATE=arm64_update_once \
  unpack busybox-static "${XDPLIMIT_ARM64_BUSYBOX_DIR:-/var/cache/xdplimit-deps/busybox-arm64}" bin/busybox

# unpack_closure DIR PKG...: downloads Debian's PKGs and every library package (lib*) they
# depend on, directly or through one another (Depends and Pre-Depends, not Recommends), and
# unpacks them all into one file tree DIR, without installing anything. Only libraries are
# followed: the tools' other dependencies (adduser, perl, debconf, init-system-helpers) serve
# maintainer scripts and services, which never run from such a tree. A library a binary needs
# but no package declares would not go unnoticed: the VM runner resolves each tool's DT_NEEDED
# inside DIR and refuses to boot without it. The stamp's first line names the packages asked
# for, the others each version unpacked: a later run asking for the same packages does nothing.
unpack_closure() {
  local dir=$1
  shift
  local pstamp=$dir/.xdplimit-stamp
  if [ -s "$pstamp" ] && [ "$(head -n1 "$pstamp")" = "packages: $*" ]; then
    echo "deps: $* and their libraries ($(($(wc -l <"$pstamp") - 1)) packages) unpacked in $dir"
    return
  fi
  "${APT_UPDATE:-apt_update_once}"
  local all=" $* " todo="$*" p new
  while [ -n "$todo" ]; do
    # shellcheck disable=SC2086 # one word per package
    new=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances $todo |
      sed -n 's/^ *|\{0,1\}\(Pre\)\{0,1\}Depends: \(lib[^ <>]*\)$/\2/p' | sort -u)
    todo=
    for p in $new; do
      case $all in *" $p "*) ;; *) all="$all$p " todo="$todo $p" ;; esac
    done
  done
  mkdir -p "$(dirname "$dir")"
  tmp=$(mktemp -d "$(dirname "$dir")/.$(basename "$dir").XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # shellcheck disable=SC2086
  (cd "$tmp" && apt-get -q -o APT::Sandbox::User=root download $all)
  mkdir "$tmp/root"
  echo "packages: $*" >"$tmp/root/.xdplimit-stamp"
  local deb
  for deb in "$tmp"/*.deb; do
    dpkg-deb -x "$deb" "$tmp/root"
    echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >>"$tmp/root/.xdplimit-stamp"
  done
  rm -rf "$dir"
  mv "$tmp/root" "$dir"
  rm -rf "$tmp"
  trap - EXIT
  echo "deps: $* and their libraries ($(($(wc -l <"$pstamp") - 1)) packages) unpacked in $dir"
}

# The end-to-end suite's servers and clients for make test-vm-arm64 (test/vm: iperf3,
# memcached, dnsmasq, dnsperf, chronyd and chronyc, nft, tcpdump), Debian's arm64 builds with their
# libraries: the amd64 VMs copy the host's binaries, which an arm64 guest cannot run.
APT_CONFIG="$ARM64_APT/apt.conf" APT_UPDATE=arm64_update_once \
  unpack_closure "${XDPLIMIT_ARM64_TOOLS_DIR:-/var/cache/xdplimit-deps/tools-arm64}" \
  iperf3 memcached dnsmasq-base dnsperf chrony nftables tcpdump
