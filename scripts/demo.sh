#!/bin/sh
# The main job on the embedded lab: sets up a fresh machine (scripts/setup.sh
# --demo: only what the demo needs), builds mcp-patch, then the control
# plane, showing the product while that builds. On a first run the
# product shows within a minute or two: lab-preview (206 packages, no
# Kubernetes, git or MCP code) starts the lab's hosts behind real SSH and
# prints the host-side preflight's results (inspect_node's inspection,
# simulate_upgrade's simulation, through the same host steps and table
# printer); once mcp-patch is built, `mcp-patch lab preview` runs the same
# tools through the CLI twins with their verdicts while the control plane
# compiles. Once the control plane is up it starts the emulated GPU fleets
# of staging and production, each on a control plane of its own, and runs
# staging's round, then production's, from plan to close (--one-environment:
# production's alone). Other arguments go to
# `mcp-patch lab demo` (see `mcp-patch lab demo --help`), which prints a
# line per step as it ends and the round's summary. Prints the phase times
# at the end. apt's, dpkg's and go's output and the previews' full answers
# go to files under ~/.cache/mcp-patch/demo, each named on screen.
#
# Order, for a first run on two cores: lab-preview compiles first (the
# standard library and x/crypto/ssh it compiles are reused by mcp-patch from
# the build cache); etcd (Debian's package) and the Kubernetes modules
# download while mcp-patch compiles; mcp-patch compiles alone, so the control
# plane, which shares most of its packages, finds them in the Go build cache
# instead of compiling them a second time beside it.
set -eu
cd "$(dirname "$0")/.."
# Builds run the compiler and linker with GOGC=400 (MCP_PATCH_BUILD_GOGC
# overrides; 100 is Go's default): their garbage collector runs a quarter
# as often, for about 13% less CPU on a cold build and some 30% more memory
# per compile (a cold `go build ./intent`: 45-49 CPU-s instead of 51-58,
# peak 380 MB instead of 290 MB). It changes nothing in what is built, nor
# the build cache's keys.
build_gogc=${MCP_PATCH_BUILD_GOGC:-400}
# The demo's binaries are linked without the symbol table and DWARF (-s -w,
# as the control plane is): a shorter link, and a panic still prints its
# stack with files and lines. Debugging builds: go build ./cmd/mcp-patch.
ld="-s -w"
t0=$(date +%s)
mkdir -p bin
say() { printf 'demo: %s\n' "$*" >&2; }
# What a person need not read as it scrolls (apt's, dpkg's and go's own
# output, each command's full answer in the preview) goes to files here,
# each named on screen; they stay after the demo.
logs=${MCP_PATCH_DEMO_LOGS:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-patch/demo}
mkdir -p "$logs"
# secs N prints N seconds as XmYYs.
secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
tmp=$(mktemp -d)
cp_pid="" pf_pid="" build_pid=""
cleanup() {
	for pid in $cp_pid $pf_pid $build_pid; do
		kill "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cached=false
if scripts/build-controlplane.sh --cached-only >/dev/null 2>&1; then
	cached=true
	say "control plane: cached; mcp-patch builds (seconds when its build cache is warm), then the lab and the round (about 2-4 minutes)"
else
	say "first run: the lab's hosts and their host-side preflight show in about 1-3 minutes (a small build first),"
	say "then mcp-patch builds (about 2-10 minutes on 2 cores from empty caches) and the control plane (about 4-20 more), then the round"
	scripts/build-controlplane.sh --prefetch 2>"$tmp/prefetch.log" &
	pf_pid=$!
fi

# mcp-patch compiles while setup installs packages; a line every 20 s tells
# how far it is. mcp-patch-lab is the lab (mcp-patch links none of it:
# `mcp-patch lab` runs mcp-patch-lab beside it); mcp-patch-lab-host plays
# the lab hosts' emulated commands (lab.FindHostBinary finds it beside them).
pkgs="./cmd/mcp-patch ./cmd/mcp-patch-lab ./lab/cmd/lab-host"
(
	rc=0
	if ! $cached; then
		# The quick preview first: its packages are a subset of mcp-patch's.
		GOGC=$build_gogc go build -ldflags="$ld" -o bin/mcp-patch-lab-preview ./lab/cmd/lab-preview >"$tmp/preview-build.log" 2>&1 || rc=$?
		echo "$rc" >"$tmp/preview.rc"
		rc=0
	fi
	# shellcheck disable=SC2086
	todo=$(go list -deps -f '{{.Stale}}' $pkgs 2>>"$tmp/build.log" | grep -c '^true$') || true
	echo "${todo:-0}" >"$tmp/build.todo"
	date +%s >"$tmp/build.start"
	GOGC=$build_gogc go build -v -ldflags="$ld" -o bin/ ./cmd/mcp-patch ./cmd/mcp-patch-lab >>"$tmp/build.log" 2>&1 || rc=$?
	[ "$rc" -ne 0 ] || GOGC=$build_gogc go build -v -ldflags="$ld" -o bin/mcp-patch-lab-host ./lab/cmd/lab-host >>"$tmp/build.log" 2>&1 || rc=$?
	echo "$rc" >"$tmp/build.rc"
) &
build_pid=$!
# `scripts/demo.sh --vm-canary`: the canary is the lab's real VM, whose
# tools and image (built once, as root: 6-15 minutes) setup.sh adds.
vm_canary=""
for arg in "$@"; do
	[ "$arg" != --vm-canary ] || vm_canary=--vm-canary
done
say "set-up: what the demo needs from apt and the Go module proxy (apt's, dpkg's and go's output: $logs/setup.log)"
# shellcheck disable=SC2086
if ! MCP_PATCH_SETUP_CONTROLPLANE=later scripts/setup.sh --demo $vm_canary >"$logs/setup.log" 2>&1; then
	tail -n 20 "$logs/setup.log" >&2
	say "set-up failed (above: the end of $logs/setup.log)"
	exit 1
fi
tail -n 1 "$logs/setup.log" >&2
t_quick=0
if ! $cached; then
	while [ ! -f "$tmp/preview.rc" ]; do
		sleep 1
	done
	t1=$(date +%s)
	t_first="$((t1 - t0))s"
	if [ "$(cat "$tmp/preview.rc")" = 0 ]; then
		say "first product output at $(secs $((t1 - t0))): the lab's hosts behind real SSH and their host-side preflight (mcp-patch compiles meanwhile)"
		bin/mcp-patch-lab-preview -tables "$logs/preview-answers.txt" || say "the host-side preview failed (above); mcp-patch and the round still follow"
	else
		cat "$tmp/preview-build.log" >&2
		say "building the host-side preview failed (above); mcp-patch and the round still follow"
	fi
	t_quick=$(($(date +%s) - t1))
	say "mcp-patch compiles now, then the control plane; the tools' verdicts follow once mcp-patch is built"
fi
last=0
while [ ! -f "$tmp/build.rc" ]; do
	now=$(date +%s)
	if [ $((now - last)) -ge 20 ]; then
		last=$now
		todo=$(cat "$tmp/build.todo" 2>/dev/null) || true
		n=$(grep -c '^[a-zA-Z0-9._~/-]*$' "$tmp/build.log" 2>/dev/null) || true
		line="mcp-patch: ${n:-0}/${todo:-?} packages compiled, $(secs $((now - t0))) elapsed"
		bs=$(cat "$tmp/build.start" 2>/dev/null) || bs=$t0
		if [ -n "$todo" ] && [ "${n:-0}" -ge 30 ] && [ "$todo" -gt "$n" ]; then
			line="$line, about $(secs $(((now - ${bs:-$t0}) * (todo - n) / n))) left"
		fi
		say "$line"
	fi
	sleep 2
done
wait "$build_pid" || true
build_pid=""
if [ "$(cat "$tmp/build.rc")" != 0 ]; then
	grep -v '^[a-zA-Z0-9._~/-]*$' "$tmp/build.log" >&2 || true
	say "building mcp-patch failed"
	exit 1
fi
t_build=$(($(date +%s) - t0))
say "mcp-patch built in ${t_build}s"

t_preview=0
if ! $cached; then
	if [ -n "$pf_pid" ]; then
		wait "$pf_pid" || true
		pf_pid=""
		cp "$tmp/prefetch.log" "$logs/prefetch.log"
		say "control plane's modules and etcd fetched (their output: $logs/prefetch.log)"
	fi
	say "control plane: building in the background (its progress lines follow, prefixed build-controlplane)"
	scripts/build-controlplane.sh >"$tmp/cp.out" &
	cp_pid=$!
	# What a person sees of the product while the control plane compiles:
	# the hosts behind real SSH and the read-only host-side preflight.
	t1=$(date +%s)
	say "at $(secs $((t1 - t0))): the host-side preflight through the CLI twins, with the tools' verdicts, while the control plane compiles (their answers: $logs/preview-verdicts.txt)"
	if bin/mcp-patch lab preview >"$logs/preview-verdicts.txt" 2>&1; then
		# One line per command: its status and first reason.
		awk '
			/^\$ mcp-patch tool / { tool = $4; node = $6; want = 0; next }
			/^status:/ { status = $2; next }
			/^reasons:/ { want = 1; next }
			want && /^  - / { sub(/^  - /, ""); printf "demo:   %-16s %-14s %-4s %s\n", tool, node, status, substr($0, 1, 100); want = 0 }
		' "$logs/preview-verdicts.txt" >&2
	else
		tail -n 20 "$logs/preview-verdicts.txt" >&2
		say "the preview failed (above: the end of $logs/preview-verdicts.txt); the round still runs once the control plane is built"
	fi
	t_preview=$(($(date +%s) - t1))
	say "the round starts once the control plane is built"
	rc=0
	wait "$cp_pid" || rc=$?
	cp_pid=""
	if [ "$rc" -ne 0 ]; then
		say "building the control plane failed (exit $rc; its lines above)"
		exit 1
	fi
fi
t_setup=$(($(date +%s) - t0))
t1=$(date +%s)
# Staging before production (docs/lab.md): a staging lab on its own control
# plane runs its round first, production plans from its signed proof once
# it has soaked on the lab clock. About 40 s and 1 GB of memory more than
# one lab; --one-environment runs production's round alone.
envs=--environments
for arg in "$@"; do
	shift
	if [ "$arg" = --one-environment ]; then
		envs=""
	else
		set -- "$@" "$arg"
	fi
done
bin/mcp-patch lab demo ${envs:+"$envs"} "$@"
echo "demo: first product output ${t_first:-(warm: none before the round)}; host-side preview ${t_quick}s; mcp-patch built in ${t_build}s; preview ${t_preview}s; set-up and builds ${t_setup}s in all; labs and rounds $(($(date +%s) - t1))s; $(($(date +%s) - t0))s in all"
