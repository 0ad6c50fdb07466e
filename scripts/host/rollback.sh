#!/bin/sh
# rollback.sh — bring a node back to its old kernel, proven by a new boot id.
#
# Runbook: run as root on a node whose new kernel booted but whose checks are
# red (verify, GPU acceptance or the gate), with the round stopped.
# ACTION=prepare (OLD_ENTRY: the old kernel's full GRUB id with its submenu
# path; OLD_KERNEL: its release):
#   1. OLD_ENTRY must be an entry of grub.cfg that boots OLD_KERNEL, and the
#      node must run another kernel (else there is nothing to roll back);
#   2. on a trial kernel the trial-boot drop-in ($GRUB_DROPIN, GRUB_DEFAULT=
#      <old entry>) is kept, so the new kernel does not become the default;
#      on a promoted node (no drop-in) it is written again with GRUB_DEFAULT=
#      <old entry> and update-grub runs: the default goes back to the old
#      entry first;
#   3. a pending one-shot entry (grub-reboot's next_entry) is removed, so the
#      next boot is the default, and grub.cfg must set default="<old entry>";
#   4. records the current boot id and the plan in $STATE_DIR/$ROUND/.
# ACTION=reboot: checks the prepared state still holds, then schedules the
#   reboot a few seconds out (systemd-run --on-active=5 systemctl reboot, or
#   setsid nohup sh -c 'sleep 2; reboot') and returns at once.
# ACTION=status: boot id and running kernel against the recorded ones:
#   not_rebooted, rolled_back (a new boot id and OLD_KERNEL runs) or
#   other_kernel. The drop-in stays: a later round's promote removes it.
#
# Environment (default in brackets):
#   ACTION        prepare | reboot | status (required)
#   ROUND         round id (required)
#   OLD_ENTRY     GRUB entry id with submenu path (prepare)
#   OLD_KERNEL    release the old entry boots (prepare)
#   GRUB_CFG      [/boot/grub/grub.cfg]
#   GRUB_DIR      [/boot/grub]
#   GRUB_DROPIN   [/etc/default/grub.d/99-trial-boot.cfg]
#   BOOT_ID_FILE  [/proc/sys/kernel/random/boot_id]
#   STATE_DIR     [/var/lib/mcp-patch]
#   SYSTEMD_DIR   [/run/systemd/system]  present when systemd is PID 1
#
# Output: one JSON object (README.md, "rollback").
# Exit status: 0 ok, 1 error, 2 bad input, 3 refused.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=rollback

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
: "${OLD_KERNEL:=}"
: "${GRUB_CFG:=/boot/grub/grub.cfg}"
: "${GRUB_DIR:=/boot/grub}"
: "${GRUB_DROPIN:=/etc/default/grub.d/99-trial-boot.cfg}"
: "${BOOT_ID_FILE:=/proc/sys/kernel/random/boot_id}"
: "${STATE_DIR:=/var/lib/mcp-patch}"
: "${SYSTEMD_DIR:=/run/systemd/system}"

RE_ENTRY='[A-Za-z0-9][A-Za-z0-9._-]{0,199}(>[A-Za-z0-9][A-Za-z0-9._-]{0,199})?'
STAGE='checking input'
check ACTION "$ACTION" 'prepare|reboot|status' 'prepare, reboot or status'
check_round ROUND "$ROUND"
for v in GRUB_CFG GRUB_DIR GRUB_DROPIN BOOT_ID_FILE STATE_DIR SYSTEMD_DIR; do
	eval "check_path $v \"\$$v\""
done
if [ "$ACTION" = prepare ]; then
	check OLD_ENTRY "$OLD_ENTRY" "$RE_ENTRY" 'a GRUB entry id (submenu-id>entry-id)'
	check_kernel OLD_KERNEL "$OLD_KERNEL"
fi

dir="$STATE_DIR/$ROUND"
state="$dir/rollback.state"
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
	[ -f "$state" ] || refuse "no rollback was prepared for round $ROUND ($state is missing)"
	pre=$(state_get boot_id)
	old_kernel=$(state_get old_kernel)
	field_str recorded_boot_id "$pre"
	field_str old_kernel "$old_kernel"
	field_str from_kernel "$(state_get from_kernel)"
	field_str reboot_requested_at "$(state_get reboot_requested_at)"
	field_bool dropin_present "$(yes_if test -f "$GRUB_DROPIN")"
	if [ "$boot_id" = "$pre" ]; then
		field_bool rebooted 0
		outcome=not_rebooted
	else
		field_bool rebooted 1
		if [ "$kernel" = "$old_kernel" ]; then outcome=rolled_back; else outcome=other_kernel; fi
	fi
	field_str outcome "$outcome"
	ok 'done'
	;;
