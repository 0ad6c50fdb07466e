#!/bin/sh
# trial_boot.sh — boot the new kernel once, with the old one as the fallback.
#
# Runbook: run as root on a drained node after install.
# ACTION=prepare (OLD_ENTRY, NEW_ENTRY: full GRUB ids with the submenu path,
# e.g. gnulinux-advanced-<uuid>>gnulinux-<ver>-advanced-<uuid>):
#   1. both entries must exist in grub.cfg; the old one must boot the
#      running kernel, the new one another kernel;
#   2. kernel.panic must be > 0 (a panicking kernel must reboot by itself);
#   3. GRUB must be able to write grubenv at boot (not mdraid, LVM or other
#      device-mapper, btrfs, zfs), unless ALLOW_UNRELIABLE_GRUBENV=1;
#   4. records the plan and the current boot id in $STATE_DIR/$ROUND/;
#   5. writes the drop-in $GRUB_DROPIN:
#        GRUB_DEFAULT="<old entry>"
#        GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT panic=<N>"
#      and runs update-grub, so the old kernel stays the default;
#   6. `grub-reboot "<new entry>"` sets next_entry in grubenv: GRUB boots the
#      new kernel once and clears next_entry; if it panics it reboots after
#      N s into the old kernel;
#   7. reports whether a hardware watchdog is armed (systemd RuntimeWatchdog),
#      which also covers a hang.
# ACTION=reboot: checks the prepared state is still in place, then schedules
#   the reboot a few seconds out (systemd-run --on-active=5 systemctl reboot,
#   or setsid nohup sh -c 'sleep 2; reboot') and returns at once.
# ACTION=status: boot id and running kernel now, against the recorded ones:
#   not_rebooted, new_kernel (the trial boot worked), fell_back (the old
#   kernel runs again) or other_kernel.
# promote.sh removes the drop-in once the node is proven healthy.
#
# Environment (default in brackets):
#   ACTION                    prepare | reboot | status (required)
#   ROUND                     round id (required)
#   OLD_ENTRY, NEW_ENTRY      GRUB entry ids with submenu path (prepare)
#   PANIC_SECONDS             panic=N on the command line [kernel.panic now]
#   ALLOW_UNRELIABLE_GRUBENV  1 to go on where grubenv is not writable [0]
#   GRUB_CFG                  [/boot/grub/grub.cfg]
#   GRUB_DIR                  [/boot/grub]  must end in /grub; its parent is
#                             passed to grub-reboot --boot-directory
#   GRUB_DROPIN               [/etc/default/grub.d/99-trial-boot.cfg]
#   PROC_SYS                  [/proc/sys]
#   BOOT_ID_FILE              [/proc/sys/kernel/random/boot_id]
#   STATE_DIR                 [/var/lib/mcp-patch]
#   SYSTEMD_DIR               [/run/systemd/system]  present when systemd is PID 1
#
# Output: one JSON object (README.md, "trial_boot").
# Exit status: 0 ok, 1 error, 2 bad input, 3 refused.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=trial_boot

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

