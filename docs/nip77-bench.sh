#!/usr/bin/env bash
# NIP-77 benchmark: an archive missing 1% re-synced over NIP-77 vs
# re-crawled over REQ, and a first sync of an empty archive vs a crawl.
# Each measurement gets a fresh loopback test relay process (its BytesSent
# is what the archiver received) and runs under /usr/bin/time -v (seconds,
# peak RSS of the archiver). Results: docs/NIP77.md.
#
#   N=200000 bash docs/nip77-bench.sh        # events (default 200000)
set -euo pipefail
N=${N:-200000}
W=${W:-$(mktemp -d /tmp/nip77-bench.XXXXXX)}
cd "$(dirname "$0")/.."
go build -o "$W/archiver" ./cmd/archiver
go build -o "$W/testrelay" ./cmd/testrelay
PORT_FULL=${PORT_FULL:-17771}
PORT_99=${PORT_99:-17772}

relay_pid=
start_relay() { # port, args...
	local port=$1; shift
	rm -f "$W/relay.err" # the wait below must not see the last relay's lines
	"$W/testrelay" -listen "127.0.0.1:$port" "$@" >"$W/relay.out" 2>"$W/relay.err" &
	relay_pid=$!
	until grep -q serving "$W/relay.err" 2>/dev/null; do
		kill -0 "$relay_pid" 2>/dev/null || { cat "$W/relay.err"; exit 1; }
		sleep 0.2
	done
}
stop_relay() { # prints the relay's bytes sent
	kill -INT "$relay_pid"; wait "$relay_pid" || true
	sed -n 's/.*"BytesSent":\([0-9]*\).*/\1/p' "$W/relay.err"
}
measure() { # name, archiver args...
	local name=$1; shift
	/usr/bin/time -v "$W/archiver" "$@" >"$W/$name.out" 2>"$W/$name.err" || true
	local secs rss
	secs=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$W/$name.err")
	rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$W/$name.err")
	echo "$name|$secs|$rss"
}

echo "fixture of $N events in $W" >&2
start_relay $PORT_FULL -events "$N" -seed 77 -fixture-cache "$W/cache" -truth "$W/truth.jsonl"
stop_relay >/dev/null
awk 'NR % 100 != 0' "$W/truth.jsonl" >"$W/99.jsonl"
echo "missing: $(( $(wc -l <"$W/truth.jsonl") - $(wc -l <"$W/99.jsonl") )) of $(wc -l <"$W/truth.jsonl")" >&2

# The archive missing 1%: a crawl of a relay holding the other 99%.
start_relay $PORT_99 -jsonl "$W/99.jsonl"
"$W/archiver" crawl --no-verify --data "$W/a99" "ws://127.0.0.1:$PORT_99" 2>"$W/a99.err"
stop_relay >/dev/null

FULL=(-jsonl "$W/truth.jsonl" -nip77)
URL="ws://127.0.0.1:$PORT_FULL"
run_case() { # name, archive to copy or "", archiver verb
	local name=$1 from=$2 verb=$3
	rm -rf "$W/$name.data"
	[ -n "$from" ] && cp -r "$from" "$W/$name.data"
	start_relay $PORT_FULL "${FULL[@]}"
	local m
	m=$(measure "$name" "$verb" --no-verify --data "$W/$name.data" "$URL")
	echo "$m|$(stop_relay)|$(grep -m1 "^$URL" "$W/$name.err" | cut -c1-160)"
}
echo "case|wall clock|peak RSS KiB|bytes received|archiver says"
run_case resync-nip77 "$W/a99" sync
run_case recrawl-req "$W/a99" crawl
run_case first-sync-nip77 "" sync
run_case first-crawl-req "" crawl
