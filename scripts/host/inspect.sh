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
# given, the NVIDIA kernel modules built or packaged for that kernel.
#
# Environment (default in brackets):
#   TARGET_KERNEL       kernel release to look for NVIDIA modules for [none]
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

STAGE='checking input'
if [ -n "$TARGET_KERNEL" ]; then check_kernel TARGET_KERNEL "$TARGET_KERNEL"; fi
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

survey_boot

if [ -n "$TARGET_KERNEL" ]; then
	STAGE="looking for NVIDIA modules for $TARGET_KERNEL"
	field_str target_kernel "$TARGET_KERNEL"
	field_bool target_modules_dir "$(yes_if [ -d "$MODULES_DIR/$TARGET_KERNEL" ])"
	field_lines target_nvidia_modules "$(survey_modules "$TARGET_KERNEL")"
fi

ok 'done'
}
