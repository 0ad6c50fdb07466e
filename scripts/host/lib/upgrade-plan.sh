# simulate_upgrade: refuse an interrupted dpkg, simulate `apt-get -s
# full-upgrade` (fields apt_output, apt_stderr, apt_exit; a failure stops),
# the canonical plan (plan_lines, plan_digest), phased upgrades and the
# room on $BOOT_DIR for its kernels (boot_*). Sets PLAN_LINES. Needs $TMPD.
simulate_upgrade() {
	STAGE='checking dpkg finished its last run'
	if dpkg_interrupted; then refuse_interrupted; fi

	STAGE='simulating the upgrade (apt-get -s full-upgrade)'
	rc=0
	LC_ALL=C apt-get -s full-upgrade >"$TMPD/sim" 2>"$TMPD/sim.err" || rc=$?
	field apt_output "$(json_awk text <"$TMPD/sim")"
	field apt_stderr "$(json_awk text <"$TMPD/sim.err")"
	field_int apt_exit "$rc"
	if [ "$rc" != 0 ]; then
		if dpkg_interrupted "$TMPD/sim.err"; then refuse_interrupted; fi
		fail "apt-get -s full-upgrade exited $rc: $(tail -n 3 "$TMPD/sim.err")"
	fi

	STAGE='computing the plan digest'
	lines=$(plan_lines <"$TMPD/sim" | LC_ALL=C sort)
	# plan_digest over the sorted lines at hand (each ends in a newline).
	if [ -n "$lines" ]; then digest=$(printf '%s\n' "$lines" | sha256sum); else digest=$(sha256sum </dev/null); fi
	digest="sha256:${digest%% *}"
	field_lines plan_lines "$lines"
	field_str plan_digest "$digest"

	STAGE='finding upgrades kept back by phasing (apt-cache policy)'
	# apt 2.6 lists a phased upgrade among "kept back"; apt-cache policy marks
	# its candidate "(phased N%)". Newer apt prints its own section (parsed in Go).
	kept=$(awk '/^The following packages have been kept back:/ { f = 1; next } f && /^  / { for (i = 1; i <= NF; i++) print $i; next } { f = 0 }' "$TMPD/sim")
	phased=''
	if [ -n "$kept" ] && command -v apt-cache >/dev/null 2>&1; then
		# shellcheck disable=SC2086 # one package name per word
		phased=$(LC_ALL=C apt-cache policy $kept 2>/dev/null | awk '/^[^ ]/ { p = $1; sub(/:$/, "", p) } /\(phased [0-9]+%\)/ && p != "" { print p; p = "" }')
	fi
	field_lines phased "$phased"

	STAGE="checking $BOOT_DIR has room for the new kernels"
	# shellcheck disable=SC2034 # preflight.sh reads it
	PLAN_LINES=$lines
	boot_space "$lines"
	boot_fields
}
