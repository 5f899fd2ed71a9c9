# SPDX-License-Identifier: Apache-2.0
# xdplimit: run `make deps` once on a fresh machine (as root), then `make demo` or `make test`.
GO        ?= go
CLANG     ?= clang-19
BIN       := bin/xdplimit
export CGO_ENABLED ?= 0

# What `xdplimit version` prints: git describe, the commit, and as the build
# date the commit's time (SOURCE_DATE_EPOCH, the reproducible-builds
# convention), so that building one commit twice gives identical files.
VERSION           := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT            := $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE        := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO         := github.com/xdplimit/xdplimit/internal/buildinfo
VERSION_LDFLAGS   := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).date=$(BUILD_DATE)

.PHONY: all deps generate check-generate build dist image test test-go test-vm test-vm-arm64 test-vm-arm64-smoke test-vm-build test-vm-run test-vm-beside test-vm-6.1-rest demo bench bench-against lint clean

all: build

deps:
	bash scripts/deps.sh
	$(GO) mod download

# Rebuild gen/ from bpf/ with the pinned clang. The output is committed.
generate:
	@command -v $(CLANG) >/dev/null || { echo "$(CLANG) missing: run make deps"; exit 1; }
	cd gen && $(GO) generate ./...

# CI: fail when the committed bindings differ from what bpf/ builds.
check-generate: generate
	@git diff --exit-code --stat -- gen/ || { echo "gen/ is stale: run make generate and commit"; exit 1; }

build:
	$(GO) build -ldflags '$(VERSION_LDFLAGS)' -o $(BIN) ./cmd/xdplimit

# ---- dist: what a release ships, in $(DIST) ----
# For each architecture in DIST_ARCHES (Go's names):
# xdplimit_<version>_linux_<goarch>: static (no cgo), stripped, paths trimmed;
# xdplimit_<debversion>_<debarch>.deb: built by nfpm (a Go tool dependency)
# from packaging/nfpm.yaml. Man pages and completions are generated once, by
# a binary this machine runs (they do not depend on the architecture), and go
# into every package. SHA256SUMS covers all of them. The Debian version is
# derived from git describe by packaging/deb-version.sh (see there).
# DEB_ARCH_<goarch> maps Go's architecture names to Debian's: they happen to
# be the same for these two, not for others (386 is i386, arm is armhf).
DIST           ?= dist
DEB_MAINTAINER ?= xdplimit maintainers <xdplimit@users.noreply.github.com>
DIST_ARCHES    ?= amd64 arm64
DEB_ARCH_amd64 := amd64
DEB_ARCH_arm64 := arm64
DIST_GEN       := $(DIST)/.gen
dist_bin        = $(DIST)/xdplimit_$(VERSION)_linux_$(1)
DIST_LDFLAGS   := -s -w $(VERSION_LDFLAGS)

dist:
	@deb=$$(packaging/deb-version.sh '$(VERSION)' "$$(date -u -d @$(SOURCE_DATE_EPOCH) +%Y%m%d)") || exit 1; \
	set -ex; \
	rm -rf $(DIST) && mkdir -p $(DIST_GEN); \
	$(foreach a,$(DIST_ARCHES),test -n '$(DEB_ARCH_$(a))' || { echo "dist: no DEB_ARCH_$(a)"; exit 2; }; \
	CGO_ENABLED=0 GOOS=linux GOARCH=$(a) $(GO) build -trimpath -ldflags '$(DIST_LDFLAGS)' -o $(call dist_bin,$(a)) ./cmd/xdplimit;) \
	docs=$(DIST)/xdplimit_$(VERSION)_linux_$$($(GO) env GOHOSTARCH); \
	if [ ! -x "$$docs" ]; then \
		docs=$(DIST_GEN)/xdplimit; \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(DIST_LDFLAGS)' -o $$docs ./cmd/xdplimit; \
	fi; \
	$$docs gendocs $(DIST_GEN); \
	gzip -9n $(DIST_GEN)/man8/*.8; \
	{ printf 'xdplimit (%s) unstable; urgency=medium\n\n  * Built from commit %s (%s).\n\n' "$$deb" '$(COMMIT)' '$(VERSION)'; \
	  printf ' -- %s  %s\n' '$(DEB_MAINTAINER)' "$$(date -u -R -d @$(SOURCE_DATE_EPOCH))"; } | gzip -9n > $(DIST_GEN)/changelog.gz; \
	$(foreach a,$(DIST_ARCHES),DEB_VERSION="$$deb" DEB_ARCH=$(DEB_ARCH_$(a)) DEB_MAINTAINER='$(DEB_MAINTAINER)' \
		DIST_BIN=$(call dist_bin,$(a)) DIST_GEN=$(DIST_GEN) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) \
		$(GO) tool nfpm package --config packaging/nfpm.yaml --packager deb --target $(DIST)/;) \
	rm -rf $(DIST_GEN); \
	cd $(DIST) && sha256sum xdplimit_* > SHA256SUMS

