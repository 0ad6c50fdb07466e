#!/bin/sh
# verify.sh — is this node healthy on its new kernel? Read-only.
#
# Runbook: run as root after the trial boot. Checks:
#   kernel    the running kernel is TARGET_KERNEL;
#   bonds     every bond in /proc/net/bonding is up with every slave up
#             (and each bond named in EXPECTED_BONDS exists);
#   rdma      every RDMA port in /sys/class/infiniband is ACTIVE / LinkUp,
#             and there are EXPECTED_RDMA_PORTS of them when given;
#   sysctls   each key=value of EXPECTED_SYSCTLS (read from /proc/sys);
#   identity  getent finds each of VERIFY_USERS and VERIFY_GROUPS (reported on its own:
#             it does not fail the node check).
# It reports the boot it checked (boot_id): the round holds later steps
# (uncordon, promote) to that boot.
#
# Environment (default in brackets):
#   TARGET_KERNEL        kernel release expected to run (required)
#   EXPECTED_BONDS       comma-separated bond names that must exist [none]
#   EXPECTED_RDMA_PORTS  number of RDMA ports expected [not checked]
#   EXPECTED_SYSCTLS     key=value,key=value [none]
#   VERIFY_USERS, VERIFY_GROUPS  comma-separated names to look up [none]
#                        (not USERS/GROUPS: bash reserves GROUPS)
#   PROC_BONDING         [/proc/net/bonding]
#   SYS_INFINIBAND       [/sys/class/infiniband]
#   PROC_SYS             [/proc/sys]
#   BOOT_ID_FILE         [/proc/sys/kernel/random/boot_id]
#
# Output: one JSON object (README.md, "verify").
# Exit status: 0 all node checks pass, 4 a check failed, 1 error, 2 bad input.
# shellcheck disable=SC2317 # shared helpers below: not every script calls each one
set -eu
# The whole body is one { } group: the shell reads all of it from stdin
# (sh -s) before running any of it, so a script cut short in transit runs
# nothing, and no command can read the rest of the script as its input.
{
STEP=verify

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

: "${TARGET_KERNEL:=}"
: "${EXPECTED_BONDS:=}"
: "${EXPECTED_RDMA_PORTS:=}"
: "${EXPECTED_SYSCTLS:=}"
: "${VERIFY_USERS:=}"
: "${VERIFY_GROUPS:=}"
: "${PROC_BONDING:=/proc/net/bonding}"
: "${SYS_INFINIBAND:=/sys/class/infiniband}"
: "${PROC_SYS:=/proc/sys}"
: "${BOOT_ID_FILE:=/proc/sys/kernel/random/boot_id}"

STAGE='checking input'
check_kernel TARGET_KERNEL "$TARGET_KERNEL"
RE_NAME='[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?'
if [ -n "$EXPECTED_BONDS" ]; then check EXPECTED_BONDS "$EXPECTED_BONDS" '[A-Za-z0-9_.-]{1,15}(,[A-Za-z0-9_.-]{1,15})*' 'a comma-separated list of interface names'; fi
if [ -n "$EXPECTED_RDMA_PORTS" ]; then check EXPECTED_RDMA_PORTS "$EXPECTED_RDMA_PORTS" '[0-9]{1,4}' 'a port count'; fi
RE_SYSCTL='[A-Za-z0-9_][A-Za-z0-9_./-]*=[^,=]*'
if [ -n "$EXPECTED_SYSCTLS" ]; then check EXPECTED_SYSCTLS "$EXPECTED_SYSCTLS" "$RE_SYSCTL(,$RE_SYSCTL)*" 'key=value,key=value'; fi
if [ -n "$VERIFY_USERS" ]; then check VERIFY_USERS "$VERIFY_USERS" "$RE_NAME(,$RE_NAME)*" 'a comma-separated list of user names'; fi
if [ -n "$VERIFY_GROUPS" ]; then check VERIFY_GROUPS "$VERIFY_GROUPS" "$RE_NAME(,$RE_NAME)*" 'a comma-separated list of group names'; fi
for v in PROC_BONDING SYS_INFINIBAND PROC_SYS BOOT_ID_FILE; do
	eval "check_path $v \"\$$v\""
done
case $EXPECTED_SYSCTLS in *..*) bad_input 'EXPECTED_SYSCTLS must not contain ..' ;; esac

problems=''
problem() { problems="$problems$1$NL"; }

STAGE='checking the running kernel'
kernel=$(uname -r)
field_str kernel "$kernel"
STAGE="reading $BOOT_ID_FILE"
field_str boot_id "$(cat "$BOOT_ID_FILE")"
field_str target_kernel "$TARGET_KERNEL"
if [ "$kernel" = "$TARGET_KERNEL" ]; then field_bool kernel_ok 1; else
	field_bool kernel_ok 0
	problem "running kernel $kernel, expected $TARGET_KERNEL"
fi

