# Troupe — the two commands a fresh machine needs: `make demo` and `make test`.
# Everything else here is a helper they call.

GO        ?= go
CACHE     ?= $(CURDIR)/.cache
NPM_DIR   := $(CACHE)/npm
CODEX_VER := 0.169.0
CODEX_BIN := $(NPM_DIR)/node_modules/.bin/codex
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)

.PHONY: demo test build unit clients fuzz bench-go bench vet clean

## demo: run the gateway in front of the built-in mock fleet (Ctrl-C to stop)
demo: build
	./bin/troupe demo $(ARGS)

## build: compile bin/troupe
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/troupe ./cmd/troupe

## test: everything — vet, unit and end-to-end tests (race detector), real clients, short fuzz runs.
## PostgreSQL and Redis are started (or installed) by .ci/services when missing.
test: vet clients
	@set -a; eval "$$(.ci/services)"; set +a; \
	echo "go test: PostgreSQL $$TROUPE_TEST_PG_URL, Redis $$TROUPE_TEST_REDIS_URL"; \
	TROUPE_REQUIRE_SERVICES=1 TROUPE_CODEX_BIN=$(CODEX_BIN) TROUPE_REQUIRE_CLIENTS=1 \
	$(GO) test -race -count=1 -timeout 25m ./...
	$(MAKE) fuzz FUZZTIME=150000x

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

## clients: install the pinned real clients the end-to-end tests drive (npm, into .cache/)
clients: $(CODEX_BIN)

$(CODEX_BIN):
	@command -v npm >/dev/null || { echo "npm is required for the real-client tests: apt-get install -y nodejs npm"; exit 1; }
	mkdir -p $(NPM_DIR)
	npm install --no-audit --no-fund --prefix $(NPM_DIR) @openai/codex@$(CODEX_VER)

## unit: Go tests only, no real clients
unit:
	$(GO) test -race -count=1 ./...

FUZZTIME ?= 30s
## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzScanner$$' -fuzztime $(FUZZTIME) ./translate/
	$(GO) test -run '^$$' -fuzz '^FuzzAppendString$$' -fuzztime $(FUZZTIME) ./translate/
	$(GO) test -run '^$$' -fuzz '^FuzzTranslateRequest$$' -fuzztime $(FUZZTIME) ./translate/
	$(GO) test -run '^$$' -fuzz '^FuzzTranslateResponse$$' -fuzztime $(FUZZTIME) ./translate/
	$(GO) test -run '^$$' -fuzz '^FuzzTranslateError$$' -fuzztime $(FUZZTIME) ./translate/
	$(GO) test -run '^$$' -fuzz '^FuzzStream$$' -fuzztime $(FUZZTIME) ./translate/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRequest$$' -fuzztime $(FUZZTIME) ./gateway/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./bench/scenario/
	$(GO) test -run '^$$' -fuzz '^FuzzReadStream$$' -fuzztime $(FUZZTIME) ./bench/load/
	$(GO) test -run '^$$' -fuzz '^FuzzClassifyMessages$$' -fuzztime $(FUZZTIME) ./upstream/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCodexFile$$' -fuzztime $(FUZZTIME) ./upstream/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRateLimitsEvent$$' -fuzztime $(FUZZTIME) ./upstream/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRequest$$' -fuzztime $(FUZZTIME) ./bench/mock/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCreateFrame$$' -fuzztime $(FUZZTIME) ./gateway/
	$(GO) test -run '^$$' -fuzz '^FuzzCreateFrame$$' -fuzztime $(FUZZTIME) ./upstream/

## bench: the load-test harness (docs/bench.md): make bench ARGS="--scenario smoke --out /tmp/bench"
bench: build
	./bin/troupe bench $(ARGS)

## bench-go: the Go micro-benchmarks quoted in docs/benchmarks.md
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./actors/ ./translate/ ./gateway/ ./storage/... ./upstream/

clean:
	rm -rf bin $(CACHE)