# ---- image: the container image, in $(DIST) ----
# An OCI archive, xdplimit_<version>_oci.tar, holding one image index for
# linux/amd64 and linux/arm64 (podman load, skopeo copy, ctr image import),
# and a docker-archive per platform, xdplimit_<version>_linux_<arch>.docker.tar
# (docker load). Each image is one layer: the static binary built as for
# dist, at /usr/local/bin/xdplimit (the entrypoint), and the licence texts;
# no shell, no distribution. packaging/mkimage writes it without a daemon,
# every timestamp SOURCE_DATE_EPOCH: one commit gives byte-identical
# archives. Named ghcr.io/xdplimit/xdplimit:<version> (packaging/ociimage).
# It replaces the archives of an earlier image and leaves dist's other
# files alone.
IMAGE_PLATFORMS := amd64 arm64
IMAGE_BUILD     := $(DIST)/.image

image:
	@set -e; rm -rf $(IMAGE_BUILD) && mkdir -p $(IMAGE_BUILD); \
	rm -f $(DIST)/xdplimit_*_oci.tar $(DIST)/xdplimit_*.docker.tar; \
	for arch in $(IMAGE_PLATFORMS); do \
		echo "image: building xdplimit for linux/$$arch"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(VERSION_LDFLAGS)' \
			-o $(IMAGE_BUILD)/xdplimit_$$arch ./cmd/xdplimit; \
	done; \
	$(GO) run ./packaging/mkimage --out $(DIST) --version '$(VERSION)' --revision '$(COMMIT)' --epoch $(SOURCE_DATE_EPOCH) \
		$(foreach a,$(IMAGE_PLATFORMS),--bin $(a)=$(IMAGE_BUILD)/xdplimit_$(a)) \
		--licence LICENSE=LICENSE --licence LICENSE.GPL-2.0=bpf/LICENSE.GPL-2.0 \
		--licence LICENSE.BSD-2-Clause=bpf/LICENSE.BSD-2-Clause; \
	rm -rf $(IMAGE_BUILD)

# Everything: generated code fresh, lint, every Go test on this kernel (root:
# they load the real program and build veth labs), the VM suite on 6.1 and
# 6.12, and an arm64 smoke run. A stage "a+b" runs a and b at once
# (scripts/stages.sh: a's output live, b's once it ends), where one leaves a
# CPU the other can use: lint beside building the VM's test binaries; the
# host suite, which waits on syncs, timers and floods' ends for much of its
# quarter hour, beside the VMs (test-vm-beside: the 6.12 VM, which keeps
# about one CPU busy, then the 6.1 VM with the packages of VM_BESIDE_6.1,
# then the arm64 VM's smoke run, test-vm-arm64-smoke); the rest of the 6.1
# packages follow (test-vm-6.1-rest). Host packages still run one at a
# time (-p 1), so that no two of their floods compete; the host tests are
# built to pass on a loaded machine, as a host under attack is. Each
# stage's time is printed as it ends and all together at the end.
test:
	@MAKE='$(MAKE)' bash scripts/stages.sh deps check-generate build lint+test-vm-build test-go+test-vm-beside test-vm-6.1-rest