# ---- grub-entries: begin (copied from lib/grub-entries.sh by go generate; edit it there) ----
# grub_entries FILE: one line per bootable menu entry of a generated grub.cfg:
#   <id path> TAB <index path> TAB <kernel version> TAB <title path>
# Paths join submenu and entry with '>' exactly as GRUB's "default" and
# grub-reboot expect them. An entry without an id is named by its title.
grub_entries() {
	LC_ALL=C awk '
	function word(s,    out, c, q) {
		out = ""
		while (s != "") {
			c = substr(s, 1, 1)
			if (c == " " || c == "\t") break
			if (c == "'\''") {
				q = index(substr(s, 2), "'\''")
				if (q == 0) { out = out substr(s, 2); s = ""; break }
				out = out substr(s, 2, q - 1); s = substr(s, q + 2)
			} else if (c == "\"") {
				s = substr(s, 2)
				while (s != "" && substr(s, 1, 1) != "\"") {
					if (substr(s, 1, 1) == "\\" && length(s) > 1) s = substr(s, 2)
					out = out substr(s, 1, 1); s = substr(s, 2)
				}
				s = substr(s, 2)
			} else if (c == "\\") {
				out = out substr(s, 2, 1); s = substr(s, 3)
			} else {
				out = out c; s = substr(s, 2)
			}
		}
		rest = s
		return out
	}
	function skipws(s) { sub(/^[ \t]+/, "", s); return s }
	BEGIN { depth = 0; sub_depth = 0; in_entry = 0 }
	{
		line = $0
		sub(/[ \t\r]+$/, "", line)
		t = skipws(line)
	}
	t ~ /^(menuentry|submenu)[ \t]/ {
		kind = (substr(t, 1, 1) == "m") ? "menuentry" : "submenu"
		s = skipws(substr(t, length(kind) + 1))
		title = ""; id = ""; n = 0
		while (s != "" && substr(s, 1, 1) != "{") {
			w = word(s); s = skipws(rest)
			if (n++ == 0) { title = w; continue }
			if (w == "$menuentry_id_option" || w == "--id") { id = word(s); s = skipws(rest) }
			else if (substr(w, 1, 5) == "--id=") id = substr(w, 6)
		}
		if (id == "") id = title
		idx = count[sub_depth]++
		ipath = (sub_depth ? sub_ipath[sub_depth] ">" : "") idx
		idpath = (sub_depth ? sub_idpath[sub_depth] ">" : "") id
		tpath = (sub_depth ? sub_tpath[sub_depth] ">" : "") title
		if (t !~ /\{$/) {
			if (kind == "menuentry") printf "%s\t%s\t\t%s\n", idpath, ipath, tpath
			next
		}
		if (kind == "submenu") {
			sub_depth++
			count[sub_depth] = 0
			sub_ipath[sub_depth] = ipath; sub_idpath[sub_depth] = idpath; sub_tpath[sub_depth] = tpath
			stack[++depth] = "submenu"
		} else {
			stack[++depth] = "menuentry"
			in_entry = 1; e_id = idpath; e_idx = ipath; e_title = tpath; e_kernel = ""
		}
		next
	}
	t == "}" {
		if (depth > 0) {
			if (stack[depth] == "submenu") sub_depth--
			else if (stack[depth] == "menuentry") {
				printf "%s\t%s\t%s\t%s\n", e_id, e_idx, e_kernel, e_title
				in_entry = 0
			}
			depth--
		}
		next
	}
	in_entry && e_kernel == "" && t ~ /^linux(16|efi)?[ \t]/ {
		s = t
		sub(/^linux(16|efi)?[ \t]+/, "", s)
		p = word(s)
		sub(/.*\//, "", p)
		if (p ~ /^vmlinu[xz]-/) e_kernel = substr(p, 9)
		next
	}
	t ~ /\{$/ { stack[++depth] = "block" }
	' "$1"
}
# ---- grub-entries: end ----

# ---- reboot-request: begin (copied from lib/reboot-request.sh by go generate; edit it there) ----
# The prepare / reboot / status steps (trial_boot.sh, rollback.sh) keep what
# prepare decided in the file $state, read GRUB's one-shot entry from
# $grubenv, and ask for the reboot the same way.
#
# state_get KEY: the last value recorded for KEY in $state.
state_get() { sed -n "s/^$1=//p" "$state" | tail -n 1; }
# next_entry: the one-shot entry now in grubenv ('' when none).
next_entry() { grub-editenv "$grubenv" list 2>/dev/null | sed -n 's/^next_entry=//p'; }
# request_reboot UNIT: schedule the reboot a few seconds out, once per
# prepared state (a second call reports the first request and schedules
# nothing), and finish with the result: systemd-run --on-active=5 as the
# transient unit UNIT where systemd is PID 1 ($SYSTEMD_DIR exists), else a
# detached `sleep 2; reboot`. Returning at once lets the result reach the
# caller before the connection drops.
request_reboot() {
	requested=$(state_get reboot_requested_at)
	if [ -n "$requested" ]; then
		field_bool already_requested 1
		field_str reboot_requested_at "$requested"
		ok "a reboot was already requested at $requested; not scheduling another"
	fi
	field_bool already_requested 0
	STAGE='scheduling the reboot'
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	echo "reboot_requested_at=$now" >>"$state"
	field_str reboot_requested_at "$now"
	if [ -d "$SYSTEMD_DIR" ] && command -v systemd-run >/dev/null 2>&1; then
		field_str method 'systemd-run --on-active=5 systemctl reboot'
		systemd-run --on-active=5 --unit="$1" --quiet systemctl reboot
	else
		field_str method "setsid nohup sh -c 'sleep 2; reboot'"
		setsid nohup sh -c 'sleep 2; reboot' >/dev/null 2>&1 </dev/null &
	fi
	ok 'reboot scheduled'
}
# ---- reboot-request: end ----

: "${ACTION:=}"
: "${ROUND:=}"
: "${OLD_ENTRY:=}"
: "${NEW_ENTRY:=}"
: "${PANIC_SECONDS:=}"
: "${ALLOW_UNRELIABLE_GRUBENV:=0}"
: "${GRUB_CFG:=/boot/grub/grub.cfg}"
: "${GRUB_DIR:=/boot/grub}"
: "${GRUB_DROPIN:=/etc/default/grub.d/99-trial-boot.cfg}"
: "${PROC_SYS:=/proc/sys}"
: "${BOOT_ID_FILE:=/proc/sys/kernel/random/boot_id}"
: "${STATE_DIR:=/var/lib/mcp-patch}"
: "${SYSTEMD_DIR:=/run/systemd/system}"

RE_ENTRY='[A-Za-z0-9][A-Za-z0-9._-]{0,199}(>[A-Za-z0-9][A-Za-z0-9._-]{0,199})?'
STAGE='checking input'
check ACTION "$ACTION" 'prepare|reboot|status' 'prepare, reboot or status'
check_round ROUND "$ROUND"
for v in GRUB_CFG GRUB_DIR GRUB_DROPIN PROC_SYS BOOT_ID_FILE STATE_DIR SYSTEMD_DIR; do
	eval "check_path $v \"\$$v\""
done
case $GRUB_DIR in */grub) ;; *) bad_input "GRUB_DIR='$GRUB_DIR' must end in /grub (grub-reboot works on <boot dir>/grub)" ;; esac
check ALLOW_UNRELIABLE_GRUBENV "$ALLOW_UNRELIABLE_GRUBENV" '[01]' '0 or 1'
if [ "$ACTION" = prepare ]; then
	check OLD_ENTRY "$OLD_ENTRY" "$RE_ENTRY" 'a GRUB entry id (submenu-id>entry-id)'
	check NEW_ENTRY "$NEW_ENTRY" "$RE_ENTRY" 'a GRUB entry id (submenu-id>entry-id)'
	[ "$OLD_ENTRY" != "$NEW_ENTRY" ] || bad_input 'OLD_ENTRY and NEW_ENTRY are the same entry'
	if [ -n "$PANIC_SECONDS" ]; then check PANIC_SECONDS "$PANIC_SECONDS" '[1-9][0-9]{0,3}' 'a number of seconds (1-9999)'; fi
fi

dir="$STATE_DIR/$ROUND"
state="$dir/trial_boot.state"
bootdir=${GRUB_DIR%/grub}
[ -n "$bootdir" ] || bootdir=/
grubenv="$GRUB_DIR/grubenv"
field_str action "$ACTION"
field_str state_file "$state"

STAGE='reading the boot id'
boot_id=$(cat "$BOOT_ID_FILE")
kernel=$(uname -r)
field_str boot_id "$boot_id"
field_str kernel "$kernel"

case $ACTION in
status)
	STAGE="reading $state"
	[ -f "$state" ] || refuse "no trial boot was prepared for round $ROUND ($state is missing)"
	pre=$(state_get boot_id)
	old_kernel=$(state_get old_kernel)
	new_kernel=$(state_get new_kernel)
	field_str recorded_boot_id "$pre"
	field_str old_kernel "$old_kernel"
	field_str new_kernel "$new_kernel"
	field_str reboot_requested_at "$(state_get reboot_requested_at)"
	field_str next_entry "$(next_entry)"
	if [ "$boot_id" = "$pre" ]; then
		field_bool rebooted 0
		outcome=not_rebooted
	else
		field_bool rebooted 1
		if [ "$kernel" = "$new_kernel" ]; then outcome=new_kernel
		elif [ "$kernel" = "$old_kernel" ]; then outcome=fell_back
		else outcome=other_kernel
		fi
	fi
	field_str outcome "$outcome"
	ok 'done'
	;;
