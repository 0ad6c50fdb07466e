#!/bin/sh
# autoremove.sh — remove packages nothing needs any more, never a kernel we
# may still need.
#
# Runbook: run as root at round close, after the soak. First
# `apt-get -s autoremove --purge` shows what would go. It refuses when that
# includes the running kernel (any package named for it, e.g.
# linux-image-<ver>, linux-modules-<ver>, linux-headers-<abi>,
# linux-modules-nvidia-*-<ver>), or KEEP_KERNEL (the previous kernel, the
# fallback) while the soak is not over (SOAK_DONE is not 1).
# ACTION=simulate stops there; ACTION=run then runs
# `apt-get -y autoremove --purge`.
#
# Environment (default in brackets):
#   ACTION       simulate | run (required)
#   KEEP_KERNEL  kernel release to keep until the soak is over [none]
#   SOAK_DONE    1 once the soak is over [0]
#   LOCK_TIMEOUT seconds to wait for dpkg's lock before the removal [120]
#   APT_CONFIG, DPKG_ADMINDIR are honoured by apt and dpkg themselves.
#
# Output: one JSON object (README.md, "autoremove").
# Exit status: 0 ok, 1 error, 2 bad input, 3 refused.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=autoremove

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

# ---- apt-guard: begin (copied from lib/apt-guard.sh by go generate; edit it there) ----
# Real hosts: another apt or dpkg (unattended-upgrades, a person) may hold
# dpkg's lock, and a dpkg that was interrupted must be finished by a person
# before anything else runs. Both are read the way apt reads them: apt's own
# words, and dpkg's journal ($DPKG_ADMINDIR/updates, files named by digits).
FIX_DPKG='dpkg --configure -a'
# dpkg_lock_holder: the pid of a process that holds dpkg's lock now (a lock
# on its lock or lock-frontend file in /proc/locks; "?" for a lock that
# names no process), empty when none. It never waits and never takes the
# lock.
dpkg_lock_holder() {
	admin=${DPKG_ADMINDIR:-/var/lib/dpkg}
	inodes=$(stat -c %i "$admin/lock" "$admin/lock-frontend" 2>/dev/null) || true
	[ -n "$inodes" ] && [ -r /proc/locks ] || return 0
	awk -v inodes="$inodes" 'BEGIN { n = split(inodes, l, "\n"); for (i = 1; i <= n; i++) want[l[i]] = 1 }
		$2 != "->" { k = split($6, p, ":"); if (p[k] in want) { print ($5 > 0 ? $5 : "?"); exit } }' /proc/locks
}
# dpkg_busy: does a process hold dpkg's lock now? A running dpkg keeps a
# journal too.
dpkg_busy() { [ -n "$(dpkg_lock_holder)" ]; }
# proc_command PID: the command line of a process ("" when gone).
proc_command() {
	if [ -n "$1" ] && [ -r "/proc/$1/cmdline" ]; then tr '\000' ' ' <"/proc/$1/cmdline" | sed 's/ *$//'; fi
}
# dpkg_interrupted [APT-OUTPUT-FILE]: did dpkg stop half-way? apt says so,
# or dpkg's journal holds entries while no dpkg runs.
dpkg_interrupted() {
	if [ -n "${1:-}" ] && grep -q 'dpkg was interrupted' "$1" 2>/dev/null; then return 0; fi
	[ -n "$(find "${DPKG_ADMINDIR:-/var/lib/dpkg}/updates" -maxdepth 1 -type f -name '[0-9]*' 2>/dev/null | head -n 1)" ] && ! dpkg_busy
}
# refuse_interrupted: stop before anything, naming what a person runs.
refuse_interrupted() {
	field_bool dpkg_interrupted 1
	field_str fix_command "$FIX_DPKG"
	refuse "dpkg was interrupted on this node (a package operation stopped half-way); nothing was changed. A person runs '$FIX_DPKG' as root on the node, reads its output, then runs this step again"
}
# apt_locked APT-OUTPUT-FILE: did apt give up waiting for dpkg's lock?
apt_locked() { grep -Eq 'Could not get lock|Unable to acquire the dpkg' "$1"; }
# refuse_locked APT-OUTPUT-FILE WAITED: stop, naming the holder apt named
# ("It is held by process PID (NAME)", or without the name when apt could not
# read it); when apt named none ("Could not get lock FILE" alone), the holder
# is read from /proc/locks as inspect does. The holder is left alone.
refuse_locked() {
	lpid=$(sed -n 's/.*held by process \([0-9][0-9]*\).*/\1/p' "$1" | head -n 1)
	lname=$(sed -n 's/.*held by process [0-9][0-9]* (\([^)]*\)).*/\1/p' "$1" | head -n 1)
	if [ -z "$lpid" ]; then
		lpid=$(dpkg_lock_holder)
		[ "$lpid" != "?" ] || lpid=""
	fi
	lcmd=$(proc_command "$lpid")
	[ -n "$lcmd" ] || lcmd=$lname
	field_bool dpkg_locked 1
	field_int lock_holder_pid "$lpid"
	field_str lock_holder_command "$lcmd"
	field_int lock_waited_seconds "$2"
	refuse "dpkg is locked by process ${lpid:-unknown} (${lcmd:-unknown}) and stayed locked for $2 s; nothing was changed and the holder was left alone. Let it finish (or ask who runs it), then run this step again"
}
# dpkg_ready SECONDS: take and release dpkg's lock with apt itself (apt-get
# check, waiting at most SECONDS for a holder: DPkg::Lock::Timeout); refuses
# when dpkg stays locked or was interrupted. Needs $TMPD.
dpkg_ready() {
	rc=0
	# apt prints its "Waiting for cache lock" lines on stdout, errors on stderr.
	LC_ALL=C apt-get -o DPkg::Lock::Timeout="$1" check >"$TMPD/check.out" 2>&1 || rc=$?
	if [ "$rc" != 0 ] && apt_locked "$TMPD/check.out"; then refuse_locked "$TMPD/check.out" "$1"; fi
	if dpkg_interrupted "$TMPD/check.out"; then refuse_interrupted; fi
	[ "$rc" = 0 ] && return 0
	fail "apt-get check exited $rc: $(tail -n 3 "$TMPD/check.out")"
}
# ---- apt-guard: end ----

