#!/bin/sh
# install.sh — run the approved upgrade, detached from this SSH session.
#
# Runbook: run as root on a drained node, with ACTION=start and the plan
# digest that was approved. start:
#   1. refuses if an install for this round was already started;
#   2. waits at most LOCK_TIMEOUT s for another apt/dpkg holding dpkg's
#      lock (apt-get check with DPkg::Lock::Timeout), then refuses naming
#      the holder (pid, command), which it never touches; refuses when dpkg
#      was interrupted, naming the command a person runs (dpkg --configure -a);
#   3. re-runs `apt-get -s full-upgrade` and refuses if the digest of the
#      package set differs from EXPECTED_PLAN_DIGEST (the plan drifted),
#      or if $BOOT_DIR lacks room for the kernels it installs;
#   4. records the start, then runs
#        apt-get -y -o DPkg::Lock::Timeout=LOCK_TIMEOUT \
#          -o Dpkg::Options::=--force-confdef \
#          -o Dpkg::Options::=--force-confold full-upgrade
#      with DEBIAN_FRONTEND=noninteractive and NEEDRESTART_MODE=l (list
#      only), in its own session: a systemd transient unit when systemd is
#      PID 1 (systemd-run), else setsid + nohup. A dropped SSH session cannot
#      kill dpkg half-way.
#   Log, pid and exit code go to $STATE_DIR/$ROUND/install.{log,pid,rc}.
# ACTION=status reports running / finished (with the exit code) / lost (the
# process is gone and left no exit code), and the end of the log.
# The old kernel stays installed: full-upgrade never removes it by itself.
#
# Environment (default in brackets):
#   ACTION                start | status (required)
#   ROUND                 round id (required)
#   EXPECTED_PLAN_DIGEST  sha256:<64 hex> (required for start)
#   STATE_DIR             [/var/lib/mcp-patch]
#   SYSTEMD_DIR           [/run/systemd/system]  present when systemd is PID 1
#   LOG_TAIL_LINES        [40]
#   LOCK_TIMEOUT          [120] seconds to wait for dpkg's lock
#   BOOT_DIR              [/boot]
#   APT_CONFIG, DPKG_ADMINDIR are honoured by apt and dpkg themselves.
#
# Output: one JSON object (README.md, "install").
# Exit status: 0 ok, 1 error, 2 bad input, 3 refused.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=install

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

# ---- boot-space: begin (copied from lib/boot-space.sh by go generate; edit it there) ----
# boot_space PLAN-LINES: does /boot hold the kernels the plan installs? A
# kernel whose initrd does not fit leaves dpkg half-configured. Each new
# linux-image-<release> needs about what the running kernel's files take in
# $BOOT_DIR (vmlinuz, initrd.img, System.map, config) plus 20 %, at least
# 64 MiB. Sets BOOT_FREE_KB (empty when df cannot tell), BOOT_NEED_KB,
# BOOT_NEW_KERNELS (one per line) and BOOT_SHORT (1 when it does not fit).
boot_space() {
	BOOT_NEW_KERNELS=$(printf '%s\n' "$1" | awk '$1 == "Inst" && $2 ~ /^linux-image-[0-9]/ && $3 == "-" { sub(/^linux-image-/, "", $2); print $2 }')
	per=0
	running=$(uname -r)
	for f in vmlinuz initrd.img System.map config; do
		[ -f "$BOOT_DIR/$f-$running" ] || continue
		kb=$(du -k "$BOOT_DIR/$f-$running")
		per=$((per + ${kb%%[!0-9]*}))
	done
	per=$((per * 12 / 10))
	[ "$per" -ge 65536 ] || per=65536
	n=$(printf '%s\n' "$BOOT_NEW_KERNELS" | grep -c . || true)
	BOOT_NEED_KB=$((n * per))
	BOOT_FREE_KB=$(df -Pk "$BOOT_DIR" 2>/dev/null | awk 'NR == 2 { print $4 }') || BOOT_FREE_KB=''
	BOOT_SHORT=0
	case $BOOT_FREE_KB in
	'' | *[!0-9]*) BOOT_FREE_KB='' ;;
	*) if [ "$BOOT_FREE_KB" -lt "$BOOT_NEED_KB" ]; then BOOT_SHORT=1; fi ;;
	esac
}
# boot_fields: report boot_space's findings.
boot_fields() {
	field_str boot_dir "$BOOT_DIR"
	field_int boot_free_kb "$BOOT_FREE_KB"
	field_int boot_need_kb "$BOOT_NEED_KB"
	field_lines boot_new_kernels "$BOOT_NEW_KERNELS"
	field_bool boot_short "$BOOT_SHORT"
}
# size_kb KB: a size in KiB for a person: whole MiB from 1 MiB up, KiB
# below it (336 KiB, not "0 MiB").
size_kb() {
	if [ "$1" -lt 1024 ]; then printf '%s KiB' "$1"; else printf '%s MiB' "$(($1 / 1024))"; fi
}
# boot_short_reason: the words of a /boot that is too small.
boot_short_reason() {
	printf '%s has %s free, the new kernel(s) %s need about %s (kernel and initrd, sized on the running one); free space on %s first (remove an old kernel), nothing was changed' \
		"$BOOT_DIR" "$(size_kb "$BOOT_FREE_KB")" "$(printf '%s' "$BOOT_NEW_KERNELS" | tr '\n' ' ' | sed 's/ *$//')" "$(size_kb "$BOOT_NEED_KB")" "$BOOT_DIR"
}
# ---- boot-space: end ----

