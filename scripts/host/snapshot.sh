#!/bin/sh
# snapshot.sh — keep what we need to put this node back, before install.
#
# Runbook: run as root on the node before the install step. It writes, under
# $BACKUP_DIR/$ROUND/:
#   etc-kubernetes.tar.gz  the whole of /etc/kubernetes (certs, manifests)
#   host-config.tar.gz     netplan, /etc/default/grub*, sysctl, modprobe,
#                          modules-load and apt sources/preferences/config
#   etcd-snapshot.db       on control-plane nodes (ROLE=control-plane): an
#                          etcd snapshot, with etcdctl on the host or inside
#                          the etcd static pod through crictl, using
#                          kubeadm's healthcheck-client certificate
#   SHA256SUMS             written last: its presence marks a complete set
# Running it again for the same round keeps a complete, verified set as it
# is (it never overwrites a good pre-install snapshot); an incomplete one is
# taken again.
#
# Environment (default in brackets):
#   ROUND           round id (required)
#   ROLE            control-plane | worker [worker]
#   BACKUP_DIR      [/var/backups/mcp-patch]
#   ETC_DIR         [/etc]                    host config is read below it
#   ETC_KUBERNETES  [$ETC_DIR/kubernetes]
#   ETCD_ENDPOINT   [https://127.0.0.1:2379]
#   ETCD_DATA_DIR   [/var/lib/etcd]           host path of the etcd pod's data dir
#
# Output: one JSON object (README.md, "snapshot").
# Exit status: 0 ok, 1 error, 2 bad input.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=snapshot

# ---- common: begin (copied from lib/common.sh by go generate; edit it there) ----
# Stdout carries exactly one JSON object: it is moved to fd 3 and everything
# else (tool chatter, errors) goes to stderr.
exec 3>&1 1>&2
NL='
'
STAGE='starting'
FIELDS=''
EMITTED=0
TMPD=''

