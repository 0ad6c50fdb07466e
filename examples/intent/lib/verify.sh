# shellcheck shell=sh
# Helpers shared by every <component>/verify.sh. Sourced, never run alone.
#
# Each check prints one line on stderr ("ok", "FAIL" or "skip" and what it
# checked); v_finish prints one JSON summary on stdout and exits:
#   0  every check that ran passed
#   1  at least one check failed
#   3  a live check was required (MCP_PATCH_VERIFY_REQUIRE_LIVE=1) but could not run

v_passed=0
v_failed=0
v_skipped=0
v_live_missing=0
v_kubectl=${MCP_PATCH_KUBECTL:-kubectl}
v_request_timeout=${MCP_PATCH_REQUEST_TIMEOUT:-10s}

v_ok() {
	v_passed=$((v_passed + 1))
	printf 'ok    %s\n' "$*" >&2
}

v_fail() {
	v_failed=$((v_failed + 1))
	printf 'FAIL  %s\n' "$*" >&2
}

# v_skip_live: a live check that could not run (no cluster, no endpoint).
v_skip_live() {
	v_skipped=$((v_skipped + 1))
	v_live_missing=1
	printf 'skip  %s\n' "$*" >&2
}

# v_setting FILE KEY/KEY/... prints one scalar from settings.yaml, without
# quotes. settings.yaml keeps to the subset this reader understands: block
# mappings indented by two spaces, scalars, flow lists of scalars, comments.
# Keys may contain dots (sysctl names), so the path separator is "/".
v_setting() {
	awk -v path="$2" '
	BEGIN { n = split(path, want, "/") }
	/^[ ]*#/ || /^[ ]*$/ { next }
	{
		line = $0
		sub(/[ ]+#.*$/, "", line)
		match(line, /^ */)
		level = RLENGTH / 2 + 1
		body = substr(line, RLENGTH + 1)
		colon = index(body, ":")
		if (colon == 0) next
		key = substr(body, 1, colon - 1)
		val = substr(body, colon + 1)
		sub(/^[ ]+/, "", val)
		sub(/[ ]+$/, "", val)
		have[level] = key
		if (level != n) next
		for (i = 1; i <= n; i++) if (have[i] != want[i]) next
		if (val ~ /^".*"$/ || val ~ /^\047.*\047$/) val = substr(val, 2, length(val) - 2)
		print val
		exit
	}' "$1"
}

# v_keys FILE KEY/KEY prints the keys of the mapping at that path, one a line.
v_keys() {
	awk -v path="$2" '
	BEGIN { n = split(path, want, "/") }
	/^[ ]*#/ || /^[ ]*$/ { next }
	{
		line = $0
		sub(/[ ]+#.*$/, "", line)
		match(line, /^ */)
		level = RLENGTH / 2 + 1
		body = substr(line, RLENGTH + 1)
		colon = index(body, ":")
		if (colon == 0) next
		key = substr(body, 1, colon - 1)
		have[level] = key
		if (level != n + 1) next
		for (i = 1; i <= n; i++) if (have[i] != want[i]) next
		print key
	}' "$1"
}

# v_list "[a, b, c]" prints a flow list one item a line.
v_list() {
	printf '%s\n' "$1" | sed -e 's/^\[//' -e 's/\]$//' | tr ',' '\n' |
		sed -e 's/^[ ]*//' -e 's/[ ]*$//' -e 's/^"\(.*\)"$/\1/' | grep -v '^$' || true
}

# v_is_uint VALUE succeeds when VALUE is a non-negative decimal integer.
v_is_uint() {
	case $1 in
	'' | *[!0-9]*) return 1 ;;
	*) return 0 ;;
	esac
}

# v_intent_well_formed DIR checks intent.md: the four sections in order, each
# property bullet led by an id, no id used twice.
v_intent_well_formed() {
	intent="$1/intent.md"
	if [ ! -f "$intent" ]; then
		v_fail "intent.md present"
		return 0
	fi
	sections=$(awk '/^```/ { fence = !fence } !fence && /^## / { sub(/^## /, ""); print }' "$intent" | tr '\n' '|')
	if [ "$sections" = "Why it exists|Properties it must keep|Out of scope|Open questions|" ]; then
		v_ok "intent.md has the four sections in order"
	else
		v_fail "intent.md sections are '$sections', want Why it exists|Properties it must keep|Out of scope|Open questions"
	fi
	ids=$(awk '
		/^```/ { fence = !fence }
		fence { next }
		/^## / { inprops = ($0 == "## Properties it must keep") ; next }
		inprops && /^[-*] / {
			item = substr($0, 3)
			if (match(item, /^`[^`]+`/)) print substr(item, 2, RLENGTH - 2)
			else if (match(item, /^\*\*[^*]+\*\*/)) print substr(item, 3, RLENGTH - 4)
			else print "<missing-id>"
		}' "$intent")
	if [ -z "$ids" ]; then
		v_fail "intent.md lists properties"
	elif printf '%s\n' "$ids" | grep -q '^<missing-id>$'; then
		v_fail "every property in intent.md starts with an id"
	elif [ -n "$(printf '%s\n' "$ids" | sort | uniq -d)" ]; then
		v_fail "property ids are unique: $(printf '%s\n' "$ids" | sort | uniq -d | tr '\n' ' ')"
	else
		v_ok "intent.md properties have unique ids ($(printf '%s\n' "$ids" | tr '\n' ' ' | sed 's/ $//'))"
	fi
}

# v_cluster_reachable succeeds when kubectl answers /readyz within the timeout.
v_cluster_reachable() {
	command -v "$v_kubectl" >/dev/null 2>&1 || return 1
	"$v_kubectl" --request-timeout="$v_request_timeout" get --raw=/readyz >/dev/null 2>&1
}

# v_kube ARGS... runs kubectl with the request timeout.
v_kube() {
	"$v_kubectl" --request-timeout="$v_request_timeout" "$@"
}

# v_finish COMPONENT prints the summary and exits with the documented status.
v_finish() {
	if [ "$v_failed" -gt 0 ]; then
		result=fail
		status=1
	elif [ "$v_live_missing" -eq 1 ] && [ "${MCP_PATCH_VERIFY_REQUIRE_LIVE:-0}" = 1 ]; then
		result=live_checks_missing
		status=3
	else
		result=pass
		status=0
	fi
	printf '{"component":"%s","result":"%s","passed":%d,"failed":%d,"skipped":%d}\n' \
		"$1" "$result" "$v_passed" "$v_failed" "$v_skipped"
	exit "$status"
}