# ---- plan-digest: begin (copied from lib/plan-digest.sh by go generate; edit it there) ----
# plan_lines: read `apt-get -s` output, print the canonical package set: one
# line per Inst, Remv or Purg line, "<op> <package> <old> <new> <arch>" with
# "-" for a missing part. plan_digest: sha256 of those lines sorted
# bytewise, each ending in a newline (the Go side computes the same).
plan_lines() {
	LC_ALL=C awk -F '[ \t]+' '
	{ sub(/^[ \t]+/, "") }
	$1 == "Inst" || $1 == "Remv" || $1 == "Purg" {
		old = "-"; new = "-"; arch = "-"; i = 3
		if (i <= NF && $i ~ /^\[.*\]$/) { old = substr($i, 2, length($i) - 2); i++ }
		for (; i <= NF; i++) if (substr($i, 1, 1) == "(") { new = substr($i, 2); i++; break }
		for (; i <= NF; i++) if ($i ~ /^\[.*\]\)$/) { arch = substr($i, 2, length($i) - 3); break }
		if (old == "") old = "-"
		if (new == "") new = "-"
		if (arch == "") arch = "-"
		print $1 " " $2 " " old " " new " " arch
	}'
}
plan_digest() { plan_lines | LC_ALL=C sort | sha256sum | sed 's/ .*//; s/^/sha256:/'; }
# ---- plan-digest: end ----

: "${ACTION:=}"
: "${ROUND:=}"
: "${EXPECTED_PLAN_DIGEST:=}"
: "${STATE_DIR:=/var/lib/mcp-patch}"
: "${SYSTEMD_DIR:=/run/systemd/system}"
: "${LOG_TAIL_LINES:=40}"
: "${LOCK_TIMEOUT:=120}"
: "${BOOT_DIR:=/boot}"

STAGE='checking input'
check ACTION "$ACTION" 'start|status' 'start or status'
check_round ROUND "$ROUND"
check_path STATE_DIR "$STATE_DIR"
check_path SYSTEMD_DIR "$SYSTEMD_DIR"
check LOG_TAIL_LINES "$LOG_TAIL_LINES" '[0-9]{1,4}' 'a line count'
check LOCK_TIMEOUT "$LOCK_TIMEOUT" '[0-9]{1,4}' 'a number of seconds (0-9999)'
check_path BOOT_DIR "$BOOT_DIR"
if [ "$ACTION" = start ]; then
	check EXPECTED_PLAN_DIGEST "$EXPECTED_PLAN_DIGEST" 'sha256:[0-9a-f]{64}' 'a plan digest (sha256:<64 hex>)'
fi

dir="$STATE_DIR/$ROUND"
log="$dir/install.log"
rcfile="$dir/install.rc"
pidfile="$dir/install.pid"
unit="mcp-patch-install-$ROUND"
field_str state_dir "$dir"
field_str action "$ACTION"

# report: add the state of the install to the result; sets STATE.
report() {
	pid=''
	if [ -f "$pidfile" ]; then pid=$(cat "$pidfile"); fi
	# Running first, then the exit code: the job writes its exit code before
	# it exits, so a job that ends between the two checks is seen as
	# finished, never as lost.
	if [ ! -f "$rcfile" ] && [ -n "$pid" ] && tr '\000' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q mcp-patch-install; then
		STATE=running
	elif [ -f "$rcfile" ]; then
		STATE=finished
		field_int exit_code "$(cat "$rcfile")"
	elif [ -f "$dir/install.started" ]; then
		STATE=lost
	else
		STATE=not_started
	fi
	field_str state "$STATE"
	field_int pid "$pid"
	if [ -f "$dir/install.started" ]; then field_str started_at "$(cat "$dir/install.started")"; fi
	if [ -f "$dir/install.launcher" ]; then field_str launcher "$(cat "$dir/install.launcher")"; fi
	if [ -f "$log" ]; then field_text log_tail "$(tail -n "$LOG_TAIL_LINES" "$log")"; else field_text log_tail ''; fi
}