# json_awk MODE: read stdin and print JSON. MODE "value": one string, lines
# joined by \n; "text": one string, every line ends with \n (a missing final
# newline is added); "lines": an array of the non-empty lines.
json_awk() {
	LC_ALL=C awk -v mode="$1" '
	function esc(s,    out, p, c) {
		out = ""
		while ((p = match(s, /[\\"\001-\037]/)) > 0) {
			c = substr(s, p, 1)
			if (c == "\\") c = "\\\\"
			else if (c == "\"") c = "\\\""
			else c = ctl[c]
			out = out substr(s, 1, p - 1) c
			s = substr(s, p + 1)
		}
		return out s
	}
	BEGIN {
		for (i = 1; i < 32; i++) ctl[sprintf("%c", i)] = sprintf("\\u%04x", i)
		ctl["\t"] = "\\t"; ctl["\r"] = "\\r"
		printf "%s", (mode == "lines" ? "[" : "\"")
		n = 0
	}
	mode == "lines" { if ($0 != "") printf "%s\"%s\"", (n++ ? "," : ""), esc($0); next }
	mode == "text" { printf "%s\\n", esc($0); next }
	{ printf "%s%s", (n++ ? "\\n" : ""), esc($0) }
	END { printf "%s", (mode == "lines" ? "]" : "\"") }'
}
# A string without quotes, backslashes or control characters is already
# JSON: it is printed as it is, without starting awk.
jstr() {
	case $1 in
	*[\\\"]* | *[[:cntrl:]]*) printf '%s\n' "$1" | json_awk value ;;
	*) printf '"%s"' "$1" ;;
	esac
}
jtext() { if [ -z "$1" ]; then printf '""'; else printf '%s\n' "$1" | json_awk text; fi; }
jlines() { if [ -z "$1" ]; then printf '[]'; else printf '%s\n' "$1" | json_awk lines; fi; }

# field NAME JSON: add a field to the result object.
field() { FIELDS="$FIELDS,\"$1\":$2"; }
field_str() { field "$1" "$(jstr "$2")"; }
field_text() { field "$1" "$(jtext "$2")"; }
field_lines() { field "$1" "$(jlines "$2")"; }
field_int() {
	case $2 in
	'' | - | *[!0-9-]* | ?*-*) field "$1" null ;;
	*) field "$1" "$2" ;;
	esac
}
field_bool() { if [ "$2" = 1 ] || [ "$2" = true ]; then field "$1" true; else field "$1" false; fi; }

# emit STATUS EXIT REASON: print the one result object and exit.
emit() {
	EMITTED=1
	printf '{"step":"%s","status":"%s","reason":%s%s}\n' "$STEP" "$1" "$(jstr "$3")" "$FIELDS" >&3
	exit "$2"
}
ok() { emit ok 0 "$1"; }
fail() { emit error 1 "$1"; }
bad_input() { emit bad_input 2 "$1"; }
refuse() { emit refused 3 "$1"; }
check_failed() { emit check_failed 4 "$1"; }

on_exit() {
	rc=$?
	if [ -n "$TMPD" ]; then rm -rf "$TMPD"; fi
	if [ "$EMITTED" = 0 ]; then
		EMITTED=1
		printf '{"step":"%s","status":"error","reason":%s%s}\n' "$STEP" \
			"$(jstr "stopped unexpectedly while $STAGE (exit $rc)")" "$FIELDS" >&3
		exit 1
	fi
}
trap on_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

make_tmpdir() { TMPD=$(mktemp -d); }
yes_if() { if "$@"; then echo 1; else echo 0; fi; }
true_if() { if "$@"; then echo true; else echo false; fi; }

# check NAME VALUE ERE WHAT: refuse bad input before anything runs.
check() {
	case $2 in *"$NL"*) bad_input "$1 must be a single line" ;; esac
	printf '%s\n' "$2" | grep -Eqx -- "$3" || bad_input "$1='$2' is not $4"
}
check_path() {
	case $2 in
	/*) case $2 in *[[:cntrl:]]*) ;; *) return 0 ;; esac ;;
	esac
	case $2 in *"$NL"*) bad_input "$1 must be a single line" ;; esac
	bad_input "$1='$2' is not an absolute path"
}
check_round() { check "$1" "$2" '[A-Za-z0-9][A-Za-z0-9._-]{0,63}' 'a round id'; }
check_kernel() {
	check "$1" "$2" '[0-9]+\.[0-9]+(\.[0-9]+)?([.+~_-][A-Za-z0-9]+){0,12}' 'a kernel release'
	[ "${#2}" -le 100 ] || bad_input "$1 is longer than 100 characters"
}
# ---- common: end ----

: "${ROUND:=}"
: "${ROLE:=worker}"
: "${BACKUP_DIR:=/var/backups/mcp-patch}"
: "${ETC_DIR:=/etc}"
: "${ETC_KUBERNETES:=$ETC_DIR/kubernetes}"
: "${ETCD_ENDPOINT:=https://127.0.0.1:2379}"
: "${ETCD_DATA_DIR:=/var/lib/etcd}"

STAGE='checking input'
check_round ROUND "$ROUND"
check ROLE "$ROLE" 'control-plane|worker' 'control-plane or worker'
for v in BACKUP_DIR ETC_DIR ETC_KUBERNETES ETCD_DATA_DIR; do
	eval "check_path $v \"\$$v\""
done
check ETCD_ENDPOINT "$ETCD_ENDPOINT" 'https?://[][A-Za-z0-9.:-]+' 'an etcd URL'

dir="$BACKUP_DIR/$ROUND"
field_str backup_dir "$dir"
field_str role "$ROLE"

# files_json: the SHA256SUMS of $dir as a JSON array with sizes.
files_json() {
	out=''
	while read -r sum name; do
		size=$(stat -c %s "$dir/$name")
		out="$out${out:+,}{\"name\":$(jstr "$name"),\"path\":$(jstr "$dir/$name"),\"size\":$size,\"sha256\":$(jstr "$sum")}"
	done <"$dir/SHA256SUMS"
	printf '[%s]' "$out"
}

STAGE="checking for an earlier snapshot in $dir"
if [ -f "$dir/SHA256SUMS" ]; then
	if (cd "$dir" && sha256sum --quiet -c SHA256SUMS); then
		field_bool reused 1
		field files "$(files_json)"
		ok "a complete snapshot for round $ROUND is already there; kept as it is"
	fi
	fail "the snapshot in $dir does not match its SHA256SUMS; move it aside and run again"
fi
field_bool reused 0

STAGE="creating $dir"
mkdir -p "$dir"
chmod 700 "$dir"
rm -f "$dir"/*.part

STAGE="archiving $ETC_KUBERNETES"
names=''
if [ -d "$ETC_KUBERNETES" ]; then
	tar -C "$(dirname "$ETC_KUBERNETES")" -czf "$dir/etc-kubernetes.tar.gz.part" -- "$(basename "$ETC_KUBERNETES")"
	mv "$dir/etc-kubernetes.tar.gz.part" "$dir/etc-kubernetes.tar.gz"
	names="etc-kubernetes.tar.gz"
else
	field_str etc_kubernetes_missing "$ETC_KUBERNETES"
fi

STAGE='archiving host configuration'
set --
for p in netplan default/grub default/grub.d sysctl.conf sysctl.d modprobe.d modules-load.d \
	apt/sources.list apt/sources.list.d apt/preferences apt/preferences.d apt/apt.conf.d; do
	if [ -e "$ETC_DIR/$p" ]; then set -- "$@" "$p"; fi
done
field_lines host_config_paths "$(printf '%s\n' "$@")"
if [ "$#" -gt 0 ]; then
	tar -C "$ETC_DIR" -czf "$dir/host-config.tar.gz.part" -- "$@"
	mv "$dir/host-config.tar.gz.part" "$dir/host-config.tar.gz"
	names="$names${names:+ }host-config.tar.gz"
fi

etcd_method=none
if [ "$ROLE" = control-plane ]; then
	STAGE='taking an etcd snapshot'
	pki="$ETC_KUBERNETES/pki/etcd"
	for f in ca.crt healthcheck-client.crt healthcheck-client.key; do
		[ -r "$pki/$f" ] || fail "cannot read $pki/$f, needed for the etcd snapshot"
	done
	if command -v etcdctl >/dev/null 2>&1; then
		etcd_method=etcdctl
		ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINT" --cacert="$pki/ca.crt" \
			--cert="$pki/healthcheck-client.crt" --key="$pki/healthcheck-client.key" \
			snapshot save "$dir/etcd-snapshot.db.part" >/dev/null
		mv "$dir/etcd-snapshot.db.part" "$dir/etcd-snapshot.db"
	elif command -v crictl >/dev/null 2>&1; then
		etcd_method=crictl
		cid=$(crictl ps --name '^etcd$' --state Running -q | head -n 1)
		[ -n "$cid" ] || fail 'no running etcd container found with crictl'
		inpod="$ETCD_DATA_DIR/mcp-patch-snapshot-$ROUND.db"
		rm -f "$inpod"
		crictl exec "$cid" etcdctl --endpoints="$ETCD_ENDPOINT" --cacert="$pki/ca.crt" \
			--cert="$pki/healthcheck-client.crt" --key="$pki/healthcheck-client.key" \
			snapshot save "$inpod" >/dev/null
		mv "$inpod" "$dir/etcd-snapshot.db"
	else
		fail 'ROLE=control-plane but neither etcdctl nor crictl is installed; cannot take the etcd snapshot'
	fi
	names="$names etcd-snapshot.db"
fi
field_str etcd_method "$etcd_method"

STAGE='recording checksums'
[ -n "$names" ] || fail "nothing to back up: neither $ETC_KUBERNETES nor any host configuration exists"
# shellcheck disable=SC2086 # names are fixed file names without spaces
(cd "$dir" && sha256sum $names >SHA256SUMS.part)
mv "$dir/SHA256SUMS.part" "$dir/SHA256SUMS"
field files "$(files_json)"
ok 'done'
}
