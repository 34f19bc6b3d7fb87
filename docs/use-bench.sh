#!/usr/bin/env bash
# Benchmarks of using an archive (issue 14): `archiver import` events/s,
# index bytes per event, the raw scan rate of the store, REQ latency
# p50/p99 against `archiver serve` by id, author, kind, tag and time range,
# and a bulk download from serve. The events are the test relay's signed
# fixture (signed once, then cached). Results: docs/USE.md.
#
#   N=1000000 bash docs/use-bench.sh        # events (default 1000000)
set -euo pipefail
N=${N:-1000000}
CACHE=${CACHE:-$HOME/.cache/archiver-bench}
W=${W:-$(mktemp -d /tmp/use-bench.XXXXXX)}
PORT=${PORT:-17901}
cd "$(dirname "$0")/.."
go build -o "$W/archiver" ./cmd/archiver
go build -o "$W/testrelay" ./cmd/testrelay
go build -o "$W/usebench" ./cmd/usebench

# The fixture's valid events, one canonical line each (-truth), from a
# test relay stopped as soon as it serves.
echo "fixture of $N events in $W (cache $CACHE)" >&2
"$W/testrelay" -listen "127.0.0.1:$PORT" -events "$N" -seed 14 -fixture-cache "$CACHE" \
	-truth "$W/events.jsonl" >/dev/null 2>"$W/relay.err" &
relay=$!
until grep -q serving "$W/relay.err" 2>/dev/null; do
	kill -0 "$relay" 2>/dev/null || { cat "$W/relay.err"; exit 1; }
	sleep 0.5
done
kill -INT "$relay"; wait "$relay" || true

"$W/usebench" -archiver "$W/archiver" -jsonl "$W/events.jsonl" -work "$W" \
	-listen "127.0.0.1:$((PORT + 1))" -out "$W/report.md"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
