#!/bin/sh
# check-systemd.sh checks systemd/archiver.service with systemd-analyze:
#   - `verify` must pass without a warning about the unit (syntax,
#     directives, executables exist);
#   - `security --offline=yes` must score an exposure of at most 4.0.
#
# `verify` insists that ExecStart's binary exists, and the unit names
# /usr/local/bin/archiver. Rather than install anything there, this builds
# ./cmd/archiver into a temporary directory (or takes ARCHIVER_BIN=path)
# and verifies a temporary copy of the unit whose ExecStart path, and only
# that, points at it. Neither command needs a running systemd.
#
# Idempotent; run from anywhere, as root (CI) or with sudo available if
# systemd-analyze has to be installed (Debian's `systemd` package).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
unit="$root/systemd/archiver.service"
max_exposure=4.0
export PATH="$PATH:/usr/local/go/bin"

say() { printf 'check-systemd: %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }

if ! command -v systemd-analyze >/dev/null 2>&1; then
	say "systemd-analyze missing; installing Debian's systemd package"
	sudo=
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || die "not root and no sudo: apt-get install systemd by hand"
		sudo=sudo
	fi
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y systemd
fi
systemd-analyze --version | head -n 1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

bin=${ARCHIVER_BIN:-}
if [ -z "$bin" ]; then
	say "building ./cmd/archiver"
	(cd "$root" && go build -o "$tmp/archiver" ./cmd/archiver)
	bin="$tmp/archiver"
fi
[ -x "$bin" ] || die "$bin is not executable"
case $bin in /*) ;; *) bin="$(pwd)/$bin" ;; esac

installed=/usr/local/bin/archiver
[ "$(grep -c "^ExecStart=$installed " "$unit")" -eq 1 ] ||
	die "expected one 'ExecStart=$installed ...' line in $unit; update this script"
# The copy keeps the unit's name: verify derives the unit name from it.
sed "s#^ExecStart=$installed #ExecStart=$bin #" "$unit" >"$tmp/archiver.service"

say "systemd-analyze verify (ExecStart binary: $bin)"
# verify exits 0 on what it only warns about (an unknown directive, a
# value it cannot parse: systemd ignores both), so any line about our unit
# fails the check too. Lines about other units on this host do not.
if ! out=$(systemd-analyze verify "$tmp/archiver.service" 2>&1); then
	printf '%s\n' "$out"
	die "verify failed"
fi
[ -z "$out" ] || printf '%s\n' "$out"
case $out in *archiver.service*) die "verify warned about the unit" ;; esac

say "systemd-analyze security --offline=yes $unit"
out=$(systemd-analyze security --offline=yes "$unit") || die "security failed"
printf '%s\n' "$out" | grep -E '^✗|Overall exposure' || true
score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || die "no exposure score in the output"
awk -v s="$score" -v m="$max_exposure" 'BEGIN { exit !(s <= m) }' ||
	die "exposure $score is above $max_exposure"
say "ok: verify passed, exposure $score (max $max_exposure)"
