#!/bin/sh
# build-controlplane.sh — build the lab's Kubernetes control plane once.
#
# Puts etcd, etcdctl, kube-apiserver, kube-controller-manager,
# kube-scheduler and kwok (and, with --kubectl, kubectl) into
#
#   ${MCP_PATCH_CACHE:-$HOME/.cache/mcp-patch}/controlplane/<key>/bin
#
# etcd and etcdctl are Debian's (etcd-server and etcd-client of Debian 13
# "trixie", fetched with apt-get download from a trixie source kept in a
# private apt directory, so nothing of trixie is installed or pinned on the
# machine; version and checksums below), built from the module pinned under
# lab/controlplane/etcd only when the package cannot be had. The Kubernetes
# programs and kwok are one multi-call binary, kube-controlplane, built from
# lab/controlplane/kube with the build flags of a plain `go build` (so the
# packages it shares with mcp-patch come from the Go build cache when
# mcp-patch was built first). kwok's stage files (node and pod lifecycle) go
# to <key>/stages. kubectl (lab/controlplane/kube/kubectl) is left out of
# that binary: only the tests run it, so the demo's first run does not
# compile its packages; --kubectl adds it to a set, building the set first
# when it is not there (the test set-up asks for it; lab/cluster builds it
# the first time a test runs Cluster.Kubectl).
# <key> is a hash of the pinning modules (go.mod, go.sum, *.go) and of
# $recipe below, so a second run with the same pins is instant, and changing
# a pin builds a new set beside the old one. Only the Go module proxy and a
# Debian mirror have to be reachable. A line every 20 s tells how far each
# build is and about how long is left.
#
# Run by hand:   sh scripts/build-controlplane.sh
#                sh scripts/build-controlplane.sh --cached-only
#                  (print the bin directory if it is built, else exit 3)
#                sh scripts/build-controlplane.sh --prefetch
#                  (fetch etcd and the Kubernetes modules, compile nothing:
#                  scripts/demo.sh runs it while mcp-patch compiles)
#                sh scripts/build-controlplane.sh --kubectl
#                  (the set and kubectl in it)
# Progress goes to stderr; the last line on stdout is the bin directory.
# MCP_PATCH_ETCD=source builds etcd from source even when the package can
# be had; MCP_PATCH_DEBIAN_MIRROR (default http://deb.debian.org/debian)
# is where the package comes from.
#
# Everything runs inside main, which sh parses whole before running it, so
# editing this file while a build runs cannot derail that build.
set -eu

# Bump recipe when a change here changes what gets built (flags, binaries,
# stages); editing comments or messages must not cost a rebuild.
recipe=4

# etcd from Debian 13: the packages, their version and the sha256 of what
# lands in the cache (the .debs are verified by apt against trixie's signed
# Release, the binaries here). Debian's etcd 3.5.16 is built with go1.24
# and needs libc6 >= 2.34 (Debian 12 has 2.36).
etcd_deb_suite=trixie
etcd_deb_version=3.5.16-4
etcd_deb_sha256_etcd=c054131938a55a4a9826c1d566348d5695fe0e4d9ce655dfe936ab18a84e2983
etcd_deb_sha256_etcdctl=d40ab46650d11e94cec58d1f4c5dfbaed621e7893e9b086529b56e2d3c032d69

say() { printf 'build-controlplane: %s\n' "$*" >&2; }
# Builds run the compiler and linker with GOGC=400 (MCP_PATCH_BUILD_GOGC
# overrides; 100 is Go's default): their garbage collector runs a quarter
# as often, for about 13% less CPU on a cold build and some 30% more memory
# per compile (a cold `go build ./intent`: 45-49 CPU-s instead of 51-58,
# peak 380 MB instead of 290 MB). It changes nothing in what is built, nor
# the build cache's keys.
build_gogc=${MCP_PATCH_BUILD_GOGC:-400}

