#!/bin/sh
# build-controlplane.sh — build the lab's Kubernetes control plane once.
#
# Builds etcd, etcdctl, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and kwok from the Go modules pinned under
# lab/controlplane/, into
#
#   ${MCP_PATCH_CACHE:-$HOME/.cache/mcp-patch}/controlplane/<key>/bin
#
# and copies kwok's stage files (node and pod lifecycle) to <key>/stages.
# <key> is a hash of the pinning modules (go.mod, go.sum, *.go) and of
# $recipe below, so a second run with the same pins is instant, and changing
# a pin builds a new set beside the old one. Only the Go module proxy has to
# be reachable. The first build takes 15-35 minutes on 2 busy cores.
#
# Run by hand:   sh scripts/build-controlplane.sh
#                sh scripts/build-controlplane.sh --cached-only
#                  (print the bin directory if it is built, else exit 3)
# Progress goes to stderr; the last line on stdout is the bin directory.
#
# Everything runs inside main, which sh parses whole before running it, so
# editing this file while a build runs cannot derail that build.
set -eu

# Bump recipe when a change here changes what gets built (flags, binaries,
# stages); editing comments or messages must not cost a rebuild.
recipe=1

say() { printf 'build-controlplane: %s\n' "$*" >&2; }

main() {
	cached_only=false
	case ${1:-} in
	--cached-only) cached_only=true ;;
	"") ;;
	*)
		printf 'usage: %s [--cached-only]\n' "$0" >&2
		exit 2
		;;
	esac

	repo=$(cd "$(dirname "$0")/.." && pwd)
	src=$repo/lab/controlplane
	self=$repo/scripts/build-controlplane.sh
	cache=${MCP_PATCH_CACHE:-$HOME/.cache/mcp-patch}/controlplane

	command -v go >/dev/null 2>&1 || {
		say "go is not on PATH"
		exit 1
	}
	if [ ! -f "$src/kube/go.mod" ] || [ ! -f "$src/etcd/go.mod" ]; then
		say "missing pinning modules under $src"
		exit 1
	fi

	# The key covers everything that decides what gets built.
	key=$(
		cd "$src"
		{
			find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs sha256sum
			printf 'recipe %s\n' "$recipe"
		} | sha256sum | cut -c1-16
	)
	dest=$cache/$key

	if built "$dest"; then
		say "cached: $dest"
		printf '%s\n' "$dest/bin"
		exit 0
	fi
	if $cached_only; then
		say "not built yet: $dest"
		exit 3
	fi

	mkdir -p "$cache"
	# One build at a time per cache: tests in several packages may ask at
	# once, and two parallel Kubernetes builds only slow each other down.
	if command -v flock >/dev/null 2>&1 && [ -z "${MCP_PATCH_CONTROLPLANE_LOCKED:-}" ]; then
		say "waiting for the build lock $cache/.lock"
		MCP_PATCH_CONTROLPLANE_LOCKED=1
		export MCP_PATCH_CONTROLPLANE_LOCKED
		exec flock "$cache/.lock" sh "$self" "$@"
	fi
	if built "$dest"; then
		say "cached (built meanwhile): $dest"
		printf '%s\n' "$dest/bin"
		exit 0
	fi
	# Under the lock, a leftover build directory is from a killed build.
	if [ -n "${MCP_PATCH_CONTROLPLANE_LOCKED:-}" ]; then
		for stale in "$cache"/.build-*; do
			[ -e "$stale" ] || continue
			say "removing the remains of an interrupted build: $stale"
			rm -rf "$stale"
		done
	fi

	work=$cache/.build-$key-$$
	trap 'rm -rf "$work"' EXIT INT TERM
	rm -rf "$work"
	mkdir -p "$work/bin" "$work/stages"

	# -buildvcs=false: etcd's main package sits in this repository, and the
	# binary must not change with the state of the working tree.
	export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath -buildvcs=false"
	# Versions come from the pins, so bumping a pin restamps the binaries.
	kube_version=$(cd "$src/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	kube_minor=$(printf '%s\n' "$kube_version" | cut -d. -f2)
	etcd_version=$(cd "$src/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
	kwok_version=$(cd "$src/kube" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
	ld_kube="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld_kube="$ld_kube -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor -X $pkg.gitTreeState=clean"
	done

	start=$(date +%s)
	say "key $key; building into $dest"

	say "etcd, etcdctl ($etcd_version)"
	(cd "$src/etcd" && go build -ldflags="-s -w" -o "$work/bin/etcd" . &&
		go build -ldflags="-s -w" -o "$work/bin/etcdctl" go.etcd.io/etcd/etcdctl/v3)
	say "etcd done after $(($(date +%s) - start))s"

	say "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl ($kube_version), kwok ($kwok_version)"
	(cd "$src/kube" && go build -ldflags="$ld_kube" -o "$work/bin/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kubectl \
		sigs.k8s.io/kwok/cmd/kwok)
	say "kubernetes done after $(($(date +%s) - start))s"

	# kwok's own stage files: nodes become Ready and keep a heartbeat, pods
	# bound to kwok nodes become Running (and go away when deleted).
	kwok_dir=$(cd "$src/kube" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
	for stage in node/fast node/heartbeat pod/fast; do
		for f in "$kwok_dir/kustomize/stage/$stage"/*.yaml; do
			case $(basename "$f") in kustomization.yaml) continue ;; esac
			cp "$f" "$work/stages/$(basename "$f")"
		done
	done
	chmod -R u+w "$work/stages"

	{
		printf 'key %s\nrecipe %s\n' "$key" "$recipe"
		printf 'built %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
		printf 'go %s\n' "$(go env GOVERSION)"
		printf 'kubernetes %s\netcd %s\nkwok %s\n' "$kube_version" "$etcd_version" "$kwok_version"
		printf 'seconds %s\n' "$(($(date +%s) - start))"
	} >"$work/BUILD-INFO"
	touch "$work/COMPLETE"

	rm -rf "$dest"
	mv "$work" "$dest"
	trap - EXIT INT TERM
	say "built in $(($(date +%s) - start))s: $(du -sh "$dest/bin" | cut -f1) in $dest/bin"
	printf '%s\n' "$dest/bin"
}

# built reports whether dir holds a finished build (COMPLETE is written last,
# and the directory is moved into place whole).
built() {
	[ -x "$1/bin/kube-apiserver" ] && [ -f "$1/COMPLETE" ]
}

main "$@"
exit
