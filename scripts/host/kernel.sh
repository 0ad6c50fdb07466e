#!/bin/sh
# kernel.sh — the running kernel and boot id, nothing else (fleet fan-out).
#
# Environment: BOOT_ID_FILE [/proc/sys/kernel/random/boot_id]
#
# Output: {"step":"kernel","status":"ok","reason":"","kernel":..,"boot_id":..}
# Exit status: 0 ok, 1 error, 2 bad input.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=kernel

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

: "${BOOT_ID_FILE:=/proc/sys/kernel/random/boot_id}"
STAGE='checking input'
check_path BOOT_ID_FILE "$BOOT_ID_FILE"
STAGE='reading the running kernel'
kernel=$(uname -r)
field_str kernel "$kernel"
STAGE="reading $BOOT_ID_FILE"
boot_id=$(cat "$BOOT_ID_FILE")
field_str boot_id "$boot_id"
ok 'done'
}