main() {
	cached_only=false prefetch=false with_kubectl=false
	case ${1:-} in
	--cached-only) cached_only=true ;;
	--prefetch) prefetch=true ;;
	--kubectl) with_kubectl=true ;;
	"") ;;
	*)
		printf 'usage: %s [--cached-only | --prefetch | --kubectl]\n' "$0" >&2
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
	# Debian's etcd, verified, kept apart from the keyed sets (it does not
	# depend on the pins).
	debian_etcd=$cache/etcd-debian-$etcd_deb_version

	if set_ready "$dest"; then
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
	if set_ready "$dest"; then
		say "cached (built meanwhile): $dest"
		printf '%s\n' "$dest/bin"
		exit 0
	fi
	# Under the lock, a leftover build directory is from a killed build.
	if [ -n "${MCP_PATCH_CONTROLPLANE_LOCKED:-}" ]; then
		for stale in "$cache"/.build-* "$cache"/.etcd-debian-* "$dest"/bin/.kubectl-* "$dest"/.kubectl-*.log; do
			[ -e "$stale" ] || continue
			say "removing the remains of an interrupted build: $stale"
			rm -rf "$stale"
		done
	fi

	# -buildvcs=false: etcd's main package sits in this repository, and the
	# binary must not change with the state of the working tree. No
	# -trimpath: a package compiled with other flags than mcp-patch's own
	# `go build` and `go test` would be compiled twice.
	export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"

	if $prefetch; then
		start=$(date +%s)
		etcd_from=source
		[ "${MCP_PATCH_ETCD:-}" = source ] || ! fetch_debian_etcd || etcd_from=debian
		# go list fetches the modules the build needs, and compiles nothing.
		(cd "$src/kube" && go list -deps . >/dev/null) || {
			say "prefetch: fetching the Kubernetes modules failed"
			exit 1
		}
		[ "$etcd_from" = debian ] || (cd "$src/etcd" && go list -deps . >/dev/null) || true
		say "prefetched in $(($(date +%s) - start))s: etcd ($etcd_from) and the Kubernetes modules"
		exit 0
	fi

	# Versions come from the pins, so bumping a pin restamps the binaries.
	kube_version=$(cd "$src/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	kube_minor=$(printf '%s\n' "$kube_version" | cut -d. -f2)
	kwok_version=$(cd "$src/kube" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
	ld_kube="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld_kube="$ld_kube -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor -X $pkg.gitTreeState=clean"
	done

	# The set is there and only kubectl is missing.
	if built "$dest"; then
		build_kubectl
		printf '%s\n' "$dest/bin"
		exit 0
	fi

	work=$cache/.build-$key-$$
	trap 'rm -rf "$work"' EXIT INT TERM
	rm -rf "$work"
	mkdir -p "$work/bin" "$work/stages"

	start=$(date +%s)
	say "key $key; building into $dest"
	timings=$cache/timings
	etcd_pid=""
	if [ "${MCP_PATCH_ETCD:-}" = source ]; then
		say "MCP_PATCH_ETCD=source: etcd is built from the pinned module"
		etcd_from=source
	elif fetch_debian_etcd; then
		etcd_from=debian
	else
		say "etcd $etcd_deb_version could not be had from Debian $etcd_deb_suite (above); building it from the pinned module instead (minutes more)"
		etcd_from=source
	fi
	if [ "$etcd_from" = debian ]; then
		cp "$debian_etcd/etcd" "$debian_etcd/etcdctl" "$work/bin/"
		etcd_version="$(etcd_version_of "$work/bin/etcd") (Debian $etcd_deb_suite etcd-server/etcd-client $etcd_deb_version)"
		builds="kube-controlplane"
	else
		etcd_version="$(cd "$src/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3) (built from source)"
		builds="etcd kube-controlplane"
	fi
	say "etcd $etcd_version; Kubernetes $kube_version with kwok $kwok_version (kube-apiserver, kube-controller-manager, kube-scheduler, kwok)"

	# bin/kube-controlplane is one multi-call binary (the Kubernetes programs
	# link to it), linked once; it picks its program by the name it was
	# started under. A source-built etcd (etcdctl links to it) builds beside it.
	if [ "$etcd_from" = source ]; then
		build_one etcd "$src/etcd" "-s -w" &
		etcd_pid=$!
	fi
	build_one kube-controlplane "$src/kube" "$ld_kube" &
	kube_pid=$!
	watch_builds
	etcd_rc=0
	[ -z "$etcd_pid" ] || wait "$etcd_pid" || etcd_rc=$?
	kube_rc=0
	wait "$kube_pid" || kube_rc=$?
	for name in $builds; do
		case $name in etcd) rc=$etcd_rc ;; *) rc=$kube_rc ;; esac
		if [ "$rc" -ne 0 ]; then
			say "$name failed (exit $rc); the last lines of $work/$name.log:"
			grep -v -e '^go: downloading' -e '^[a-zA-Z0-9._~/-]*$' "$work/$name.log" | tail -n 40 >&2 || true
			exit 1
		fi
	done
	[ "$etcd_from" = debian ] || ln -s etcd "$work/bin/etcdctl"
	for name in kube-apiserver kube-controller-manager kube-scheduler kwok; do
		ln -s kube-controlplane "$work/bin/$name"
	done
	# Figures for the next build's estimate: seconds and packages compiled.
	{
		for name in $builds; do
			printf '%s %s %s\n' "$name" "$(cat "$work/$name.seconds")" "$(cat "$work/$name.count")"
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
		for name in $builds; do
			printf 'binary %s seconds %s packages %s of %s (%s from the build cache)\n' "$name" "$(cat "$work/$name.seconds")" \
				"$(cat "$work/$name.count")" "$(cat "$work/$name.total")" "$(cat "$work/$name.cached")"
		done
	} >"$work/BUILD-INFO"
	rm -f "$work"/*.seconds "$work"/*.count "$work"/*.total "$work"/*.stale "$work"/*.cached "$work"/*.log
	touch "$work/COMPLETE"

	rm -rf "$dest"
	mv "$work" "$dest"
	trap - EXIT INT TERM
	for name in $builds; do
		say "$(grep "^binary $name " "$dest/BUILD-INFO" | awk '{printf "%s: %ss, %s packages compiled, %s of %s from the build cache", $2, $4, $6, $9, $8}' | tr -d '(')"
	done
	say "built in $(($(date +%s) - start))s: $(du -shL "$dest/bin" | cut -f1) in $dest/bin"
	$with_kubectl && build_kubectl
	printf '%s\n' "$dest/bin"
}

# build_kubectl adds kubectl to the built set $dest: its own binary, from
# lab/controlplane/kube/kubectl, with the control plane's flags (most of its
# packages come from the build cache when the set was built on this
# machine), linked under a temporary name and moved into place.
build_kubectl() {
	[ -x "$dest/bin/kubectl" ] && return 0
	t0=$(date +%s)
	say "kubectl: building it into $dest/bin (only the tests run it)"
	tmp_bin=$dest/bin/.kubectl-$$
	log=$dest/.kubectl-$$.log
	rc=0
	(cd "$src/kube/kubectl" && GOGC=$build_gogc go build -v -ldflags="$ld_kube" -o "$tmp_bin" .) >"$log" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		say "kubectl failed (exit $rc); the last lines of its build log:"
		grep -v -e '^go: downloading' -e '^[a-zA-Z0-9._~/-]*$' "$log" | tail -n 40 >&2 || true
		rm -f "$tmp_bin" "$log"
		exit 1
	fi
	n=$(grep -c '^[a-zA-Z0-9._~/-]*$' "$log") || true
	rm -f "$log"
	mv "$tmp_bin" "$dest/bin/kubectl"
	say "kubectl: ${n:-0} packages compiled, built in $(($(date +%s) - t0))s"
}

# fetch_debian_etcd leaves Debian's etcd and etcdctl, verified, in
# $debian_etcd (at once when they are there already). apt-get runs on a
# private directory (its own sources, lists, cache and preferences under
# $cache), so the machine's apt configuration, its package lists and its
# installed packages stay as they were. Fails, saying why, when apt-get or
# dpkg-deb is missing, the mirror cannot be reached, the version is gone
# from the suite or a checksum differs.
fetch_debian_etcd() {
	if [ -x "$debian_etcd/etcd" ] && [ -x "$debian_etcd/etcdctl" ] && verify_etcd "$debian_etcd"; then
		return 0
	fi
	for tool in apt-get dpkg-deb sha256sum; do
		command -v "$tool" >/dev/null 2>&1 || {
			say "etcd from Debian: $tool is not on PATH"
			return 1
		}
	done
	t0=$(date +%s)
	apt=$cache/.etcd-debian-$$
	rm -rf "$apt"
	mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/etc/apt.conf.d" \
		"$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$apt/x"
	: >"$apt/etc/sources.list"
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -f "$keyring" ] || {
		say "etcd from Debian: no Debian archive keyring at $keyring"
		rm -rf "$apt"
		return 1
	}
	printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
		"${MCP_PATCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}" "$etcd_deb_suite" "$keyring" >"$apt/etc/sources.list.d/$etcd_deb_suite.sources"
	set -- -q -o Dir::Etc="$apt/etc" -o Dir::Etc::sourcelist="$apt/etc/sources.list" \
		-o Dir::Etc::sourceparts="$apt/etc/sources.list.d" -o Dir::Etc::preferences="$apt/etc/preferences" \
		-o Dir::Etc::preferencesparts="$apt/etc/preferences.d" -o Dir::Etc::parts="$apt/etc/apt.conf.d" \
		-o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache" -o Dir::State::status=/dev/null \
		-o APT::Sandbox::User=root -o Acquire::Languages=none \
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false \
		-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false \
		-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false \
		-o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false
	say "etcd from Debian $etcd_deb_suite: apt-get download etcd-server and etcd-client $etcd_deb_version (private apt directory $apt)"
	if ! apt-get "$@" update >"$apt/apt.log" 2>&1 ||
		! (cd "$apt/debs" && apt-get "$@" download "etcd-server=$etcd_deb_version" "etcd-client=$etcd_deb_version") >>"$apt/apt.log" 2>&1; then
		say "etcd from Debian: apt-get failed; its last lines:"
		tail -n 8 "$apt/apt.log" >&2
		rm -rf "$apt"
		return 1
	fi
	for deb in "$apt"/debs/*.deb; do
		dpkg-deb -x "$deb" "$apt/x" || {
			say "etcd from Debian: dpkg-deb -x $deb failed"
			rm -rf "$apt"
			return 1
		}
	done
	mkdir -p "$apt/bin"
	cp "$apt/x/usr/bin/etcd" "$apt/x/usr/bin/etcdctl" "$apt/bin/" 2>/dev/null || {
		say "etcd from Debian: the packages hold no usr/bin/etcd and usr/bin/etcdctl"
		rm -rf "$apt"
		return 1
	}
	if ! verify_etcd "$apt/bin"; then
		rm -rf "$apt"
		return 1
	fi
	rm -rf "$debian_etcd"
	mv "$apt/bin" "$debian_etcd"
	rm -rf "$apt"
	say "etcd from Debian: $(etcd_version_of "$debian_etcd/etcd") in $(($(date +%s) - t0))s, checksums as recorded"
}

# verify_etcd DIR checks DIR/etcd and DIR/etcdctl against the recorded
# checksums, and that etcd runs here and says it is the recorded version.
verify_etcd() {
	for name in etcd etcdctl; do
		case $name in
		etcd) want=$etcd_deb_sha256_etcd ;;
		*) want=$etcd_deb_sha256_etcdctl ;;
		esac
		got=$(sha256sum "$1/$name" | cut -d' ' -f1)
		if [ "$got" != "$want" ]; then
			say "etcd from Debian: $1/$name has sha256 $got, the recipe records $want"
			return 1
		fi
	done
	v=$(etcd_version_of "$1/etcd")
	if [ "$v" != "${etcd_deb_version%%-*}" ]; then
		say "etcd from Debian: $1/etcd --version says '${v:-nothing}' (does it run on this machine's libc?), want ${etcd_deb_version%%-*}"
		return 1
	fi
}

# etcd_version_of BIN prints the version `BIN --version` reports.
etcd_version_of() {
	"$1" --version 2>/dev/null | awk '/^etcd Version:/ { print $3 }'
}

# build_one NAME MODULE_DIR LDFLAGS builds the module's main package into
# $work/bin/NAME, logging to $work/NAME.log (go build -v names each package
# as it compiles it), and leaves beside the log its wall seconds, the
# packages it depends on (.total), those the Go build cache holds already
# (.cached) and those to compile (.stale), for watch_builds and the summary.
build_one() {
	name=$1 dir=$2 ldflags=$3
	t0=$(date +%s)
	# go list fetches the modules the build needs (and names them in the
	# log); .Stale says which packages the build cache lacks.
	(cd "$dir" && go list -deps -f '{{.Stale}}' . 2>>"$work/$name.log") >"$work/$name.stale.list" || true
	wc -l <"$work/$name.stale.list" | tr -d ' ' >"$work/$name.total"
	grep -c '^true$' "$work/$name.stale.list" >"$work/$name.stale" || true
	grep -c '^false$' "$work/$name.stale.list" >"$work/$name.cached" || true
	rm -f "$work/$name.stale.list"
	rc=0
	(cd "$dir" && GOGC=$build_gogc go build -v -ldflags="$ldflags" -o "$work/bin/$name" .) >>"$work/$name.log" 2>&1 || rc=$?
	printf '%s\n' "$(($(date +%s) - t0))" >"$work/$name.seconds"
	compiled "$name" >"$work/$name.count"
	return "$rc"
}

# compiled NAME counts the packages go build -v has named so far.
compiled() {
	n=$(grep -c '^[a-zA-Z0-9._~/-]*$' "$work/$1.log" 2>/dev/null) || true
	printf '%s\n' "${n:-0}"
}

# watch_builds prints a line every 20 s while any of $builds runs: per
# binary the packages compiled so far of those the build cache lacks, time
# elapsed, and an estimate of the time left (from the last build's seconds
# per package when one is recorded, else from this build's pace so far).
watch_builds() {
	last=0
	while :; do
		# A build is over when it has written its seconds or its process is
		# gone (killed before it could).
		running=false
		for name in $builds; do
			case $name in etcd) pid=$etcd_pid ;; *) pid=$kube_pid ;; esac
			[ -f "$work/$name.seconds" ] && continue
			kill -0 "$pid" 2>/dev/null && running=true
		done
		$running || return 0
		now=$(date +%s)
		if [ $((now - last)) -ge 20 ]; then
			last=$now
			line=""
			for name in $builds; do
				if [ -f "$work/$name.seconds" ]; then
					part="$name done in $(cat "$work/$name.seconds")s"
				else
					todo=$(cat "$work/$name.stale" 2>/dev/null) || true
					done_n=$(compiled "$name")
					part="$name $done_n/${todo:-?} packages to compile"
					if grep -q '^go: downloading' "$work/$name.log" 2>/dev/null; then
						part="$part, $(grep -c '^go: downloading' "$work/$name.log") modules downloaded"
					fi
					left=$(estimate "$name" "$done_n" "${todo:-0}" $((now - start)))
					[ -n "$left" ] && part="$part, about $(fmt_secs "$left") left"
				fi
				line="${line:+$line; }$part"
			done
			say "$(fmt_secs $((now - start))) elapsed: $line"
		fi
		sleep 2
	done
}

# estimate NAME DONE TODO ELAPSED prints the seconds NAME has left: the
# packages still to compile at the last build's seconds per package (the
# link included), else at this build's pace once 30 are done; nothing when
# neither is known yet.
estimate() {
	awk -v n="$1" -v done="$2" -v todo="$3" -v el="$4" '
		$1 == n && $3 > 0 { per = $2 / $3 }
		END {
			if (todo <= 0) exit
			if (per == 0 && done >= 30) per = el / done
			if (per == 0) exit
			left = (todo - done) * per
			if (left < 0) left = 0
			printf "%d\n", left
		}' "$timings" 2>/dev/null || true
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

# set_ready DIR: DIR is built and, with --kubectl, holds kubectl too.
set_ready() {
	built "$1" && { ! $with_kubectl || [ -x "$1/bin/kubectl" ]; }
}

main "$@"
exit
