#!/bin/sh
# inspect.sh — read-only survey of one node before a patch round.
#
# Runbook: run it on the node as root (ssh node 'sudo sh -s' < inspect.sh).
# It changes nothing. It reports the running kernel and boot id, the
# installed kernels and NVIDIA packages, apt holds and the pending upgrade
# (apt-get -s full-upgrade), the GRUB menu, grubenv and defaults, whether
# GRUB can write grubenv at boot (needed for a one-shot trial boot),
# kernel.panic, Livepatch status, unattended-upgrades blacklist entries,
# reboot-required, the NVIDIA driver version and, when TARGET_KERNEL is
# given, the NVIDIA kernel modules built or packaged for that kernel. It
# also reports dpkg's state without waiting for it (who holds its lock,
# whether it was interrupted, the packages it left half-way) and whether $BOOT_DIR
# has room for the kernels the pending upgrade installs.
#
# Environment (default in brackets):
#   TARGET_KERNEL       kernel release to look for NVIDIA modules for [none]
#   BOOT_DIR            [/boot]                 free space for new kernels
#   GRUB_CFG            [/boot/grub/grub.cfg]
#   GRUB_DIR            [/boot/grub]            grubenv is $GRUB_DIR/grubenv
#   GRUB_DEFAULTS       [/etc/default/grub]     plus $GRUB_DEFAULTS.d/*.cfg
#   BOOT_ID_FILE        [/proc/sys/kernel/random/boot_id]
#   PROC_UPTIME         [/proc/uptime]
#   PROC_SYS            [/proc/sys]             kernel.panic is read here
#   PROC_MDSTAT         [/proc/mdstat]
#   REBOOT_REQUIRED     [/var/run/reboot-required]  and $REBOOT_REQUIRED.pkgs
#   PROC_DRIVER_NVIDIA  [/proc/driver/nvidia]
#   MODULES_DIR         [/lib/modules]
#   APT_CONFIG, DPKG_ADMINDIR are honoured by apt and dpkg themselves.
#
# Output: one JSON object (see scripts/host/README.md, "inspect").
# Exit status: 0 ok, 1 error, 2 bad input.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=inspect

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

# ---- boot-storage: begin (copied from lib/boot-storage.sh by go generate; edit it there) ----
# boot_storage: can GRUB write its environment block at boot? GRUB has no
# write support for mdraid, LVM/device-mapper, btrfs or zfs; there the
# one-shot entry set by grub-reboot is never cleared, so the new kernel would
# stay the default after a panic. Sets BOOT_SOURCE, BOOT_FSTYPE,
# GRUBENV_RELIABLE (1 or 0) and GRUBENV_REASONS (one reason per line).
boot_storage() {
	BOOT_SOURCE=''
	BOOT_FSTYPE=''
	GRUBENV_REASONS=''
	fm=$(findmnt -n -r -o SOURCE,FSTYPE --target "$GRUB_DIR" 2>/dev/null) || fm=''
	read -r BOOT_SOURCE BOOT_FSTYPE <<EOT || true
$fm
EOT
	if [ -z "$BOOT_SOURCE" ]; then
		GRUBENV_REASONS="could not find the filesystem holding $GRUB_DIR"
	fi
	case $BOOT_FSTYPE in
	btrfs | zfs) GRUBENV_REASONS="$GRUBENV_REASONS$NL$GRUB_DIR is on $BOOT_FSTYPE, where GRUB cannot write grubenv" ;;
	esac
	case $BOOT_SOURCE in
	/dev/md*) GRUBENV_REASONS="$GRUBENV_REASONS$NL$GRUB_DIR is on mdraid ($BOOT_SOURCE), where GRUB cannot write grubenv" ;;
	/dev/mapper/* | /dev/dm-*) GRUBENV_REASONS="$GRUBENV_REASONS$NL$GRUB_DIR is on device-mapper (LVM or dm-crypt: $BOOT_SOURCE), where GRUB cannot write grubenv" ;;
	esac
	if [ -r "$GRUB_CFG" ] && grep -q 'GRUB lacks write support' "$GRUB_CFG"; then
		GRUBENV_REASONS="$GRUBENV_REASONS${NL}grub.cfg says: $(grep -m1 'GRUB lacks write support' "$GRUB_CFG" | sed 's/^[[:space:]#]*//')"
	fi
	GRUBENV_REASONS=$(printf '%s\n' "$GRUBENV_REASONS" | sed '/^$/d')
	if [ -z "$GRUBENV_REASONS" ]; then GRUBENV_RELIABLE=1; else GRUBENV_RELIABLE=0; fi
}
# ---- boot-storage: end ----

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

