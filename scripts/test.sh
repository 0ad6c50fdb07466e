#!/bin/sh
# The test command: sets up a fresh machine (scripts/setup.sh), then vets and
# runs every Go test, including those against real sshd, grub tools, apt-get,
# git, ssh-keygen, etcd and kube-apiserver. Extra arguments go to `go test`.
set -eu
cd "$(dirname "$0")/.."

# Each phase's time, printed as one block when the command ends (passed or
# not). phase_took NAME START: NAME took the seconds since START. The real-VM
# phase, when skipped or not reached, says so.
phases=""
phase_took() {
	phases="$phases
$(printf '  %-26s %6ss' "$1" $(($(date +%s) - $2)))"
}
print_phases() {
	case "$phases" in *real-VM*) ;; *) phases="$phases
$(printf '  %-26s %7s' "real-VM (lab/vm)" "not run")" ;; esac
	echo "test: phase times$phases"
	printf '  %-26s %6ss\n' "in all" $(($(date +%s) - all_start))
}
all_start=$(date +%s)

# A fresh clone of what is committed: the README's two commands are the
# first lines of its first code block, they exist there, .ci/run runs the
# README's test command, and the binary builds from the clone alone (no
# file that only this working tree has).
echo "test: fresh-clone check"
start=$(date +%s)
clone=$(mktemp -d)
trap 'rm -rf "$clone"' EXIT
git clone -q --no-local . "$clone/repo"
readme_cmds=$(awk '/^```sh$/ { inblock = 1; next } inblock && /^```$/ { exit } inblock { print $1 }' "$clone/repo/README.md" | head -n 2 | tr '\n' ' ')
if [ "$readme_cmds" != "scripts/demo.sh scripts/test.sh " ]; then
	echo "test: the README's first commands are \"$readme_cmds\", want scripts/demo.sh and scripts/test.sh" >&2
	exit 1
fi
for f in scripts/demo.sh scripts/test.sh .ci/run; do
	[ -x "$clone/repo/$f" ] || {
		echo "test: $f is missing or not executable in a fresh clone" >&2
		exit 1
	}
done
if ! grep -qx 'exec scripts/test.sh' "$clone/repo/.ci/run"; then
	echo "test: .ci/run does not run the README's test command (exec scripts/test.sh)" >&2
	exit 1
fi
(cd "$clone/repo" && go build -o "$clone/" ./cmd/mcp-patch ./cmd/mcp-patch-lab && "$clone/mcp-patch" --help >/dev/null && "$clone/mcp-patch" lab --help >/dev/null)
rm -rf "$clone"
trap - EXIT
echo "test: fresh-clone check took $(($(date +%s) - start))s"
phase_took "fresh-clone check" "$start"
trap print_phases EXIT

start=$(date +%s)
MCP_PATCH_SETUP_VM=later scripts/setup.sh
phase_took "setup (control plane)" "$start"
# The lab VM image (debootstrap, two kernels, a first boot under QEMU; 6-15
# minutes when not cached) is needed only by the real-VM phase, so it builds
# in the background beside vet and go test, and that phase waits for it.
vm_build_pid="" vm_build_log="" vm_build_start=""
if [ "${MCP_PATCH_VM:-1}" != 0 ] && ! scripts/build-vm-image.sh --cached-only >/dev/null 2>&1; then
	echo "test: lab VM image not cached: building it in the background, beside go vet and go test"
	as_root=""
	[ "$(id -u)" -eq 0 ] || as_root="sudo"
	vm_build_log=$(mktemp)
	vm_build_start=$(date +%s)
	$as_root scripts/build-vm-image.sh >"$vm_build_log" 2>&1 &
	vm_build_pid=$!
