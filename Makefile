# Troupe — the two commands a fresh machine needs: `make demo` and `make test`.
# Everything else here is a helper they call.

GO        ?= go
CACHE     ?= $(CURDIR)/.cache
NPM_DIR   := $(CACHE)/npm
CODEX_VER := 0.169.0
CODEX_BIN := $(NPM_DIR)/node_modules/.bin/codex
CLAUDE_VER := 2.1.328
CLAUDE_BIN := $(NPM_DIR)/node_modules/.bin/claude
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)

.PHONY: demo test test-quick go-test build unit clients fuzz bench-go bench vet staticcheck clean sdk-node

# STAGE runs one step with a start line and its duration (.ci/stage).
STAGE := .ci/stage
SUBMAKE := $(MAKE) --no-print-directory

## demo: run the gateway in front of the built-in mock fleet (Ctrl-C to stop)
demo: build
	./bin/troupe demo $(ARGS)

## build: compile bin/troupe (with the admin UI when npm is installed; see admin-ui)
build: admin-ui-if-npm
	@$(STAGE) step "go build: bin/troupe$(if $(wildcard bin/troupe),, (the first build downloads and compiles the Go dependencies: a few minutes))" \
		$(GO) build -ldflags "$(LDFLAGS)" -o bin/troupe ./cmd/troupe

## test: everything — vet, staticcheck, unit and end-to-end tests (race detector), real clients, short fuzz runs,
## the admin UI's tests in Chromium. Each stage prints a start line and its duration, and a table
## of the stages' times closes the run. PostgreSQL and Redis are started (or installed) by
## .ci/services when missing.
test:
	@$(STAGE) begin "make test"
	@$(STAGE) run "vet, gofmt" $(SUBMAKE) vet
	@$(STAGE) run "staticcheck" $(SUBMAKE) staticcheck
	@$(STAGE) run "real clients (npm, first run only)" $(SUBMAKE) clients
	@$(STAGE) run "go test -race ./... (unit, end-to-end, real clients)" $(SUBMAKE) go-test
	@$(STAGE) run "official Node SDKs' stream helpers" $(SUBMAKE) sdk-node
	@$(STAGE) run "fuzz (every target, 50000 runs each)" $(SUBMAKE) fuzz $(FUZZ_CI)
	@$(STAGE) run "admin UI unit tests (Vitest)" $(SUBMAKE) admin-ui-test
	@$(STAGE) run "admin UI end to end (Chromium)" $(SUBMAKE) admin-ui-e2e
	@$(STAGE) end

## test-quick: the edit-run loop, a few minutes: vet, gofmt and go test -short without the race
## detector (no real clients, no browsers, no fuzzing; the long end-to-end suites skip themselves
## under -short; PostgreSQL and Redis tests run when those are up, else skip). make test is the gate.
test-quick:
	@$(STAGE) begin "make test-quick"
	@$(STAGE) run "vet, gofmt" $(SUBMAKE) vet
	@$(STAGE) run "go test -short ./... (no race detector)" $(GO) test -short -count=1 ./...
	@$(STAGE) end

# go-test: make test's Go stage: every package with the race detector, the
# services and the real clients required; then internal/sock and gateway
# again without it, since under the race detector internal/sock makes its
# socket calls through package syscall (call_race.go) and only a plain build
# runs the raw calls the binary ships with.
go-test:
	@set -a; eval "$$(.ci/services)"; set +a; \
	echo "go test: PostgreSQL $$TROUPE_TEST_PG_URL, Redis $$TROUPE_TEST_REDIS_URL; a line per package as it finishes"; \
	TROUPE_REQUIRE_SERVICES=1 TROUPE_CODEX_BIN=$(CODEX_BIN) TROUPE_CLAUDE_BIN=$(CLAUDE_BIN) TROUPE_REQUIRE_CLIENTS=1 \
	$(GO) test -race -count=1 -timeout 25m ./... && \
	$(GO) test -count=1 -timeout 10m ./internal/sock ./gateway

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

STATICCHECK_VER := v0.8.2
STATICCHECK     := $(CACHE)/bin/staticcheck-$(STATICCHECK_VER)

## staticcheck: the linter (honnef.co/go/tools, pinned; installed into .cache/ when missing)
staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

$(STATICCHECK):
	mkdir -p $(CACHE)/bin
	GOBIN=$(CACHE)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VER)
	mv $(CACHE)/bin/staticcheck $@

## clients: install the pinned real clients the end-to-end tests drive (npm, into .cache/)
clients: $(CODEX_BIN) $(CLAUDE_BIN)

