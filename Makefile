# xdplimit: run `make deps` once on a fresh machine (as root), then `make demo` or `make test`.
GO        ?= go
CLANG     ?= clang-19
BIN       := bin/xdplimit
export CGO_ENABLED ?= 0

.PHONY: all deps generate check-generate build test test-go test-vm demo bench lint clean

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
	$(GO) build -o $(BIN) ./cmd/xdplimit

# Everything: generated code fresh, lint, every Go test on this kernel (root:
# they load the real program and build veth labs), then the VM suite on 6.1.
# Packages run one at a time (-p 1): accuracy and throughput tests must not
# share the two CPUs with each other.
test: deps check-generate lint build test-go test-vm

test-go: build
	XDPLIMIT_BIN=$(abspath $(BIN)) $(GO) test -count=1 -p 1 -timeout 40m ./...

lint:
	bash scripts/check-no-binaries.sh
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	clang-format-19 --dry-run --Werror bpf/*.c bpf/*.h
	CLANG=$(CLANG) bash scripts/check-bpf-headers.sh

# ---- test-vm: the kernel-facing tests inside Debian's 6.1 LTS cloud kernel (qemu) ----
# VM_TEST_PKGS: packages whose tests run in the VM, each as a static test
# binary run from a copy of its package's testdata/. The xdplimit binary goes
# along for the end-to-end suite (XDPLIMIT_BIN). Kernel, modules, the KVM
# verdict and console logs are cached under .cache/vm. XDPLIMIT_VM_ACCEL=kvm|tcg
# overrides the accelerator; by default a one-time probe decides (TCG here:
# KVM hangs in this nested VM).
VM_TEST_PKGS ?= ./test/vm/qemu/smoke ./loader ./maps ./test/vm
VM_TIMEOUT   ?= 35m
# Per test binary: the maps suite takes over 10 min under emulation (TCG).
VM_TEST_TIMEOUT ?= 25m
VM_ARGS      ?=
VM_BIN       := .cache/vm/bin

test-vm:
	@rm -rf $(VM_BIN) && mkdir -p $(VM_BIN)
	CGO_ENABLED=0 $(GO) build -ldflags='-s -w' -o $(VM_BIN)/xdplimit ./cmd/xdplimit
	@set -e; bins=; \
	for pkg in $(VM_TEST_PKGS); do \
		bin=$(VM_BIN)/$$(echo "$${pkg#./}" | tr / _).test; \
		CGO_ENABLED=0 $(GO) test -c -ldflags='-s -w' -o $$bin $$pkg; \
		if [ -e $$bin ]; then bins="$$bins $$bin:$$pkg"; fi; \
	done; \
	$(GO) run ./test/vm/qemu --kernel-cache .cache/vm --timeout $(VM_TIMEOUT) --test-timeout $(VM_TEST_TIMEOUT) \
		--file $(VM_BIN)/xdplimit --env XDPLIMIT_BIN=/usr/local/bin/xdplimit \
		--module 8021q --module bridge \
		$(VM_ARGS) -- $$bins

# Regenerates BENCHMARKS.md and bench/veth.png from a real run (root; ~5 min
# idle, <15 min loaded). BENCH_FLAGS=-quick for a one-minute run to iterate
# on (marked as such in the output; do not commit it).
bench: deps
	@command -v gnuplot >/dev/null && command -v nft >/dev/null && command -v iptables-legacy-restore >/dev/null && command -v ethtool >/dev/null || { echo "bench: run make deps"; exit 1; }
	$(GO) run ./bench -out BENCHMARKS.md -chart bench/veth.png -gnuplot bench/chart.gp $(BENCH_FLAGS)

demo: deps build
	./$(BIN) demo

clean:
	rm -rf bin .cache/vm/initramfs*
