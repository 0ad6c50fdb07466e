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
