#!/bin/sh
# The main job on the embedded lab: sets up a fresh machine (scripts/setup.sh
# --demo: only what the demo needs), builds mcp-patch beside the control
# plane, starts an emulated GPU fleet on a real control plane and runs a whole
# patch round from plan to close. Extra arguments go to `mcp-patch lab demo`
# (see `mcp-patch lab demo --help`). Prints the phase times at the end.
set -eu
cd "$(dirname "$0")/.."
t0=$(date +%s)
mkdir -p bin
# mcp-patch compiles while setup installs packages and builds the control
# plane; its log is shown only if it fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# mcp-patch-lab-host plays the lab hosts' emulated commands (lab.FindHostBinary
# finds it beside mcp-patch): it starts in a fifth of mcp-patch's time.
(
	rc=0
	go build -o bin/mcp-patch ./cmd/mcp-patch >"$log" 2>&1 || rc=$?
	[ "$rc" -ne 0 ] || go build -o bin/mcp-patch-lab-host ./lab/cmd/lab-host >>"$log" 2>&1 || rc=$?
	echo "$rc" >"$log.rc"
	echo "demo: mcp-patch built in $(($(date +%s) - t0))s"
) &
build_pid=$!
scripts/setup.sh --demo
t_setup=$(($(date +%s) - t0))
wait "$build_pid" || true
rc=$(cat "$log.rc" 2>/dev/null || echo 1)
rm -f "$log.rc"
if [ "$rc" != 0 ]; then
	cat "$log" >&2
	echo "demo: building mcp-patch failed" >&2
	exit 1
fi
t1=$(date +%s)
bin/mcp-patch lab demo "$@"
echo "demo: set-up and builds ${t_setup}s, lab and round $(($(date +%s) - t1))s, $(($(date +%s) - t0))s in all"