: "${ACTION:=}"
: "${KEEP_KERNEL:=}"
: "${SOAK_DONE:=0}"
: "${LOCK_TIMEOUT:=120}"

STAGE='checking input'
check ACTION "$ACTION" 'simulate|run' 'simulate or run'
check SOAK_DONE "$SOAK_DONE" '[01]' '0 or 1'
check LOCK_TIMEOUT "$LOCK_TIMEOUT" '[0-9]{1,4}' 'a number of seconds (0-9999)'
if [ -n "$KEEP_KERNEL" ]; then check_kernel KEEP_KERNEL "$KEEP_KERNEL"; fi
field_str action "$ACTION"
make_tmpdir

# kernel_pkgs VERSION: removal lines (name per line, stdin) that belong to
# kernel VERSION: named <anything>-<version> or <anything>-<abi>, where the
# abi is the version without its flavour (5.15.0-86-generic -> 5.15.0-86).
kernel_pkgs() {
	abi=$(printf '%s\n' "$1" | sed 's/-[A-Za-z][A-Za-z0-9-]*$//')
	awk -v v="$1" -v a="$abi" '
		function ends(s, t) { return length(s) > length(t) && substr(s, length(s) - length(t)) == "-" t }
		ends($0, v) || ends($0, a) { print }'
}

STAGE='simulating (apt-get -s autoremove --purge)'
rc=0
LC_ALL=C apt-get -s autoremove --purge >"$TMPD/sim" 2>"$TMPD/sim.err" || rc=$?
field_text apt_simulate "$(cat "$TMPD/sim")"
field_int apt_simulate_exit "$rc"
[ "$rc" = 0 ] || fail "apt-get -s autoremove --purge exited $rc: $(tail -n 3 "$TMPD/sim.err")"
removals=$(awk '$1 == "Remv" || $1 == "Purg" { print $2 }' "$TMPD/sim" | LC_ALL=C sort -u)
field_lines removals "$removals"

running=$(uname -r)
field_str running_kernel "$running"
field_str keep_kernel "$KEEP_KERNEL"
field_bool soak_done "$SOAK_DONE"
hit=$(printf '%s\n' "$removals" | kernel_pkgs "$running")
if [ -n "$hit" ]; then
	field_lines protected "$hit"
	refuse "autoremove would remove the running kernel $running: $(printf '%s' "$hit" | tr '\n' ' ')"
fi
if [ -n "$KEEP_KERNEL" ] && [ "$SOAK_DONE" != 1 ]; then
	hit=$(printf '%s\n' "$removals" | kernel_pkgs "$KEEP_KERNEL")
	if [ -n "$hit" ]; then
		field_lines protected "$hit"
		refuse "autoremove would remove the fallback kernel $KEEP_KERNEL before the soak is over: $(printf '%s' "$hit" | tr '\n' ' ')"
	fi
fi
[ "$ACTION" = run ] || ok 'simulated'

STAGE="waiting at most $LOCK_TIMEOUT s for dpkg's lock (apt-get check)"
dpkg_ready "$LOCK_TIMEOUT"
STAGE='removing (apt-get -y autoremove --purge)'
rc=0
LC_ALL=C DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$LOCK_TIMEOUT" -y autoremove --purge >"$TMPD/run" 2>&1 || rc=$?
field_text apt_output "$(cat "$TMPD/run")"
field_int apt_exit "$rc"
[ "$rc" = 0 ] || fail "apt-get -y autoremove --purge exited $rc"
ok 'removed'
}