$(CODEX_BIN):
	@command -v npm >/dev/null || { echo "npm is required for the real-client tests: apt-get install -y nodejs npm"; exit 1; }
	mkdir -p $(NPM_DIR)
	npm install --no-audit --no-fund --prefix $(NPM_DIR) @openai/codex@$(CODEX_VER)

# Claude Code ships its native binary as an npm optional dependency; its
# postinstall puts it in place of bin/claude.exe.
$(CLAUDE_BIN):
	@command -v npm >/dev/null || { echo "npm is required for the real-client tests: apt-get install -y nodejs npm"; exit 1; }
	mkdir -p $(NPM_DIR)
	npm install --no-audit --no-fund --prefix $(NPM_DIR) @anthropic-ai/claude-code@$(CLAUDE_VER)

## sdk-node: the official Node SDKs (openai, @anthropic-ai/sdk; pinned in translate/sdkcheck/node,
## installed into .cache/sdkcheck-node) read every golden client transcript of package translate
## and every client stream of its property test
SDK_NODE_SRC := translate/sdkcheck/node
SDK_NODE_DIR := $(CACHE)/sdkcheck-node
SDK_NODE_DEPS := $(SDK_NODE_DIR)/node_modules/.package-lock.json

$(SDK_NODE_DEPS): $(SDK_NODE_SRC)/package.json $(SDK_NODE_SRC)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is required for the Node SDK check: apt-get install -y nodejs npm"; exit 1; }
	mkdir -p $(SDK_NODE_DIR)
	cp $(SDK_NODE_SRC)/package.json $(SDK_NODE_SRC)/package-lock.json $(SDK_NODE_DIR)/
	cd $(SDK_NODE_DIR) && npm ci --no-audit --no-fund

sdk-node: $(SDK_NODE_DEPS)
	cp $(SDK_NODE_SRC)/check.mjs $(SDK_NODE_DIR)/
	rm -rf $(SDK_NODE_DIR)/generated && mkdir -p $(SDK_NODE_DIR)/generated
	$(GO) test -count=1 -run '^TestStreamProperty$$' ./translate/ -args -dump-streams $(SDK_NODE_DIR)/generated
	node $(SDK_NODE_DIR)/check.mjs $(CURDIR)/translate/testdata/golden $(SDK_NODE_DIR)/generated

## unit: Go tests only, no real clients
unit:
	$(GO) test -race -count=1 ./...

FUZZTIME ?= 30s
# FUZZMINIMIZETIME: go test's -fuzzminimizetime, the effort spent shrinking
# each input that found new coverage (and a crasher) before going on. Go's
# default, 60s of wall time, suits a long campaign (the corpus kept in
# $GOCACHE/fuzz stays small); make test sets it to 0 (see FUZZ_CI below).
FUZZMINIMIZETIME ?= 60s
# FUZZ_TARGETS: every fuzz target, as package-directory:FuzzName, a package's
# targets back to back: its instrumented build is compiled by the first and
# only linked again by the others.
FUZZ_TARGETS := translate:FuzzScanner translate:FuzzAppendString translate:FuzzValidWithin translate:FuzzTranslateRequest \
	translate:FuzzTranslateResponse translate:FuzzTranslateError translate:FuzzStream translate:FuzzStreamConformance \
	gateway:FuzzParseRequest gateway:FuzzEstimateInputTokens gateway:FuzzParseCreateFrame gateway:FuzzOutputCaps gateway:FuzzRepeatedKeys gateway:FuzzOutputMembers gateway:FuzzScanChat gateway:FuzzSequenceNumber gateway:FuzzCountChatDelta gateway:FuzzChatDeltaContent \
	upstream:FuzzClassifyMessages upstream:FuzzReadAnswer upstream:FuzzParseCodexFile upstream:FuzzParseRateLimitsEvent upstream:FuzzCreateFrame \
	admin:FuzzAdminImport admin:FuzzUsageCursor \
	bench/scenario:FuzzParse bench/load:FuzzReadStream bench/mock:FuzzParseRequest \
	scripts:FuzzCompile billing:FuzzParseAmount
