# xdplimit: run `make deps` once on a fresh machine (as root), then `make demo` or `make test`.
GO        ?= go
CLANG     ?= clang-19
BIN       := bin/xdplimit
export CGO_ENABLED ?= 0

.PHONY: all deps generate check-generate build test test-go test-vm demo bench lint clean

all: build

deps:
	bash scripts/deps.sh

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
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	clang-format-19 --dry-run --Werror bpf/*.c bpf/*.h

demo: deps build
	./$(BIN) demo

clean:
	rm -rf bin .cache/vm/initramfs*