# HOST_SKIP: tests whose prerequisite this host's kernel lacks by its build,
# named here with the reason rather than skipped silently (in CI they would
# fail, as every missing prerequisite does); the VM suite runs them.
# TestVLANTaggedTrafficReachesStack needs 802.1Q devices, and the host kernel
# is built without CONFIG_VLAN_8021Q.
HOST_SKIP ?= ^TestVLANTaggedTrafficReachesStack$$

test-go: build
	XDPLIMIT_BIN=$(abspath $(BIN)) $(GO) test -count=1 -p 1 -timeout 40m -skip '$(HOST_SKIP)' ./...

lint:
	bash scripts/check-no-binaries.sh
	bash scripts/check-spdx.sh
	GO=$(GO) bash scripts/check-test-imports.sh
	GO=$(GO) bash scripts/check-sizes.sh
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	clang-format-19 --dry-run --Werror bpf/*.c bpf/*.h
	CLANG=$(CLANG) bash scripts/check-bpf-headers.sh

# ---- test-vm: the kernel-facing tests inside Debian's cloud kernels (qemu) ----
# VM_KERNELS: the kernel series to boot, one VM run each, in turn: 6.1 is
# the oldest the project tests (Debian 12's kernel), 6.12 the next LTS
# (Debian 12's second kernel series). VM_KERNEL_<series> names the Debian
# metapackage (or image package) to boot; the runner resolves it with
# apt-cache, and caches each kernel version in its own entry.
# VM_TEST_PKGS_<series>: packages whose tests run on that kernel, each as a
# static test binary run at its package's place under /src in the VM, with
# its testdata/ and the repository directories in VM_TREES beside it (tests
# read ../docs, ../../examples). The oldest kernel runs every package that
# loads the program or attaches it but test/fleet, whose real-time fleet of
# three agents syncs ten times slower under emulation than it is configured
# to (1.2 s per 100 ms sync): what it checks of the program, its fleet
# levels, ./fleet checks there against the real program in simulated time.
# The next LTS, between it and the host's kernel, runs the smoke test, the
# loader's verifier and attach tests and the end-to-end suite: the whole of
# make test fits CI's 90 minutes. Under emulation one test binary keeps about
# one CPU busy, so VM_LANES binaries run at once, each taking the next of its
# kernel's list when it is free: the lists name the longest first.
# VM_TEST_PKGS, when set, replaces the lists
# for every kernel (a focused run). The tools the tests start (VM_TOOLS) go
# along at their host paths, with their shared libraries, as do the xdplimit
# binary (XDPLIMIT_BIN) and the previous map layout's, for the upgrade test,
# and the GeoIP scale test's database, written on the host.
# Kernel, modules, the KVM verdict and console logs are cached under
# .cache/vm. XDPLIMIT_VM_ACCEL=kvm|tcg overrides the accelerator; by default
# a one-time probe decides (TCG here: KVM hangs in this nested VM). Every
# kernel runs even when one fails.
VM_KERNELS      ?= 6.1 6.12
VM_KERNEL_6.1   ?= linux-image-cloud-amd64
VM_KERNEL_6.12  ?= linux-image-6.12-cloud-amd64
VM_TEST_PKGS_6.12 ?= ./test/vm ./loader ./test/vm/qemu/smoke
VM_TEST_PKGS_6.1  ?= ./maps ./test/vm ./agent ./cmd/xdplimit ./fleet ./replay ./loader ./test/evasion \
	./metrics ./droplog ./pktgen ./test/service ./bench ./internal/harness/bpfprof ./compiler ./test/vm/qemu/smoke
VM_TEST_PKGS ?=
VM_TREES     ?= docs deploy examples policy/testdata
VM_TOOLS     ?= nft redis-server redis-cli prometheus promtool tcpdump nsenter dnsmasq dnsperf iperf3 memcached \
	$(CROWDSEC_DIR)/usr/bin/crowdsec $(CROWDSEC_DIR)/usr/bin/cscli \
	$(CHRONY_DIR)/usr/sbin/chronyd $(CHRONY_DIR)/usr/bin/chronyc
CROWDSEC_DIR ?= $(or $(XDPLIMIT_CROWDSEC_DIR),/var/cache/xdplimit-deps/crowdsec)
CHRONY_DIR   ?= $(or $(XDPLIMIT_CHRONY_DIR),/var/cache/xdplimit-deps/chrony)
# Bounds on a hung VM or binary, not judgments: with stress-ng --cpu 2
# beside it the 6.1 VM's other packages took 37 min, and maps alone 23.
VM_TIMEOUT   ?= 75m
VM_TEST_TIMEOUT ?= 40m
VM_LANES     ?= 2
# Test binaries (base names) that run with nothing beside them, before the
# lanes: test/vm's floods hold a CPU in softirq, and under emulation another
# binary patching kernel text meanwhile (every XDP attach and
# BPF_PROG_TEST_RUN updates the XDP dispatcher) has livelocked the guest.
VM_ALONE     ?= test_vm.test
# Two binaries at once, each with its limiters: 2 GiB was once exhausted by
# the maps suite alone.
VM_MEMORY    ?= 3072
VM_ARGS      ?=
VM_BIN       := .cache/vm/bin
empty :=
space := $(empty) $(empty)
comma := ,
vm_pkgs = $(or $(VM_TEST_PKGS),$(VM_TEST_PKGS_$(1)))
# A kernel's test binaries, as BIN:PACKAGE (./test/vm: $(VM_BIN)/test_vm.test).
vm_bins = $(foreach p,$(call vm_pkgs,$(1)),$(VM_BIN)/$(subst /,_,$(patsubst ./%,%,$(p))).test:$(p))

test-vm: test-vm-build
	@$(MAKE) --no-print-directory test-vm-run

# test-vm-<series>: one kernel's VM run of the binaries test-vm-build made.
test-vm-%:
	@$(MAKE) --no-print-directory test-vm-run VM_KERNELS=$*

# make test's split of the VM runs (see test): VM_BESIDE_6.1 names 6.1
# packages that run in a VM of their own beside the host suite, after the
# 6.12 VM; test-vm-6.1-rest runs the other 6.1 packages. Together they are
# test-vm's runs, package for package. The arm64 smoke run follows the
# beside VMs; each runs even when one before it failed.
VM_BESIDE_6.1 ?= ./replay ./fleet
test-vm-beside:
	@rc=0; $(MAKE) --no-print-directory test-vm-run VM_KERNELS='6.12 6.1' VM_TEST_PKGS_6.1='$(VM_BESIDE_6.1)' || rc=1; \
	$(MAKE) --no-print-directory test-vm-arm64-smoke || rc=1; exit $$rc
test-vm-6.1-rest:
	@$(MAKE) --no-print-directory test-vm-run VM_KERNELS=6.1 VM_TEST_PKGS_6.1='$(filter-out $(VM_BESIDE_6.1),$(VM_TEST_PKGS_6.1))'

# Builds every kernel's test binaries (VM_KERNELS), the xdplimit binary, the
# previous release's and the runner into $(VM_BIN), for test-vm-run.
test-vm-build:
	@rm -rf $(VM_BIN) && mkdir -p $(VM_BIN)
	CGO_ENABLED=0 $(GO) build -ldflags='-s -w $(VERSION_LDFLAGS)' -o $(VM_BIN)/xdplimit ./cmd/xdplimit
	$(GO) build -o $(VM_BIN)/vm-runner ./test/vm/qemu
	@# The upgrade test's previous release: the VM has neither git nor Go.
	set -e; prev=$$(cat test/service/testdata/previous-layout-commit); tmp=$$(mktemp -d); \
	trap 'rm -rf "$$tmp"' EXIT; git archive "$$prev" | tar -x -C "$$tmp"; \
	cd "$$tmp" && GOFLAGS='-mod=mod -buildvcs=false' GOWORK=off CGO_ENABLED=0 \
		$(GO) build -ldflags='-s -w' -o $(CURDIR)/$(VM_BIN)/xdplimit-previous ./cmd/xdplimit
	@# The GeoIP scale test's 500k-network database: the writer's work, which
	@# an emulated CPU takes minutes for.
	$(GO) run ./internal/testkit/mmdbtest/genlarge -o $(VM_BIN)/geoip-large.mmdb
	@set -e; \
	for b in $(sort $(foreach k,$(VM_KERNELS),$(call vm_bins,$(k)))); do \
		CGO_ENABLED=0 $(GO) test -c -ldflags='-s -w' -o $${b%%:*} $${b#*:}; \
	done

# Boots each kernel of VM_KERNELS in turn and runs its binaries there.
test-vm-run:
	@set -e; failed=; \
	for k in $(foreach k,$(VM_KERNELS),$(k)=$(VM_KERNEL_$(k))=$(subst $(space),$(comma),$(strip $(call vm_bins,$(k))))); do \
		series=$${k%%=*}; rest=$${k#*=}; pkg=$${rest%%=*}; \
		[ -n "$$pkg" ] || { echo "test-vm: no VM_KERNEL_$$series"; exit 2; }; \
		bins=; \
		alone=; \
		for b in $$(echo "$${rest#*=}" | tr , ' '); do \
			[ -e "$${b%%:*}" ] || continue; \
			bins="$$bins $$b"; \
			for a in $(VM_ALONE); do \
				if [ "$$(basename "$${b%%:*}")" = "$$a" ]; then alone="$$alone --alone $$a"; fi; \
			done; \
		done; \
		echo "==== test-vm: Linux $$series ($$pkg):$$bins ===="; \
		start=$$(date +%s); \
		$(VM_BIN)/vm-runner --kernel $$pkg --kernel-cache .cache/vm --timeout $(VM_TIMEOUT) --test-timeout $(VM_TEST_TIMEOUT) \
			--file $(VM_BIN)/xdplimit --env XDPLIMIT_BIN=/usr/local/bin/xdplimit \
			--file $(VM_BIN)/xdplimit-previous --env XDPLIMIT_PREVIOUS_BIN=/usr/local/bin/xdplimit-previous \
			--file $(VM_BIN)/geoip-large.mmdb:/var/lib/xdplimit-test/geoip-large.mmdb \
			--env XDPLIMIT_GEOIP_LARGE_DB=/var/lib/xdplimit-test/geoip-large.mmdb \
			$(foreach t,$(VM_TOOLS),--tool $(t)) $(foreach d,$(VM_TREES),--tree $(d)) \
			--module 8021q --module bridge --module sch_ingress --module cls_bpf --module nf_conntrack --module nft_ct --lanes $(VM_LANES) --memory $(VM_MEMORY) \
			$$alone $(VM_ARGS) -- $$bins || failed="$$failed $$series"; \
		echo "==== test-vm: Linux $$series took $$(( $$(date +%s) - start ))s ===="; \
	done; \
	[ -z "$$failed" ] || { echo "test-vm: FAILED on Linux$$failed"; exit 1; }

# ---- test-vm-arm64: the kernel-facing core in Debian's arm64 cloud kernel ----
# Not part of make test. qemu-system-aarch64 emulates a virt board (TCG: an
# arm64 guest on this amd64 host) with the test binaries cross-compiled
# (GOARCH=arm64, static): the end-to-end suite, the maps package's
# verifier budget and drop-ring tests (VM_RUNS_ARM64, the runner's --run per
# test binary: the whole package had not finished after 32 minutes beside
# test/vm; empty runs it all), the loader's verifier and attach tests and
# the smoke test (VM_TEST_PKGS_ARM64, the longest first), two at once
# (VM_LANES_ARM64), as the amd64 6.1 VM runs maps beside test/vm. The
# kernel is resolved and downloaded as for amd64, through the private arm64 apt state make deps
# keeps (ARM64_APT: its lists know only arm64, and the host's dpkg gets no
# foreign architecture); the initramfs gets Debian's arm64 busybox,
# unpacked there too. The servers and clients the end-to-end suite starts
# (VM_TOOLS_ARM64) are Debian's arm64 builds, which make deps unpacks with
# their libraries into ARM64_TOOLS; the runner (--tool-root) resolves each
# one's libraries in that tree, as the guest's loader will. The times
# measured here are in README.md.
VM_KERNEL_ARM64    ?= linux-image-cloud-arm64
VM_TEST_PKGS_ARM64 ?= ./test/vm ./maps ./loader ./test/vm/qemu/smoke
VM_LANES_ARM64     ?= 2
# (A filter for a binary the run lacks is refused: maps' only with maps.)
VM_RUNS_ARM64      ?= $(if $(filter ./maps,$(VM_TEST_PKGS_ARM64)),--run 'maps.test=^(TestVerifierBudget|TestDrop|TestReadRing|TestReadSlot)')
VM_TOOLS_ARM64     ?= iperf3 memcached dnsmasq dnsperf chronyd chronyc nft tcpdump
ARM64_APT          ?= $(or $(XDPLIMIT_ARM64_APT_DIR),/var/cache/xdplimit-deps/apt-arm64)
ARM64_BUSYBOX      ?= $(or $(XDPLIMIT_ARM64_BUSYBOX_DIR),/var/cache/xdplimit-deps/busybox-arm64)/bin/busybox
ARM64_TOOLS        ?= $(or $(XDPLIMIT_ARM64_TOOLS_DIR),/var/cache/xdplimit-deps/tools-arm64)
# The whole run, and each binary: test/vm, the longest, took 17 minutes
# (quiet machine, maps beside it; 32 before the guest's CPU got pointer
# authentication's cheap cipher).
VM_TIMEOUT_ARM64      ?= 90m
VM_TEST_TIMEOUT_ARM64 ?= 60m
VM_BIN_ARM64       := .cache/vm/bin-arm64
vm_bins_arm64       = $(foreach p,$(VM_TEST_PKGS_ARM64),$(VM_BIN_ARM64)/$(subst /,_,$(patsubst ./%,%,$(p))).test:$(p))
# The runner's arguments for an arm64 guest, for any target that boots one:
# busybox, the kernel, the xdplimit binary, the tools and the modules the
# amd64 VMs load.
VM_ARM64_ARGS       = --arch arm64 --busybox $(ARM64_BUSYBOX) --kernel $(VM_KERNEL_ARM64) --kernel-cache .cache/vm \
	--file $(VM_BIN_ARM64)/xdplimit --env XDPLIMIT_BIN=/usr/local/bin/xdplimit \
	--tool-root $(ARM64_TOOLS) $(foreach t,$(VM_TOOLS_ARM64),--tool $(t)) \
	--module 8021q --module bridge --module sch_ingress --module cls_bpf --module nf_conntrack --module nft_ct

test-vm-arm64:
	@test -e $(ARM64_APT)/apt.conf -a -x $(ARM64_BUSYBOX) -a -e $(ARM64_TOOLS)/.xdplimit-stamp || \
		{ echo "test-vm-arm64: run make deps (arm64 apt state, busybox, tools)"; exit 2; }
	@rm -rf $(VM_BIN_ARM64) && mkdir -p $(VM_BIN_ARM64)
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -ldflags='-s -w $(VERSION_LDFLAGS)' -o $(VM_BIN_ARM64)/xdplimit ./cmd/xdplimit
	$(GO) build -o $(VM_BIN_ARM64)/vm-runner ./test/vm/qemu
	@set -e; for b in $(vm_bins_arm64); do \
		CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -ldflags='-s -w' -o $${b%%:*} $${b#*:}; \
	done
	@echo "==== test-vm-arm64: $(VM_KERNEL_ARM64): $(vm_bins_arm64) ===="; start=$$(date +%s); \
	APT_CONFIG=$(ARM64_APT)/apt.conf $(VM_BIN_ARM64)/vm-runner $(VM_ARM64_ARGS) \
		--timeout $(VM_TIMEOUT_ARM64) --test-timeout $(VM_TEST_TIMEOUT_ARM64) \
		--lanes $(VM_LANES_ARM64) --memory $(VM_MEMORY) $(VM_RUNS_ARM64) $(VM_ARGS) -- $(vm_bins_arm64); rc=$$?; \
	echo "==== test-vm-arm64: took $$(( $$(date +%s) - start ))s ===="; exit $$rc

# ---- test-vm-arm64-smoke: make test's part of the arm64 VM ----
# Boot, load every program build, attach, one flood judged: the smoke test
# (the kernel, bpffs, native XDP on veth); TestVerifierBudget for the builds
# an operator runs (attach's two clocks, the replay's injected clock with
# its decision record) and the benchmarks' stage build, each with its
# companion programs (fleet apply, egress, wipe); and the end-to-end
# suite's first test, which attaches the arm64 xdplimit binary and judges
# a flood against its limit. test-vm-arm64's run with these packages and a
# filter per binary (the runner's --run); make test-vm-arm64 runs the
# suites whole.
# The benchmarks' stage build is loaded stopping after the rule stage, the
# most of it; TestVerifierBudget names that configuration by the stage's
# number, read from the header that defines it.
STOP_RULE := $(shell sed -n 's/.*XDPL_STOP_RULE = \([0-9]*\),.*/\1/p' bpf/xdplimit_consts.h)
test-vm-arm64-smoke: VM_TEST_PKGS_ARM64 = ./maps ./test/vm ./test/vm/qemu/smoke
test-vm-arm64-smoke: VM_TOOLS_ARM64 =
test-vm-arm64-smoke: VM_RUNS_ARM64 = --run 'maps.test=TestVerifierBudget/^(coarse|ktime|map\+record|coarse\+bench-stop-$(STOP_RULE))$$' \
	--run 'test_vm.test=^TestAttachEnforcesAndDetaches$$'