# FUZZ_CI: make test's fuzz budget: a run count per target (what runs does
# not depend on the machine's load, unlike a duration), minimization off.
# 150000 runs each with Go's minimization took 13m47s of a 29-minute make
# test on a 2-core machine. With minimization on, every input that finds new
# coverage is first shrunk: that reserves up to half the run count (75,000
# of 150000) and waits up to 60 s of wall time, the one step of the stage
# that a loaded machine lengthens without a bound in runs; 20000-run
# translate targets stalled 18-57 s in it. Off, a crasher is still written
# to testdata/fuzz, unshrunk. README, "The stages of make test", has the
# counts. A long campaign: make fuzz FUZZTIME=10m (Go's minimization on).
FUZZ_CI := FUZZTIME=50000x FUZZMINIMIZETIME=0
## fuzz: run every fuzz target for FUZZTIME each (a duration, or a run count such as 50000x),
## with a line saying which one of how many
fuzz:
	@set -e; n=0; total=$(words $(FUZZ_TARGETS)); for t in $(FUZZ_TARGETS); do \
		n=$$((n+1)); pkg=$${t%%:*}; fn=$${t#*:}; \
		echo "fuzz $$n/$$total: $$fn in ./$$pkg/ ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./$$pkg/; \
	done

## bench: the load-test harness (docs/bench.md): make bench ARGS="--scenario smoke --out /tmp/bench"
bench: build
	./bin/troupe bench $(ARGS)

## bench-go: the Go micro-benchmarks quoted in docs/benchmarks.md
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./actors/ ./translate/ ./gateway/ ./admin/ ./storage/... ./upstream/

clean:
	rm -rf bin $(CACHE)

# --- admin web UI (admin-ui/, docs/admin-ui.md) ---
UI_DIR   := admin-ui
UI_DIST  := $(UI_DIR)/web/dist/index.html
UI_DEPS  := $(UI_DIR)/node_modules/.package-lock.json
UI_SRC   := $(shell find $(UI_DIR)/src -type f 2>/dev/null) $(UI_DIR)/index.html $(UI_DIR)/vite.config.ts $(UI_DIR)/tsconfig.json
CHROMIUM ?= /usr/bin/chromium

.PHONY: admin-ui admin-ui-if-npm admin-ui-test admin-ui-e2e admin-ui-e2e-console admin-ui-10k chromium

## admin-ui: build the admin web UI (npm ci into admin-ui/node_modules, vite build into
## admin-ui/web/dist, which the Go build embeds; without it the binary serves a fallback page)
admin-ui: $(UI_DIST)

admin-ui-if-npm:
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory admin-ui || \
		echo "the admin UI did not build (see above): building without it (it serves a page saying how to build it)"; \
	else echo "npm not found: building without the admin UI (it serves a page saying how to build it)"; fi

$(UI_DEPS): $(UI_DIR)/package-lock.json
	@$(STAGE) step "admin UI: npm ci (its dependencies into $(UI_DIR)/node_modules; from the npm registry, a minute or more the first time)" \
		sh -c 'cd $(UI_DIR) && npm ci --no-audit --no-fund'

$(UI_DIST): $(UI_DEPS) $(UI_SRC)
	@$(STAGE) step "admin UI: vite build (into $(UI_DIR)/web/dist, which bin/troupe embeds)" \
		sh -c 'cd $(UI_DIR) && npm run build'

## admin-ui-test: the UI's unit tests (Vitest, jsdom)
admin-ui-test: $(UI_DEPS)
	cd $(UI_DIR) && npm test

## admin-ui-e2e: the UI end to end in headless Chromium against `troupe demo` (the admin pages,
## then the users' console); screenshots of every page go to .cache/artifacts/admin-ui
admin-ui-e2e: build chromium $(UI_DEPS)
	cd $(UI_DIR) && TROUPE_BIN=$(CURDIR)/bin/troupe ARTIFACTS=$(CACHE)/artifacts/admin-ui CHROMIUM=$(CHROMIUM) node e2e/run.mjs
	cd $(UI_DIR) && TROUPE_BIN=$(CURDIR)/bin/troupe ARTIFACTS=$(CACHE)/artifacts/admin-ui CHROMIUM=$(CHROMIUM) node e2e/console.mjs

## admin-ui-e2e-console: the users' console alone in Chromium (part of admin-ui-e2e)
admin-ui-e2e-console: build chromium $(UI_DEPS)
	cd $(UI_DIR) && TROUPE_BIN=$(CURDIR)/bin/troupe ARTIFACTS=$(CACHE)/artifacts/admin-ui CHROMIUM=$(CHROMIUM) node e2e/console.mjs

## admin-ui-10k: time the Accounts page over a 10,000-account demo pool (docs/benchmarks.md)
admin-ui-10k: build chromium $(UI_DEPS)
	cd $(UI_DIR) && TROUPE_BIN=$(CURDIR)/bin/troupe CHROMIUM=$(CHROMIUM) node e2e/pool10k.mjs

## chromium: install Debian's chromium when $(CHROMIUM) is missing (needs root and apt-get)
chromium:
	@test -x $(CHROMIUM) || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
