#!/bin/sh
# measure-first-run.sh [COMMIT...] — a newcomer's first `scripts/demo.sh`,
# measured: for each commit (default HEAD), one after the other on this
# machine, a fresh clone of this repository at that commit runs
# scripts/demo.sh under /usr/bin/time -v with its own empty Go module and
# build caches, mcp-patch cache (control plane, etcd package) and XDG
# cache, so nothing built by an earlier run or by this checkout is reused.
# Prints per commit: wall, user and system CPU-seconds, peak RSS, the
# demo's own phase line (first product output, mcp-patch's build, set-up,
# lab and round) and the control plane's BUILD-INFO (packages compiled and
# from the build cache); the demo's whole output is kept in
# $MCP_PATCH_MEASURE_DIR/<commit>.log (default /tmp/mcp-patch-first-run).
#
# Compare only runs made side by side on one machine in one session: CPU
# seconds between machines and days vary by more than a lever. Each run
# downloads the Go modules and the etcd package again (the Go module proxy
# and a Debian mirror must be reachable) and needs about 6 GB of disk while
# it runs; the caches are removed after it.
#
#   scripts/measure-first-run.sh d49c288 HEAD
set -eu
cd "$(dirname "$0")/.."
repo=$(pwd)
out=${MCP_PATCH_MEASURE_DIR:-/tmp/mcp-patch-first-run}
mkdir -p "$out"
[ -x /usr/bin/time ] || { echo "measure-first-run: /usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
[ $# -gt 0 ] || set -- HEAD

summary=""
for commit in "$@"; do
	sha=$(git rev-parse --short=12 "$commit^{commit}")
	work=$(mktemp -d /tmp/mcp-patch-first-run.XXXXXX)
	git clone --quiet --no-hardlinks "$repo" "$work/src"
	git -C "$work/src" checkout --quiet --detach "$sha"
	mkdir -p "$work/gomod" "$work/gocache" "$work/cache" "$work/xdg"
	log="$out/$sha.log"
	printf 'measure-first-run: %s (%s) from a fresh clone with empty caches; output in %s\n' "$sha" "$commit" "$log" >&2
	rc=0
	(
		cd "$work/src"
		GOMODCACHE="$work/gomod" GOCACHE="$work/gocache" MCP_PATCH_CACHE="$work/cache" XDG_CACHE_HOME="$work/xdg" \
			/usr/bin/time -v -o "$work/time.txt" sh scripts/demo.sh
	) >"$log" 2>&1 || rc=$?
	field() { sed -n "s/^[[:space:]]*$1: //p" "$work/time.txt"; }
	wall=$(field 'Elapsed (wall clock) time (h:mm:ss or m:ss)')
	user=$(field 'User time (seconds)')
	sys=$(field 'System time (seconds)')
	rss=$(field 'Maximum resident set size (kbytes)')
	cpu=$(echo "$user $sys" | awk '{printf "%.0f", $1 + $2}')
	info=$(cat "$work"/cache/controlplane/*/BUILD-INFO 2>/dev/null | grep '^binary' | tr '\n' ';' || true)
	phases=$(grep '^demo: first product output' "$log" | tail -1 || true)
	line="$sha ($commit): exit $rc; wall $wall; CPU ${cpu} s (user $user + system $sys); peak RSS $((${rss:-0} / 1024)) MB
  $phases
  control plane: ${info:-no BUILD-INFO}"
	printf '%s\n' "$line" >&2
	summary="$summary$line
"
	GOMODCACHE="$work/gomod" go clean -modcache 2>/dev/null || chmod -R u+w "$work/gomod"
	rm -rf "$work"
done
printf '\nfirst runs, one after the other on %s (%s cores), load before: %s\n%s' "$(hostname)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$summary"
