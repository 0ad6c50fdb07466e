#!/bin/sh
# gpu_check.sh — is the NVIDIA stack up on this node? Read-only.
#
# Runbook: run as root after the trial boot of a GPU server. Checks that the
# NVIDIA kernel driver is loaded (/proc/driver/nvidia/version, else lsmod),
# that `nvidia-smi -q -x` works and sees EXPECTED_GPUS GPUs, and on NVSwitch
# systems that the fabric is up: the nvidia-fabricmanager service is active
# (systemctl is-active) or every GPU reports fabric state "Completed". With
# the GPU operator the driver lives in a container: set
# NVIDIA_DRIVER_ROOT=/run/nvidia/driver and nvidia-smi runs chrooted there.
# The full XML is returned for the caller to read ECC, retired pages, etc.
# It reports the boot it checked (kernel, boot_id): the round holds promote
# to that boot.
#
# Environment (default in brackets):
#   NVIDIA_DRIVER_ROOT  [/]
#   EXPECTED_GPUS       number of GPUs expected [not checked]
#   FABRIC_MANAGER      auto | required | skip [auto: required when NVSwitch
#                       devices exist]
#   PROC_DRIVER_NVIDIA  [/proc/driver/nvidia]
#   PROC_NVSWITCH       [/proc/driver/nvidia-nvswitch/devices]
#   BOOT_ID_FILE        [/proc/sys/kernel/random/boot_id]
#
# Output: one JSON object (README.md, "gpu_check").
# Exit status: 0 pass, 4 a check failed, 1 error, 2 bad input.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=gpu_check

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

: "${NVIDIA_DRIVER_ROOT:=/}"
: "${EXPECTED_GPUS:=}"
: "${FABRIC_MANAGER:=auto}"
: "${PROC_DRIVER_NVIDIA:=/proc/driver/nvidia}"
: "${PROC_NVSWITCH:=/proc/driver/nvidia-nvswitch/devices}"
: "${BOOT_ID_FILE:=/proc/sys/kernel/random/boot_id}"

STAGE='checking input'
for v in NVIDIA_DRIVER_ROOT PROC_DRIVER_NVIDIA PROC_NVSWITCH BOOT_ID_FILE; do
	eval "check_path $v \"\$$v\""
done
if [ -n "$EXPECTED_GPUS" ]; then check EXPECTED_GPUS "$EXPECTED_GPUS" '[0-9]{1,3}' 'a GPU count'; fi
check FABRIC_MANAGER "$FABRIC_MANAGER" 'auto|required|skip' 'auto, required or skip'
make_tmpdir

problems=''
problem() { problems="$problems$1$NL"; }

STAGE='reading the running kernel and boot id'
field_str kernel "$(uname -r)"
field_str boot_id "$(cat "$BOOT_ID_FILE")"

STAGE='checking the NVIDIA kernel driver'
loaded=0
if [ -r "$PROC_DRIVER_NVIDIA/version" ]; then
	loaded=1
	field_text proc_version "$(cat "$PROC_DRIVER_NVIDIA/version")"
else
	field_text proc_version ''
	if lsmod 2>/dev/null | grep -q '^nvidia '; then loaded=1; fi
fi
field_bool driver_loaded "$loaded"
[ "$loaded" = 1 ] || problem 'the nvidia kernel module is not loaded'

STAGE='running nvidia-smi -q -x'
rc=0
if [ "$NVIDIA_DRIVER_ROOT" = / ]; then
	field_str nvidia_smi_command 'nvidia-smi -q -x'
	nvidia-smi -q -x >"$TMPD/smi" 2>"$TMPD/smi.err" || rc=$?
else
	field_str nvidia_smi_command "chroot $NVIDIA_DRIVER_ROOT nvidia-smi -q -x"
	chroot "$NVIDIA_DRIVER_ROOT" nvidia-smi -q -x >"$TMPD/smi" 2>"$TMPD/smi.err" || rc=$?
fi
field_int nvidia_smi_exit "$rc"
field_text nvidia_smi_xml "$(cat "$TMPD/smi")"
field_text nvidia_smi_stderr "$(cat "$TMPD/smi.err")"
[ "$rc" = 0 ] || problem "nvidia-smi exited $rc: $(head -n 1 "$TMPD/smi.err")"
gpus=$(grep -c '<gpu id=' "$TMPD/smi" || true)
field_int gpu_count "$gpus"
if [ -n "$EXPECTED_GPUS" ] && [ "$gpus" -ne "$EXPECTED_GPUS" ]; then
	problem "nvidia-smi sees $gpus GPUs, expected $EXPECTED_GPUS"
fi

STAGE='checking NVSwitch fabric'
nvswitch=0
if [ -d "$PROC_NVSWITCH" ] && [ -n "$(ls -A "$PROC_NVSWITCH" 2>/dev/null)" ]; then nvswitch=1; fi
field_bool nvswitch_present "$nvswitch"
fm=''
if command -v systemctl >/dev/null 2>&1; then
	fm=$(systemctl is-active nvidia-fabricmanager 2>/dev/null || true)
fi
field_str fabric_manager_state "$fm"
states=$(awk '/<fabric>/ { f = 1 } /<\/fabric>/ { f = 0 }
	f && /<state>/ { s = $0; sub(/.*<state>/, "", s); sub(/<\/state>.*/, "", s); print s }' "$TMPD/smi")
field_lines fabric_states "$states"
need_fm=0
case $FABRIC_MANAGER in
required) need_fm=1 ;;
auto) need_fm=$nvswitch ;;
esac
field_bool fabric_required "$need_fm"
if [ "$need_fm" = 1 ] && [ "$fm" != active ]; then
	if [ -z "$states" ]; then
		problem "NVSwitch fabric is not up: nvidia-fabricmanager is '${fm:-unknown}' and no GPU reports a fabric state"
	elif printf '%s\n' "$states" | grep -qvx 'Completed'; then
		problem "NVSwitch fabric is not up: nvidia-fabricmanager is '${fm:-unknown}' and GPU fabric states are:$(printf '%s\n' "$states" | sort | uniq -c | tr -s ' \n' ' ')"
	fi
fi

field_lines problems "$problems"
if [ -n "$problems" ]; then
	check_failed "$(printf '%s' "$problems" | head -n 1)"
fi
ok 'done'
}