reboot)
	STAGE="reading $state"
	[ -f "$state" ] || refuse "no trial boot was prepared for round $ROUND ($state is missing); run ACTION=prepare first"
	pre=$(state_get boot_id)
	[ "$boot_id" = "$pre" ] || refuse "the node already rebooted since prepare (boot id $pre, now $boot_id); run ACTION=status"
	new_entry=$(state_get new_entry)
	old_entry=$(state_get old_entry)
	STAGE='checking the one-shot entry and the drop-in are still in place'
	ne=$(next_entry)
	field_str next_entry "$ne"
	[ "$ne" = "$new_entry" ] || refuse "grubenv next_entry is '$ne', not the prepared '$new_entry'; run ACTION=prepare again"
	if ! grep -qxF "GRUB_DEFAULT=\"$old_entry\"" "$GRUB_DROPIN" 2>/dev/null; then
		refuse "$GRUB_DROPIN no longer sets GRUB_DEFAULT=\"$old_entry\"; run ACTION=prepare again"
	fi
	request_reboot "mcp-patch-reboot-$ROUND"
	;;
esac

# ACTION=prepare
STAGE="reading the GRUB menu in $GRUB_CFG"
[ -r "$GRUB_CFG" ] || fail "cannot read $GRUB_CFG"
entries=$(grub_entries "$GRUB_CFG")
old_kernel=$(printf '%s\n' "$entries" | awk -F '\t' -v id="$OLD_ENTRY" '$1 == id { print $3; exit }')
new_kernel=$(printf '%s\n' "$entries" | awk -F '\t' -v id="$NEW_ENTRY" '$1 == id { print $3; exit }')
# entry_check NAME ID: the id must be an entry of the live grub.cfg with its
# full submenu path (GRUB boots entry 0 for a default it cannot find, which
# after a panic may be the new kernel), and not a recovery entry.
entry_check() {
	if ! printf '%s\n' "$entries" | cut -f1 | grep -qxF -- "$2"; then
		full=$(printf '%s\n' "$entries" | awk -F '\t' -v id="$2" '{ n = split($1, p, ">") } p[n] == id { print $1; exit }')
		[ -z "$full" ] || refuse "$1 '$2' is not an entry of $GRUB_CFG: it lacks its submenu path, so GRUB would not find it and would boot entry 0; the full id is '$full'"
		refuse "$1 '$2' is not an entry of $GRUB_CFG (an id with its submenu path, as grub-reboot and GRUB_DEFAULT need it); GRUB would boot entry 0"
	fi
	title=$(printf '%s\n' "$entries" | awk -F '\t' -v id="$2" '$1 == id { print $4; exit }')
	case $title in
	*'(recovery mode)'*) refuse "$1 '$2' is a recovery entry ($title); trial boots use the kernel's normal entry" ;;
	esac
}
entry_check OLD_ENTRY "$OLD_ENTRY"
entry_check NEW_ENTRY "$NEW_ENTRY"
field_str old_entry "$OLD_ENTRY"
field_str new_entry "$NEW_ENTRY"
field_str old_kernel "$old_kernel"
field_str new_kernel "$new_kernel"
[ "$old_kernel" = "$kernel" ] || refuse "OLD_ENTRY boots '$old_kernel', not the running kernel $kernel; the fallback must be the kernel that runs now"
[ -n "$new_kernel" ] || refuse "NEW_ENTRY boots no kernel GRUB names (no vmlinuz on its linux line)"
[ "$new_kernel" != "$old_kernel" ] || refuse "NEW_ENTRY boots '$new_kernel', which is not a different kernel"

