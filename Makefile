# The test command of README.md. CI (.ci/run) runs exactly `make test`.
GO ?= go

.PHONY: test build lint deps bench

# deps installs what the tests need beyond Go (the npm relay of the interop test).
deps:
	bash .ci/install-interop.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# atexit_sleep_ms=0: the race runtime otherwise sleeps a second as each
# test binary exits (the tests' own archiver processes set it too).
test: deps lint
	GORACE="atexit_sleep_ms=0 $(GORACE)" $(GO) test -race -count=1 -timeout 30m ./...

build:
	$(GO) build -o bin/archiver ./cmd/archiver
	$(GO) build -o bin/testrelay ./cmd/testrelay

# bench measures the crawl against a loopback relay of 1M events and prints
# a markdown table (the first run signs the fixture and caches it):
# make bench BENCHFLAGS="-events 100000 -out bench.md"
bench:
	$(GO) run ./cmd/crawlbench $(BENCHFLAGS)
