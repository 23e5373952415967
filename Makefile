# acpfs build, test, benchmark and demo entry points.
GO      ?= go
BIN     := bin/acpfs
# Packages that never mount anything: run under the race detector.
PURE    := ./protocol/... ./grants/... ./ledger/... ./cmd/...
# Packages whose tests use real FUSE mounts.
FUSE    := ./fs/... ./mount/... ./integration/...
BENCHTIME ?= 1x

.PHONY: all build test test-pure test-fuse lint bench demo clean fuzz

all: build

build:
	$(GO) build -o $(BIN) ./cmd/acpfs

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test-pure:
	$(GO) test -race -count=1 $(PURE)

test-fuse: build
	$(GO) test -count=1 -timeout 20m $(FUSE)

test: lint build test-pure test-fuse

clean:
	rm -rf bin

# The main job: an end-to-end collaboration through per-agent mounts.
demo: build
	ACPFS=$(CURDIR)/$(BIN) bash examples/demo.sh