STAGE='checking kernel.panic'
panic=$(cat "$PROC_SYS/kernel/panic")
field_str kernel_panic "$panic"
case $panic in
'' | *[!0-9]* | 0) refuse "kernel.panic is '$panic': a kernel that panics would not reboot into the fallback; set kernel.panic > 0 (sysctl.d) first" ;;
esac
[ -n "$PANIC_SECONDS" ] || PANIC_SECONDS=$panic
field_int panic_seconds "$PANIC_SECONDS"

STAGE='checking GRUB can write grubenv at boot'
boot_storage
field_str boot_source "$BOOT_SOURCE"
field_str boot_fstype "$BOOT_FSTYPE"
field_bool grubenv_reliable "$GRUBENV_RELIABLE"
field_lines grubenv_reasons "$GRUBENV_REASONS"
if [ "$GRUBENV_RELIABLE" = 0 ] && [ "$ALLOW_UNRELIABLE_GRUBENV" != 1 ]; then
	refuse "GRUB cannot clear the one-shot entry at boot, so a failed kernel would stay the default: $(printf '%s' "$GRUBENV_REASONS" | tr '\n' ';')"
fi

STAGE="checking no other GRUB drop-in overrides GRUB_DEFAULT after $GRUB_DROPIN"
for f in "$(dirname "$GRUB_DROPIN")"/*.cfg; do
	if [ ! -f "$f" ] || [ "$f" = "$GRUB_DROPIN" ]; then continue; fi
	# grub-mkconfig sources the drop-ins in name order: a later one wins.
	[ "$(printf '%s\n%s\n' "$f" "$GRUB_DROPIN" | LC_ALL=C sort | tail -n 1)" = "$f" ] || continue
	if grep -Eq '^[[:space:]]*(export[[:space:]]+)?GRUB_DEFAULT=' "$f"; then
		refuse "$f sets GRUB_DEFAULT and is read after $GRUB_DROPIN, so the old kernel would not stay the default; nothing was changed"
	fi
done

STAGE="recording the trial boot in $state"
mkdir -p "$dir"
{
	echo "old_entry=$OLD_ENTRY"
	echo "new_entry=$NEW_ENTRY"
	echo "old_kernel=$old_kernel"
	echo "new_kernel=$new_kernel"
	echo "boot_id=$boot_id"
	echo "dropin=$GRUB_DROPIN"
	echo "prepared_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$state.part"
mv "$state.part" "$state"

STAGE="writing $GRUB_DROPIN"
mkdir -p "$(dirname "$GRUB_DROPIN")"
{
	echo "# Trial boot of round $ROUND: keep the old kernel as the default while"
	echo "# grub-reboot boots the new one once. promote.sh removes this file."
	printf 'GRUB_DEFAULT="%s"\n' "$OLD_ENTRY"
	# shellcheck disable=SC2016 # written literally: grub-mkconfig expands it
	printf 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT panic=%s"\n' "$PANIC_SECONDS"
} >"$GRUB_DROPIN.part"
mv "$GRUB_DROPIN.part" "$GRUB_DROPIN"

STAGE='running update-grub'
update-grub
grep -qF "set default=\"$OLD_ENTRY\"" "$GRUB_CFG" ||
	fail "after update-grub, $GRUB_CFG does not set default=\"$OLD_ENTRY\"; is GRUB_DEFAULT overridden elsewhere?"

STAGE="setting the one-shot entry (grub-reboot --boot-directory=$bootdir)"
grub-reboot --boot-directory="$bootdir" "$NEW_ENTRY"
ne=$(next_entry)
field_str next_entry "$ne"
[ "$ne" = "$NEW_ENTRY" ] || fail "grubenv next_entry is '$ne' after grub-reboot, expected '$NEW_ENTRY'"
field_text grubenv "$(grub-editenv "$grubenv" list)"

STAGE='checking for a hardware watchdog'
wd=''
if command -v systemctl >/dev/null 2>&1; then
	wd=$(systemctl show -p RuntimeWatchdogUSec --value 2>/dev/null || true)
fi
field_str watchdog_runtime_usec "$wd"
case $wd in
'' | 0 | infinity) field_bool watchdog_armed 0 ;;
*) field_bool watchdog_armed 1 ;;
esac
ok 'prepared'
}