STAGE="checking bonds in $PROC_BONDING"
bonds=''
if [ -d "$PROC_BONDING" ]; then
	for f in "$PROC_BONDING"/*; do
		[ -f "$f" ] || continue
		name=${f##*/}
		bonds="$bonds${bonds:+,}{\"name\":$(jstr "$name"),\"raw\":$(jtext "$(cat "$f")")}"
		bad=$(awk -v bond="$name" '
			/^MII Status:/ && slave == "" && !seen { seen = 1; if ($3 != "up") print bond " is " $3 }
			/^Slave Interface:/ { slave = $3; slaves++ }
			/^MII Status:/ && slave != "" { if ($3 != "up") print bond " slave " slave " is " $3; slave = "" }
			END { if (!slaves) print bond " has no slaves" }' "$f")
		if [ -n "$bad" ]; then problem "$bad"; fi
	done
fi
field bonds "[$bonds]"
set -f # comma-separated lists are split, never globbed
IFS=,
for b in $EXPECTED_BONDS; do
	[ -f "$PROC_BONDING/$b" ] || problem "bond $b is missing"
done
unset IFS
set +f

STAGE="checking RDMA ports in $SYS_INFINIBAND"
ports=''
active=0
total=0
if [ -d "$SYS_INFINIBAND" ]; then
	for p in "$SYS_INFINIBAND"/*/ports/*; do
		[ -d "$p" ] || continue
		dev=${p%/ports/*}
		dev=${dev##*/}
		port=${p##*/}
		st=$(cat "$p/state" 2>/dev/null || true)
		ph=$(cat "$p/phys_state" 2>/dev/null || true)
		ll=$(cat "$p/link_layer" 2>/dev/null || true)
		rate=$(cat "$p/rate" 2>/dev/null || true)
		ports="$ports${ports:+,}{\"device\":$(jstr "$dev"),\"port\":$(jstr "$port"),\"state\":$(jstr "$st"),\"phys_state\":$(jstr "$ph"),\"link_layer\":$(jstr "$ll"),\"rate\":$(jstr "$rate")}"
		total=$((total + 1))
		case $st in
		*ACTIVE) case $ph in *LinkUp) active=$((active + 1)) ;; *) problem "RDMA $dev/$port physical state is '$ph'" ;; esac ;;
		*) problem "RDMA $dev/$port state is '$st'" ;;
		esac
	done
fi
field rdma_ports "[$ports]"
field_int rdma_ports_total "$total"
field_int rdma_ports_active "$active"
if [ -n "$EXPECTED_RDMA_PORTS" ] && [ "$total" -ne "$EXPECTED_RDMA_PORTS" ]; then
	problem "found $total RDMA ports, expected $EXPECTED_RDMA_PORTS"
fi

STAGE='checking sysctls'
sysctls=''
set -f
IFS=,
for kv in $EXPECTED_SYSCTLS; do
	unset IFS
	key=${kv%%=*}
	want=${kv#*=}
	case $key in */*) rel=$key ;; *) rel=$(printf '%s' "$key" | tr . /) ;; esac
	if [ -r "$PROC_SYS/$rel" ]; then
		have=$(tr -s ' \t' '  ' <"$PROC_SYS/$rel")
		found=1
	else
		have=''
		found=0
	fi
	want_n=$(printf '%s' "$want" | tr -s ' \t' '  ')
	if [ "$found" = 1 ] && [ "$have" = "$want_n" ]; then good=true; else
		good=false
		if [ "$found" = 1 ]; then problem "sysctl $key is '$have', expected '$want_n'"; else problem "sysctl $key does not exist"; fi
	fi
	sysctls="$sysctls${sysctls:+,}{\"key\":$(jstr "$key"),\"expected\":$(jstr "$want_n"),\"actual\":$(jstr "$have"),\"found\":$(true_if [ "$found" = 1 ]),\"ok\":$good}"
	IFS=,
done
unset IFS
set +f
field sysctls "[$sysctls]"

STAGE='looking up users and groups'
identity_problems=''
lookups() { # DATABASE LIST
	out=''
	set -f
	IFS=,
	for n in $2; do
		unset IFS
		if entry=$(getent "$1" "$n"); then f=true; else
			f=false
			entry=''
		fi
		out="$out${out:+,}{\"name\":$(jstr "$n"),\"found\":$f,\"entry\":$(jstr "$entry")}"
		IFS=,
	done
	unset IFS
	set +f
	printf '[%s]' "$out"
}
field users "$(lookups passwd "$VERIFY_USERS")"
field groups "$(lookups group "$VERIFY_GROUPS")"
# lookups ran in command substitutions: list what was not found here.
set -f
IFS=,
for n in $VERIFY_USERS; do getent passwd "$n" >/dev/null || identity_problems="${identity_problems}user $n not found$NL"; done
for n in $VERIFY_GROUPS; do getent group "$n" >/dev/null || identity_problems="${identity_problems}group $n not found$NL"; done
unset IFS
set +f
field_lines identity_problems "$identity_problems"
field_bool identity_ok "$(yes_if [ -z "$identity_problems" ])"

field_lines problems "$problems"
if [ -n "$problems" ]; then
	n=$(printf '%s' "$problems" | wc -l)
	more=''
	if [ "$n" -gt 1 ]; then more=" (and $((n - 1)) more)"; fi
	check_failed "$(printf '%s' "$problems" | head -n 1)$more"
fi
ok 'done'
}