# ---- dpkg-state: begin (copied from lib/dpkg-state.sh by go generate; edit it there) ----
# dpkg_state: dpkg's state as it is now, for a survey that must not wait or
# change anything: whether a process holds its lock and which (dpkg_locked,
# dpkg_lock_holder_pid and _command),
# whether it was interrupted (dpkg_interrupted, with fix_command) and the
# packages dpkg left half-way, as `dpkg --audit` names them (dpkg_audit:
# "<package> <state>" lines, half-installed, unpacked, half-configured or
# awaiting triggers; empty when all is well).
dpkg_state() {
	holder=$(dpkg_lock_holder)
	field_bool dpkg_locked "$(yes_if [ -n "$holder" ])"
	field_int dpkg_lock_holder_pid "$holder"
	field_str dpkg_lock_holder_command "$(proc_command "$holder")"
	if dpkg_interrupted; then
		field_bool dpkg_interrupted 1
		field_str fix_command "$FIX_DPKG"
	else
		field_bool dpkg_interrupted 0
	fi
	# The package states `dpkg --audit` names as half-way (its other notes,
	# such as a missing md5sums file, stop nothing).
	audit=$(dpkg-query -W -f='${db:Status-Status} ${Package}\n' 2>/dev/null |
		awk '$1 ~ /^(half-installed|unpacked|half-configured|triggers-awaited|triggers-pending)$/ { print $2 " " $1 }') || true
	field_text dpkg_audit "$audit"
}
# ---- dpkg-state: end ----

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

# ---- host-survey: begin (copied from lib/host-survey.sh by go generate; edit it there) ----
# The read-only survey of a node, in parts a script calls in this order:
# survey_input (the paths), survey_kernel, survey_packages, then its own
# apt simulation, survey_boot, and survey_modules for a kernel release.
: "${GRUB_CFG:=/boot/grub/grub.cfg}"
: "${GRUB_DIR:=/boot/grub}"
: "${GRUB_DEFAULTS:=/etc/default/grub}"
: "${BOOT_ID_FILE:=/proc/sys/kernel/random/boot_id}"
: "${PROC_UPTIME:=/proc/uptime}"
: "${PROC_SYS:=/proc/sys}"
: "${PROC_MDSTAT:=/proc/mdstat}"
: "${REBOOT_REQUIRED:=/var/run/reboot-required}"
: "${PROC_DRIVER_NVIDIA:=/proc/driver/nvidia}"
: "${MODULES_DIR:=/lib/modules}"

survey_input() {
	for v in GRUB_CFG GRUB_DIR GRUB_DEFAULTS BOOT_ID_FILE PROC_UPTIME PROC_SYS PROC_MDSTAT REBOOT_REQUIRED PROC_DRIVER_NVIDIA MODULES_DIR; do
		eval "check_path $v \"\$$v\""
	done
}

# survey_file NAME PATH: the file as text, every line ending in a newline
# ("" when it cannot be read).
survey_file() {
	if [ -r "$2" ]; then field "$1" "$(json_awk text <"$2")"; else field_text "$1" ''; fi
}

survey_kernel() {
	STAGE='reading the running kernel'
	kernel=$(uname -r)
	field_str kernel "$kernel"
	STAGE="reading $BOOT_ID_FILE"
	# read, a built-in, takes the first line of these one-line files.
	boot_id=''
	IFS= read -r boot_id <"$BOOT_ID_FILE" || [ -n "$boot_id" ]
	field_str boot_id "$boot_id"
	up=''
	IFS= read -r up 2>/dev/null <"$PROC_UPTIME" || true
	field_int uptime_seconds "${up%%.*}"
}

survey_packages() {
	STAGE='listing installed kernel, NVIDIA and Kubernetes packages'
	# dpkg-query exits 1 when one of the patterns matches nothing; the lines it
	# did print are still right.
	pkgs=$(dpkg-query -W -f='${Package}\t${Version}\t${db:Status-Abbrev}\n' \
		'linux-image-*' 'linux-modules-*' 'linux-headers-*' 'nvidia-*' 'libnvidia-*' \
		'containerd*' kubelet kubeadm kubectl cri-tools 2>/dev/null) || true
	field_text packages "$pkgs"

	STAGE='listing apt holds (apt-mark showhold)'
	holds=$(apt-mark showhold)
	field_lines holds "$holds"
}

