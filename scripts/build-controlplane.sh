#!/bin/sh
# build-controlplane.sh — build the lab's Kubernetes control plane once.
#
# Builds etcd, etcdctl, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and kwok from the Go modules pinned under
# lab/controlplane/ as two multi-call binaries (etcd, which etcdctl links to,
# and kube-controlplane, which the Kubernetes programs and kwok link to), into
#
#   ${MCP_PATCH_CACHE:-$HOME/.cache/mcp-patch}/controlplane/<key>/bin
#
# and copies kwok's stage files (node and pod lifecycle) to <key>/stages.
# <key> is a hash of the pinning modules (go.mod, go.sum, *.go) and of
# $recipe below, so a second run with the same pins is instant, and changing
# a pin builds a new set beside the old one. Only the Go module proxy has to
# be reachable. A line every 20 s tells how far each build is.
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
recipe=2

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
	# Only a build needs Go (and the module proxy); a cached set does not.
	command -v go >/dev/null 2>&1 || {
		say "go is not on PATH: it is needed once, to build $dest"
		exit 1
	}

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
	say "etcd $etcd_version (etcd, etcdctl) and Kubernetes $kube_version with kwok $kwok_version (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok), side by side"

	# Two multi-call binaries, each linked once: bin/etcd (etcdctl links to
	# it) and bin/kube-controlplane (the Kubernetes programs link to it); each
	# picks its program by the name it was started under. The two modules are
	# built at the same time, so one's link overlaps the other's compiles and
	# module downloads overlap compiling.
	timings=$cache/timings
	build_one etcd "$src/etcd" "-s -w" &
	etcd_pid=$!
	build_one kube-controlplane "$src/kube" "$ld_kube" &
	kube_pid=$!
	watch_builds "$etcd_pid" "$kube_pid"
	etcd_rc=0
	wait "$etcd_pid" || etcd_rc=$?
	kube_rc=0
	wait "$kube_pid" || kube_rc=$?
	for name in etcd kube-controlplane; do
		case $name in etcd) rc=$etcd_rc ;; *) rc=$kube_rc ;; esac
		if [ "$rc" -ne 0 ]; then
			say "$name failed (exit $rc); the last lines of $work/$name.log:"
			grep -v -e '^go: downloading' -e '^[a-zA-Z0-9._~/-]*$' "$work/$name.log" | tail -n 40 >&2 || true
			exit 1
		fi
	done
	ln -s etcd "$work/bin/etcdctl"
	for name in kube-apiserver kube-controller-manager kube-scheduler kubectl kwok; do
		ln -s kube-controlplane "$work/bin/$name"
	done
	# Figures for the summary and the next build's estimate.
	{
		for name in etcd kube-controlplane; do
			printf '%s %s\n' "$name" "$(cat "$work/$name.seconds")"
		done
	} >"$timings.new" && mv "$timings.new" "$timings"

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
		for name in etcd kube-controlplane; do
			printf 'binary %s seconds %s packages %s\n' "$name" "$(cat "$work/$name.seconds")" "$(cat "$work/$name.count")"
		done
	} >"$work/BUILD-INFO"
	rm -f "$work"/*.seconds "$work"/*.count "$work"/*.total "$work"/*.log
	touch "$work/COMPLETE"

	rm -rf "$dest"
	mv "$work" "$dest"
	trap - EXIT INT TERM
	for name in etcd kube-controlplane; do
		say "$(grep "^binary $name " "$dest/BUILD-INFO" | awk '{printf "%s: %ss, %s packages compiled", $2, $4, $6}')"
	done
	say "built in $(($(date +%s) - start))s: $(du -shL "$dest/bin" | cut -f1) in $dest/bin"
	printf '%s\n' "$dest/bin"
}

# build_one NAME MODULE_DIR LDFLAGS builds the module's main package into
# $work/bin/NAME, logging to $work/NAME.log (go build -v names each package
# as it compiles it), and leaves its wall seconds and package
# counts beside the log for watch_builds and the summary.
build_one() {
	name=$1 dir=$2 ldflags=$3
	t0=$(date +%s)
	# go list fetches the modules the build needs (and names them in the log).
	(cd "$dir" && go list -deps . 2>>"$work/$name.log" | wc -l) >"$work/$name.total" || true
	rc=0
	(cd "$dir" && go build -v -ldflags="$ldflags" -o "$work/bin/$name" .) >>"$work/$name.log" 2>&1 || rc=$?
	printf '%s\n' "$(($(date +%s) - t0))" >"$work/$name.seconds"
	compiled "$name" >"$work/$name.count"
	return "$rc"
}

# compiled NAME counts the packages go build -v has named so far.
compiled() {
	n=$(grep -c '^[a-zA-Z0-9._~/-]*$' "$work/$1.log" 2>/dev/null) || true
	printf '%s\n' "${n:-0}"
}

# watch_builds ETCD_PID KUBE_PID prints a line every 20 s while any of the builds runs:
# per binary the packages compiled so far (of the total it depends on,
# most of which need compiling on a first build), time elapsed, and the
# previous build's time when one is recorded.
watch_builds() {
	last=0
	while :; do
		# A build is over when it has written its seconds or its process is
		# gone (killed before it could).
		running=false
		for pid in "$@"; do
			case $pid in
			"$etcd_pid") name=etcd ;;
			*) name=kube-controlplane ;;
			esac
			[ -f "$work/$name.seconds" ] && continue
			kill -0 "$pid" 2>/dev/null && running=true
		done
		$running || return 0
		now=$(date +%s)
		if [ $((now - last)) -ge 20 ]; then
			last=$now
			line=""
			for name in etcd kube-controlplane; do
				if [ -f "$work/$name.seconds" ]; then
					part="$name done in $(cat "$work/$name.seconds")s"
				else
					total=$(cat "$work/$name.total" 2>/dev/null) || true
					part="$name $(compiled "$name")/${total:-?} packages"
					if grep -q '^go: downloading' "$work/$name.log" 2>/dev/null; then
						part="$part, $(grep -c '^go: downloading' "$work/$name.log") modules downloaded"
					fi
					prev=$(awk -v n="$name" '$1 == n { print $2 }' "$timings" 2>/dev/null || true)
					[ -n "$prev" ] && part="$part (last build ${prev}s)"
				fi
				line="${line:+$line; }$part"
			done
			say "$(fmt_secs $((now - start))) elapsed: $line"
		fi
		sleep 2
	done
}

# fmt_secs N prints N seconds as XmYYs.
fmt_secs() {
	printf '%dm%02ds' $(($1 / 60)) $(($1 % 60))
}

# built reports whether dir holds a finished build (COMPLETE is written last,
# and the directory is moved into place whole).
built() {
	[ -x "$1/bin/kube-apiserver" ] && [ -f "$1/COMPLETE" ]
}

main "$@"
exit
