#!/bin/sh
# install-interop.sh installs what `go test ./interop/` needs on a fresh
# Debian machine: a C/C++ toolchain and python3 (better-sqlite3 compiles
# from source with node-gyp) and the relay's npm packages, exactly as
# interop/nostr-relay/package-lock.json pins them; and the client's
# (nostr-tools, pure JavaScript) as interop/nostr-client/package-lock.json
# pins them.
#
# Idempotent: apt-get runs only if cc, make or python3 is missing, and
# `npm ci` only if node_modules does not match the lockfile and the running
# node (set FORCE=1 to reinstall anyway). Run it from anywhere, as root (CI)
# or as a user with sudo. Needs Node >= 20 with its headers (nodesource and
# the official tarballs ship them under <prefix>/include/node): node-gyp
# uses them instead of downloading headers, so the build works offline.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/interop/nostr-relay"

say() { printf 'install-interop: %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }

missing=
for tool in cc c++ make python3; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
	say "missing:$missing; installing build-essential python3"
	sudo=
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install build-essential python3 by hand"
		sudo=sudo
	fi
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends build-essential python3
fi

command -v node >/dev/null 2>&1 || die "node not found: install Node.js >= 20"
command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js >= 20 with npm"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || die "node $(node --version) is too old: the relay needs Node.js >= 20"

# The client that interop/serve_test.go runs against `archiver serve`:
# nothing to compile, so no headers and no install scripts.
client="$root/interop/nostr-client"
client_stamp="$(cksum <"$client/package-lock.json") node=$(node --version)"
if [ "${FORCE:-}" = 1 ] || [ "$(cat "$client/node_modules/.install-interop" 2>/dev/null)" != "$client_stamp" ]; then
	say "npm ci in $client"
	(cd "$client" && npm ci --no-audit --no-fund --ignore-scripts)
	printf '%s\n' "$client_stamp" >"$client/node_modules/.install-interop"
fi

# The headers of the running node, wherever it is installed (this
# overrides the /usr of interop/nostr-relay/.npmrc).
prefix=$(node -p 'require("path").resolve(process.execPath, "..", "..")')
[ -f "$prefix/include/node/node.h" ] ||
	die "no node headers under $prefix/include/node: node-gyp would have to download them"
export npm_config_nodedir="$prefix"

# What node_modules was built from: the lockfile and the node ABI.
stamp_file="$dir/node_modules/.install-interop"
stamp="$(cksum <"$dir/package-lock.json") abi=$(node -p process.versions.modules) node=$prefix"
loads() {
	(cd "$dir" && node -e 'new (require("better-sqlite3"))(":memory:").close()') >/dev/null 2>&1
}
if [ "${FORCE:-}" != 1 ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ] && loads; then
	say "node_modules is up to date"
	exit 0
fi

# A fresh clone on a machine that built these modules before (CI clones
# main anew each run) reuses that build instead of compiling it again.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/archiver-interop/relay-$(printf '%s' "$stamp" | cksum | cut -d' ' -f1).tar"
if [ "${FORCE:-}" != 1 ] && [ -f "$cache" ]; then
	rm -rf "$dir/node_modules"
	if tar -xf "$cache" -C "$dir" && [ "$(cat "$stamp_file" 2>/dev/null)" = "$stamp" ] && loads; then
		say "node_modules restored from $cache"
		exit 0
	fi
	say "the cached build in $cache does not load; installing"
fi

say "npm ci in $dir (compiles better-sqlite3: a few minutes)"
(cd "$dir" && npm ci --no-audit --no-fund)
loads || die "better-sqlite3 does not load after npm ci (were install scripts skipped?)"
printf '%s\n' "$stamp" >"$stamp_file"
mkdir -p "$(dirname "$cache")" && tar -cf "$cache.tmp" -C "$dir" node_modules && mv "$cache.tmp" "$cache" ||
	say "could not keep the build in $cache (not needed)"
say "done"
