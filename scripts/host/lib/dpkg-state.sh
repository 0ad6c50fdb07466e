# dpkg_state: dpkg's state as it is now, for a survey that must not wait or
# change anything: whether a process holds its lock and which (dpkg_locked,
# dpkg_lock_holder_pid and _command),
# whether it was interrupted (dpkg_interrupted, with fix_command) and the
# packages dpkg left half-way, as `dpkg --audit` names them (dpkg_audit:
# "<package> <state>" lines, half-installed, unpacked, half-configured or
# awaiting triggers; empty when all is well).
dpkg_state() {
	holder=$(dpkg_lock_holder)
	field_bool dpkg_locked "$(yes_if [ -n "$holder" ])"
	field_int dpkg_lock_holder_pid "$holder"
	field_str dpkg_lock_holder_command "$(proc_command "$holder")"
	if dpkg_interrupted; then
		field_bool dpkg_interrupted 1
		field_str fix_command "$FIX_DPKG"
	else
		field_bool dpkg_interrupted 0
	fi
	# The package states `dpkg --audit` names as half-way (its other notes,
	# such as a missing md5sums file, stop nothing).
	audit=$(dpkg-query -W -f='${db:Status-Status} ${Package}\n' 2>/dev/null |
		awk '$1 ~ /^(half-installed|unpacked|half-configured|triggers-awaited|triggers-pending)$/ { print $2 " " $1 }') || true
	field_text dpkg_audit "$audit"
}