if [ "$ACTION" = status ]; then
	STAGE='reading the install state'
	report
	case $STATE in
	finished)
		if [ "$(cat "$rcfile")" = 0 ]; then ok 'done'; fi
		fail "apt-get full-upgrade exited $(cat "$rcfile"); see the log"
		;;
	lost) fail "the install process is gone and left no exit code; check dpkg (dpkg --audit) and $log" ;;
	*) ok 'done' ;;
	esac
fi

STAGE='checking for an earlier start'
if [ -f "$dir/install.started" ]; then
	report
	refuse "an install for round $ROUND was already started at $(cat "$dir/install.started") (state: $STATE); it is never started twice"
fi

make_tmpdir
STAGE="waiting at most $LOCK_TIMEOUT s for dpkg's lock (apt-get check)"
dpkg_ready "$LOCK_TIMEOUT"

STAGE='re-simulating the upgrade (apt-get -s full-upgrade)'
rc=0
LC_ALL=C apt-get -s full-upgrade >"$TMPD/sim" 2>"$TMPD/sim.err" || rc=$?
if [ "$rc" != 0 ]; then
	field_text apt_stderr "$(cat "$TMPD/sim.err")"
	if dpkg_interrupted "$TMPD/sim.err"; then refuse_interrupted; fi
	fail "apt-get -s full-upgrade exited $rc"
fi
digest=$(plan_digest <"$TMPD/sim")
field_str plan_digest "$digest"
field_str expected_plan_digest "$EXPECTED_PLAN_DIGEST"
if [ "$digest" != "$EXPECTED_PLAN_DIGEST" ]; then
	field_lines plan_lines "$(plan_lines <"$TMPD/sim" | LC_ALL=C sort)"
	refuse "the plan drifted: apt-get -s full-upgrade now gives $digest, the approved plan is $EXPECTED_PLAN_DIGEST; simulate again and get a new approval"
fi
STAGE="checking $BOOT_DIR has room for the new kernels"
boot_space "$(plan_lines <"$TMPD/sim")"
boot_fields
[ "$BOOT_SHORT" = 0 ] || refuse "$(boot_short_reason)"

STAGE="recording the start in $dir"
mkdir -p "$dir"
date -u +%Y-%m-%dT%H:%M:%SZ >"$dir/install.started"
rm -f "$rcfile" "$pidfile"

# The detached job: records its pid, runs apt-get, records the exit code.
# Arguments: log file, rc file, pid file, lock timeout. It is a file, not a
# command line: systemd-run would expand "$$" on a command line itself.
jobfile="$dir/mcp-patch-install.sh"
# shellcheck disable=SC2016 # expanded by the job's own shell
job='echo $$ >"$3"; rc=0; apt-get -y -o DPkg::Lock::Timeout="$4" -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold full-upgrade >"$1" 2>&1 </dev/null || rc=$?; echo "$rc" >"$2.part" && mv "$2.part" "$2"'

STAGE='starting apt-get full-upgrade detached'
printf '%s\n' "$job" >"$jobfile"
if [ -d "$SYSTEMD_DIR" ] && command -v systemd-run >/dev/null 2>&1; then
	echo "systemd-run --unit=$unit" >"$dir/install.launcher"
	set -- --unit="$unit" --collect --quiet --setenv=DEBIAN_FRONTEND=noninteractive --setenv=NEEDRESTART_MODE=l
	if [ -n "${APT_CONFIG:-}" ]; then set -- "$@" --setenv=APT_CONFIG="$APT_CONFIG"; fi
	if [ -n "${DPKG_ADMINDIR:-}" ]; then set -- "$@" --setenv=DPKG_ADMINDIR="$DPKG_ADMINDIR"; fi
	systemd-run "$@" sh "$jobfile" "$log" "$rcfile" "$pidfile" "$LOCK_TIMEOUT"
else
	echo "setsid nohup" >"$dir/install.launcher"
	DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=l \
		setsid nohup sh "$jobfile" "$log" "$rcfile" "$pidfile" "$LOCK_TIMEOUT" >/dev/null 2>&1 </dev/null &
fi

STAGE='waiting for the install to record its pid'
i=0
while [ ! -s "$pidfile" ] && [ ! -f "$rcfile" ] && [ "$i" -lt 10 ]; do
	sleep 1
	i=$((i + 1))
done
report
[ -s "$pidfile" ] || fail "the detached install did not start within 10 s; see $log"
ok "started"
}
