# acpfs build, test, benchmark and demo entry points.
GO      ?= go
BIN     := bin/acpfs
# Packages that never mount anything: run under the race detector.
PURE    := ./protocol/... ./grants/... ./ledger/... ./audit/... ./internal/... ./cmd/... ./store/... ./drive/... ./view/...
# Packages whose tests use real FUSE mounts.
FUSE    := ./fs/... ./mount/... ./integration/... ./bench/...

PREFIX  ?= /usr/local

.PHONY: all build build-nats install test test-pure test-fuse lint bench bench-core bench-fs demo demo-cluster clean conformance fuzz

all: build

# -buildvcs=auto: acpfs --version names the commit when built from git.
# CGO_ENABLED=0: a static binary starts without the dynamic loader, a
# millisecond and more of every `acpfs append` (one process per event);
# nothing in acpfs needs cgo.
build:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o $(BIN) ./cmd/acpfs

# A JetStream server built from the Go module, for trying several hosts.
build-nats:
	CGO_ENABLED=0 $(GO) build -o bin/acpfs-nats ./cmd/acpfs-nats

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/acpfs

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The test packages that run the CLI use this build of it
# (ACPFS_TEST_BIN) instead of each linking their own.
test-pure: build
	ACPFS_TEST_BIN=$(CURDIR)/$(BIN) $(GO) test -race -count=1 $(PURE)

test-fuse: build
	ACPFS_TEST_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m $(FUSE)

# The two halves run at once: the FUSE packages spend most of their time
# waiting on mounts and child processes, the race-detector half on the
# CPU, so together they take little more than the longer one alone. They
# share nothing (the pure packages mount nothing and use no host uid);
# -O keeps each half's output together.
test: lint build
	$(MAKE) --no-print-directory -j2 -O test-pure test-fuse

clean:
	rm -rf bin

# Fuzzing (docs/fuzzing.md): every fuzz target for FUZZTIME (the model of
# the contract for MODEL_FUZZTIME), then the model over MODEL_SEEDS
# random sequences of MODEL_OPS operations from seed MODEL_FIRST (a new
# one each time unless given). No root, no FUSE. A failure names its
# input or its seed; go test replays it.
FUZZTIME       ?= 20s
MODEL_FUZZTIME ?= 2m
MODEL_SEEDS    ?= 40
MODEL_OPS      ?= 500
MODEL_FIRST    ?= $(shell date +%s)
FUZZFLAGS      ?= -fuzzminimizetime 5s
# An input of the model is a whole run (a folder, a ledger, three views):
# minimizing each new one for seconds would take most of the time.
MODEL_FUZZFLAGS ?= -fuzzminimizetime 3x
FUZZ_TARGETS   := ./grants:FuzzCompilePattern ./grants:FuzzParse \
	./protocol:FuzzAppendLine ./protocol:FuzzClassifyPending \
	./ledger:FuzzVerifyStream ./ledger:FuzzOpenTail ./ledger:FuzzFastLine ./ledger:FuzzFastLineV3 ./ledger:FuzzVerifyParity

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $${t#*:} ($${t%%:*}, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $${t%%:*}; \
	done
	@echo "== FuzzModel (./view, $(MODEL_FUZZTIME))"
	$(GO) test -run '^$$' -fuzz '^FuzzModel$$' -fuzztime $(MODEL_FUZZTIME) $(MODEL_FUZZFLAGS) ./view/
	@echo "== TestModel: $(MODEL_SEEDS) seeds from $(MODEL_FIRST), $(MODEL_OPS) operations each"
	ACPFS_MODEL_SEEDS=$(MODEL_SEEDS) ACPFS_MODEL_FIRST=$(MODEL_FIRST) ACPFS_MODEL_OPS=$(MODEL_OPS) \
		$(GO) test -count=1 -timeout 2h -run '^TestModel$$' ./view/

# The main job: an end-to-end collaboration through per-agent mounts.
demo: build
	ACPFS=$(CURDIR)/$(BIN) bash examples/demo.sh   # acpfs drive examples/demo.yaml

# The same collaboration across two hosts joined by NATS JetStream.
demo-cluster: build build-nats
	ACPFS=$(CURDIR)/$(BIN) ACPFS_NATS=$(CURDIR)/bin/acpfs-nats bash examples/demo-cluster.sh

# Benchmarks: the library and CLI figures, then the FUSE harness that
# compares native, plain go-fuse loopback and acpfs in one run
# (report in bin/benchmarks.md; see docs/benchmarks.md).
bench: bench-core bench-fs

bench-core: build
	$(GO) test -run '^$$' -bench 'LogAppend|Validate|OpenLog' -benchtime 20x ./protocol/
	$(GO) test -run '^$$' -bench 'CLIAppend' -benchtime 20x ./cmd/acpfs/
	$(GO) test -run '^$$' -bench 'EventsAppend' -benchtime 2000x ./view/
	$(GO) test -run '^$$' -bench 'Matcher50Rules' ./grants/
	$(GO) test -run '^$$' -bench 'Append|Verify1M' -benchtime 3x ./ledger/

bench-fs: build
	bash scripts/bench.sh

# POSIX conformance: pjdfstest in a plain go-fuse loopback and in an acpfs
# view, side by side (report in bin/conformance.md; see docs/benchmarks.md).
# Not part of test: it needs a pjdfstest checkout you built yourself
# (PJDFSTEST_DIR). About 9 minutes, 15 at most. ACPFS_BIN=path tests that
# binary instead of building bin/acpfs.
conformance:
	bash scripts/conformance.sh