test-vm-arm64-smoke: test-vm-arm64

# Regenerates BENCHMARKS.md and bench/veth.png from a real run (root; ~18 min
# idle). BENCH_FLAGS=-quick for a run of a few minutes to iterate on, or
# BENCH_FLAGS=-only=traffic for some sections: those write
# bench/out/partial.md instead, never the committed report.
bench: deps
	@command -v gnuplot >/dev/null && command -v nft >/dev/null && command -v iptables-legacy-restore >/dev/null && command -v ethtool >/dev/null || { echo "bench: run make deps"; exit 1; }
	$(GO) run ./bench -gnuplot bench/chart.gp $(BENCH_FLAGS)

# bench-against REV=<commit>: this tree's program beside REV's, case for
# case, call after call (bench/against.go); REV must have this tree's map
# layout. Report: bench/out/against.md.
bench-against: deps
	@test -n "$(REV)" || { echo "bench-against: name the other build, REV=<commit>"; exit 2; }
	CLANG=$(CLANG) bash scripts/build-object.sh $(REV) bench/out/against-$(REV).o
	$(GO) run ./bench -against bench/out/against-$(REV).o $(BENCH_FLAGS)

demo: deps build
	./$(BIN) demo

clean:
	rm -rf bin dist .cache/vm/initramfs*