reboot)
	STAGE="reading $state"
	[ -f "$state" ] || refuse "no rollback was prepared for round $ROUND ($state is missing); run ACTION=prepare first"
	pre=$(state_get boot_id)
	[ "$boot_id" = "$pre" ] || refuse "the node already rebooted since prepare (boot id $pre, now $boot_id); run ACTION=status"
	old_entry=$(state_get old_entry)
	STAGE='checking the old entry is still the default'
	if ! grep -qxF "GRUB_DEFAULT=\"$old_entry\"" "$GRUB_DROPIN" 2>/dev/null; then
		refuse "$GRUB_DROPIN no longer sets GRUB_DEFAULT=\"$old_entry\"; run ACTION=prepare again"
	fi
	ne=$(next_entry)
	field_str next_entry "$ne"
	[ -z "$ne" ] || refuse "grubenv has a one-shot next_entry '$ne' again; run ACTION=prepare again"
	request_reboot "mcp-patch-rollback-$ROUND"
	;;
esac

# ACTION=prepare
STAGE="reading the GRUB menu in $GRUB_CFG"
[ -r "$GRUB_CFG" ] || fail "cannot read $GRUB_CFG"
entries=$(grub_entries "$GRUB_CFG")
if ! printf '%s\n' "$entries" | cut -f1 | grep -qxF -- "$OLD_ENTRY"; then
	refuse "OLD_ENTRY '$OLD_ENTRY' is not an entry of $GRUB_CFG (an id with its submenu path); GRUB would boot entry 0"
fi
entry_kernel=$(printf '%s\n' "$entries" | awk -F '\t' -v id="$OLD_ENTRY" '$1 == id { print $3; exit }')
field_str old_entry "$OLD_ENTRY"
field_str old_kernel "$OLD_KERNEL"
[ "$entry_kernel" = "$OLD_KERNEL" ] || refuse "OLD_ENTRY boots '$entry_kernel', not OLD_KERNEL $OLD_KERNEL"
[ "$kernel" != "$OLD_KERNEL" ] || refuse "the node already runs the old kernel $OLD_KERNEL: nothing to roll back (ACTION=status after a rollback says rolled_back)"

STAGE="recording the rollback in $state"
mkdir -p "$dir"
if [ -f "$GRUB_DROPIN" ] && grep -qxF "GRUB_DEFAULT=\"$OLD_ENTRY\"" "$GRUB_DROPIN"; then
	from=trial
else
	from=promoted
fi
field_str from "$from"
{
	echo "old_entry=$OLD_ENTRY"
	echo "old_kernel=$OLD_KERNEL"
	echo "from_kernel=$kernel"
	echo "from=$from"
	echo "boot_id=$boot_id"
	echo "prepared_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$state.part"
mv "$state.part" "$state"

if [ "$from" = promoted ]; then
	STAGE="writing $GRUB_DROPIN (the default goes back to the old entry)"
	mkdir -p "$(dirname "$GRUB_DROPIN")"
	{
		echo "# Rollback of round $ROUND: the old kernel is the default again. The next"
		echo "# round's promote.sh removes this file."
		printf 'GRUB_DEFAULT="%s"\n' "$OLD_ENTRY"
	} >"$GRUB_DROPIN.part"
	mv "$GRUB_DROPIN.part" "$GRUB_DROPIN"
	field_bool dropin_written 1
else
	field_bool dropin_written 0
fi
STAGE='running update-grub'
update-grub
grep -qF "set default=\"$OLD_ENTRY\"" "$GRUB_CFG" ||
	fail "after update-grub, $GRUB_CFG does not set default=\"$OLD_ENTRY\"; is GRUB_DEFAULT overridden elsewhere?"

STAGE='removing a pending one-shot entry'
if [ -n "$(next_entry)" ]; then
	grub-editenv "$grubenv" unset next_entry
fi
ne=$(next_entry)
field_str next_entry "$ne"
[ -z "$ne" ] || fail "grubenv still has next_entry '$ne'"
ok 'prepared'
}