survey_boot() {
	STAGE='reading GRUB configuration'
	survey_file grub_cfg "$GRUB_CFG"
	field_bool grub_cfg_present "$(yes_if [ -r "$GRUB_CFG" ])"
	if [ -r "$GRUB_DIR/grubenv" ]; then
		field_text grubenv "$(cat "$GRUB_DIR/grubenv")"
		field_int grubenv_size "$(stat -c %s "$GRUB_DIR/grubenv")"
	else
		field_text grubenv ''
	fi
	defaults=''
	for f in "$GRUB_DEFAULTS" "$GRUB_DEFAULTS".d/*.cfg; do
		[ -r "$f" ] || continue
		defaults="$defaults${defaults:+,}{\"path\":$(jstr "$f"),\"content\":$(jtext "$(cat "$f")")}"
	done
	field grub_defaults "[$defaults]"

	STAGE='checking where grubenv lives'
	boot_storage
	field_str boot_source "$BOOT_SOURCE"
	field_str boot_fstype "$BOOT_FSTYPE"
	field_bool grubenv_reliable "$GRUBENV_RELIABLE"
	field_lines grubenv_reasons "$GRUBENV_REASONS"
	survey_file mdstat "$PROC_MDSTAT"

	STAGE='reading kernel.panic'
	# cat, not the shell's read: read takes one byte per read(2), and the
	# kernel answers a read of an integer sysctl at an offset other than 0
	# with end of file, so kernel.panic = 10 would read as "1".
	panic=$(cat "$PROC_SYS/kernel/panic" 2>/dev/null) || panic=''
	field_str kernel_panic "$panic"

	STAGE='reading Livepatch status'
	if command -v canonical-livepatch >/dev/null 2>&1; then
		field_bool livepatch_present 1
		rc=0
		lp=$(canonical-livepatch status --format json 2>/dev/null) || rc=$?
		format=json
		if [ "$rc" != 0 ] || [ -z "$lp" ]; then
			rc=0
			lp=$(canonical-livepatch status --format yaml 2>&1) || rc=$?
			format=yaml
		fi
		field_str livepatch_format "$format"
		field_text livepatch_status "$lp"
		field_int livepatch_exit "$rc"
	else
		field_bool livepatch_present 0
	fi

	STAGE='reading the unattended-upgrades blacklist'
	field_text unattended_blacklist "$(apt-config dump | grep '^Unattended-Upgrade::Package-Blacklist' || true)"

	STAGE='reading reboot-required'
	field_bool reboot_required "$(yes_if [ -e "$REBOOT_REQUIRED" ])"
	survey_file reboot_required_pkgs "$REBOOT_REQUIRED.pkgs"

	STAGE='reading the NVIDIA driver version'
	survey_file nvidia_proc_version "$PROC_DRIVER_NVIDIA/version"
	if command -v nvidia-smi >/dev/null 2>&1; then
		field_str nvidia_smi_driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)"
	else
		field_str nvidia_smi_driver ''
	fi
}

# survey_modules RELEASE: the nvidia*.ko* files under $MODULES_DIR/RELEASE,
# relative to it, one per line (none when the directory is missing).
survey_modules() {
	if [ -d "$MODULES_DIR/$1" ]; then
		(cd "$MODULES_DIR/$1" && find . -name 'nvidia*.ko*' | sed 's|^\./||' | LC_ALL=C sort)
	fi
}
# ---- host-survey: end ----

: "${TARGET_KERNEL:=}"
: "${BOOT_DIR:=/boot}"

STAGE='checking input'
if [ -n "$TARGET_KERNEL" ]; then check_kernel TARGET_KERNEL "$TARGET_KERNEL"; fi
check_path BOOT_DIR "$BOOT_DIR"
survey_input
make_tmpdir

survey_kernel
survey_packages

STAGE='simulating the upgrade (apt-get -s full-upgrade)'
rc=0
sim=$(LC_ALL=C apt-get -s full-upgrade 2>"$TMPD/apt.err") || rc=$?
field_text apt_simulate "$sim"
field_text apt_simulate_stderr "$(cat "$TMPD/apt.err")"
field_int apt_simulate_exit "$rc"

STAGE='reading dpkg state (lock holder, journal, packages left half-way; without waiting)'
dpkg_state

STAGE="checking $BOOT_DIR has room for the pending upgrade's kernels"
boot_space "$(printf '%s\n' "$sim" | plan_lines)"
boot_fields

survey_boot

if [ -n "$TARGET_KERNEL" ]; then
	STAGE="looking for NVIDIA modules for $TARGET_KERNEL"
	field_str target_kernel "$TARGET_KERNEL"
	field_bool target_modules_dir "$(yes_if [ -d "$MODULES_DIR/$TARGET_KERNEL" ])"
	field_lines target_nvidia_modules "$(survey_modules "$TARGET_KERNEL")"
fi

ok 'done'
}