fi
echo "test: go vet"
start=$(date +%s)
go vet ./...
phase_took "go vet" "$start"
# The lab hosts' emulated commands (a host step starts a dozen) run from a
# lab-host build, which starts in ~15 ms where the test binaries take ~70 ms;
# cli's installed-binary test still has the lab's binary play them itself.
mkdir -p bin
go build -o bin/mcp-patch-lab-host ./lab/cmd/lab-host
MCP_PATCH_LAB_HOST=$(pwd)/bin/mcp-patch-lab-host
export MCP_PATCH_LAB_HOST
# The window state machine and the MCP surface run from their own unit tests
# (fakes, no control plane) with statement coverage of both together, in a
# second go test beside the first, which runs every other package: the lab
# package's labs leave a core mostly idle.
echo "test: go test (the real-VM tests run in their own phase, below; round/window and tools with coverage beside the rest)"
start=$(date +%s)
mod=$(go list -m)
others=$(go list ./... | grep -v -x -e "$mod/tools" -e "$mod/round/window" -e "$mod/round/window/.*")
profile=$(mktemp)
covlog=$(mktemp)
go test -count=1 -timeout 30m -skip '^TestRealVM' -coverpkg=./round/window/...,./tools/... -coverprofile="$profile" "$@" ./round/window/... ./tools/ >"$covlog" 2>&1 &
cov_pid=$!
rc=0
# shellcheck disable=SC2086
go test -count=1 -timeout 80m -skip '^TestRealVM' "$@" $others || rc=$?
covrc=0
wait "$cov_pid" || covrc=$?
cat "$covlog"
rm -f "$covlog"
if [ "$covrc" -eq 0 ]; then
	go tool cover -func="$profile" | tail -n 1 | sed 's/^total:[[:space:]]*(statements)[[:space:]]*/test: round\/window + tools statement coverage: /'
fi
rm -f "$profile"
phase_took "go test ./... (coverage beside)" "$start"
if [ "$rc" -ne 0 ] || [ "$covrc" -ne 0 ]; then
	echo "test: go test FAILED (every package but round/window and tools: exit $rc; round/window and tools with coverage: exit $covrc)" >&2
	exit 1
fi
# The real-VM phase, alone, so no other test package starves the boots:
# lab/vm's TestRealVM (the host steps on the image booted by SeaBIOS) beside
# lab's TestRealVMCanaryRound (the demo round on a lab whose canary GPU
# server is the image booted by OVMF: `mcp-patch lab up --vm-canary`), each
# VM on its own core. Each boot's and phase's time is printed; a failure
# prints the log's tail (with the serial log's). It runs by default (README,
# "real VM"); MCP_PATCH_VM=0 skips it for a quick local run, and the skip is
# printed.
if [ "${MCP_PATCH_VM:-1}" = 0 ]; then
	echo "test: real-VM phase SKIPPED (MCP_PATCH_VM=0): the trial boot, fallback and promote on real GRUB (BIOS and UEFI) did not run"
else
	if [ -n "$vm_build_pid" ]; then
		echo "test: waiting for the lab VM image build"
		if ! wait "$vm_build_pid"; then
			tail -n 100 "$vm_build_log"
			echo "test: lab VM image build FAILED (whole log: $vm_build_log)" >&2
			phase_took "VM image (FAILED)" "$vm_build_start"
			exit 1
		fi
		rm -f "$vm_build_log"
		phase_took "VM image (beside go test)" "$vm_build_start"
	fi
	echo "test: real-VM phase (BIOS: host steps; UEFI: the lab's round with the VM canary)"
	start=$(date +%s)
	vmlog=$(mktemp)
	if go test -v -count=1 -timeout 50m -run '^TestRealVM' ./lab/vm ./lab >"$vmlog" 2>&1; then
		grep -E '\.go:[0-9]+: (boot [0-9]+ \(|install.*: took|whole test|image .* ready after|lab with the VM canary up|round closed in|canary steps|boot after the round)|--- (PASS|FAIL)' "$vmlog" | sed 's/^[[:space:]]*/test:   /'
		rm -f "$vmlog"
	else
		tail -n 200 "$vmlog"
		echo "test: real-VM phase FAILED (whole log: $vmlog)" >&2
		phase_took "real-VM (FAILED)" "$start"
		exit 1
	fi
	echo "test: real-VM phase took $(($(date +%s) - start))s (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
	phase_took "real-VM (BIOS and UEFI)" "$start"
fi
# The example alert rules, checked as `promtool check rules` does: with
# Prometheus' own rule-file and PromQL parsers (model/rulefmt), in a module
# of their own so Prometheus' requirements stay out of go.mod. (Building
# promtool itself compiles all of Prometheus' service discovery.)
echo "test: alert rules (examples/alerts) with Prometheus' rule parser"
start=$(date +%s)
(cd test/promrules && go vet ./... && go test -count=1 ./...)
echo "test: alert rules phase took $(( $(date +%s) - start ))s"
phase_took "alert rules (promrules)" "$start"
