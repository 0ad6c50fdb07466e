#!/bin/sh
# promote.sh — make the new kernel the default after a good trial boot.
#
# Runbook: run as root once the node passed verify (and GPU acceptance) on
# the boot of its trial boot, that boot still running.
#   1. refuses, changing nothing, unless the running kernel (uname -r) is
#      EXPECTED_KERNEL and, when EXPECTED_BOOT_ID is given, the boot is that
#      one (/proc/sys/kernel/random/boot_id): a host that fell back to the
#      old kernel, or booted again since its checks, is not promoted;
#   2. removes the trial-boot drop-in (GRUB_DEFAULT=<old entry>) if present
#      and runs update-grub;
#   3. works out what GRUB will boot next: next_entry from grubenv if set,
#      else grub.cfg's default (a number, an id, a title path, or
#      ${saved_entry} from grubenv), resolved to a menu entry;
#   4. checks that entry boots EXPECTED_KERNEL.
# Running it again only re-checks.
#
#   ssh node 'sudo env ROUND=2026-11 EXPECTED_KERNEL=6.8.0-51-generic EXPECTED_BOOT_ID=<id> sh -s' < promote.sh
#
# Environment (default in brackets):
#   ROUND            round id (required)
#   EXPECTED_KERNEL  the trial kernel to promote (required): it must be running
#   EXPECTED_BOOT_ID the trial boot's boot id [not checked]
#   BOOT_ID_FILE     [/proc/sys/kernel/random/boot_id]
#   GRUB_CFG         [/boot/grub/grub.cfg]
#   GRUB_DIR         [/boot/grub]
#   GRUB_DROPIN      [/etc/default/grub.d/99-trial-boot.cfg]
#   STATE_DIR        [/var/lib/mcp-patch]
#
# Output: one JSON object (README.md, "promote").
# Exit status: 0 ok, 1 error, 2 bad input, 3 refused (another kernel or
# boot runs; nothing was changed), 4 the default does not boot
# EXPECTED_KERNEL.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=promote

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

: "${ROUND:=}"
: "${EXPECTED_KERNEL:=}"
: "${EXPECTED_BOOT_ID:=}"
: "${BOOT_ID_FILE:=/proc/sys/kernel/random/boot_id}"
: "${GRUB_CFG:=/boot/grub/grub.cfg}"
: "${GRUB_DIR:=/boot/grub}"
: "${GRUB_DROPIN:=/etc/default/grub.d/99-trial-boot.cfg}"
: "${STATE_DIR:=/var/lib/mcp-patch}"

STAGE='checking input'
check_round ROUND "$ROUND"
for v in BOOT_ID_FILE GRUB_CFG GRUB_DIR GRUB_DROPIN STATE_DIR; do
	eval "check_path $v \"\$$v\""
done
[ -n "$EXPECTED_KERNEL" ] || bad_input 'EXPECTED_KERNEL (the trial kernel to promote) is required'
check_kernel EXPECTED_KERNEL "$EXPECTED_KERNEL"
RE_BOOT_ID='[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}'
if [ -n "$EXPECTED_BOOT_ID" ]; then check EXPECTED_BOOT_ID "$EXPECTED_BOOT_ID" "$RE_BOOT_ID" 'a boot id'; fi
field_str expected_kernel "$EXPECTED_KERNEL"
field_str expected_boot_id "$EXPECTED_BOOT_ID"

# The host as it is now, before anything changes: only the boot that was
# trial-booted and checked is promoted.
STAGE='reading the running kernel'
running=$(uname -r)
field_str running_kernel "$running"
STAGE="reading $BOOT_ID_FILE"
boot_id=$(cat "$BOOT_ID_FILE")
field_str boot_id "$boot_id"
if [ "$running" != "$EXPECTED_KERNEL" ]; then
	refuse "the running kernel is $running, not $EXPECTED_KERNEL: only a host running the trial kernel is promoted (nothing was changed)"
fi
if [ -n "$EXPECTED_BOOT_ID" ] && [ "$boot_id" != "$EXPECTED_BOOT_ID" ]; then
	refuse "the boot id is $boot_id, not $EXPECTED_BOOT_ID: the host booted again since its trial boot and checks (nothing was changed)"
fi
grubenv="$GRUB_DIR/grubenv"
dir="$STATE_DIR/$ROUND"

if [ -f "$GRUB_DROPIN" ]; then
	STAGE="recording the promotion in $dir"
	mkdir -p "$dir"
	echo "promote_started_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$dir/promote.state"
	STAGE="removing $GRUB_DROPIN"
	rm -f "$GRUB_DROPIN"
	field_bool dropin_removed 1
	STAGE='running update-grub'
	update-grub
else
	field_bool dropin_removed 0
fi

STAGE='reading grubenv'
env_list=$(grub-editenv "$grubenv" list 2>/dev/null || true)
next=$(printf '%s\n' "$env_list" | sed -n 's/^next_entry=//p')
saved=$(printf '%s\n' "$env_list" | sed -n 's/^saved_entry=//p')
field_str next_entry "$next"
field_str saved_entry "$saved"

STAGE="reading the default in $GRUB_CFG"
[ -r "$GRUB_CFG" ] || fail "cannot read $GRUB_CFG"
# shellcheck disable=SC2016 # the literal GRUB variable
cfg_default=$(sed -n 's/^[[:space:]]*set default="\(.*\)"[[:space:]]*$/\1/p' "$GRUB_CFG" | grep -vxF '${next_entry}' | head -n 1 || true)
field_str cfg_default "$cfg_default"
default=$cfg_default
# shellcheck disable=SC2016 # the literal GRUB variable
if [ "$default" = '${saved_entry}' ]; then default=$saved; fi
[ -n "$default" ] || default=0
if [ -n "$next" ]; then
	field_str next_boot_source next_entry
	default=$next
else
	field_str next_boot_source default
fi
field_str next_boot_entry "$default"

STAGE="resolving '$default' to a menu entry"
line=$(grub_entries "$GRUB_CFG" | awk -F '\t' -v d="$default" '$1 == d || $2 == d || $4 == d { print; exit }')
[ -n "$line" ] || fail "GRUB's next boot '$default' matches no menu entry of $GRUB_CFG"
field_str next_boot_id "$(printf '%s\n' "$line" | cut -f1)"
kernel=$(printf '%s\n' "$line" | cut -f3)
field_str next_boot_kernel "$kernel"
if [ "$kernel" != "$EXPECTED_KERNEL" ]; then
	check_failed "GRUB will boot '$kernel' next, not $EXPECTED_KERNEL"
fi
ok 'done'
}
