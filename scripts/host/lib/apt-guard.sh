# Real hosts: another apt or dpkg (unattended-upgrades, a person) may hold
# dpkg's lock, and a dpkg that was interrupted must be finished by a person
# before anything else runs. Both are read the way apt reads them: apt's own
# words, and dpkg's journal ($DPKG_ADMINDIR/updates, files named by digits).
FIX_DPKG='dpkg --configure -a'
# dpkg_lock_holder: the pid of a process that holds dpkg's lock now (a lock
# on its lock or lock-frontend file in /proc/locks; "?" for a lock that
# names no process), empty when none. It never waits and never takes the
# lock.
dpkg_lock_holder() {
	admin=${DPKG_ADMINDIR:-/var/lib/dpkg}
	inodes=$(stat -c %i "$admin/lock" "$admin/lock-frontend" 2>/dev/null) || true
	[ -n "$inodes" ] && [ -r /proc/locks ] || return 0
	awk -v inodes="$inodes" 'BEGIN { n = split(inodes, l, "\n"); for (i = 1; i <= n; i++) want[l[i]] = 1 }
		$2 != "->" { k = split($6, p, ":"); if (p[k] in want) { print ($5 > 0 ? $5 : "?"); exit } }' /proc/locks
}
# dpkg_busy: does a process hold dpkg's lock now? A running dpkg keeps a
# journal too.
dpkg_busy() { [ -n "$(dpkg_lock_holder)" ]; }
# proc_command PID: the command line of a process ("" when gone).
proc_command() {
	if [ -n "$1" ] && [ -r "/proc/$1/cmdline" ]; then tr '\000' ' ' <"/proc/$1/cmdline" | sed 's/ *$//'; fi
}
# dpkg_interrupted [APT-OUTPUT-FILE]: did dpkg stop half-way? apt says so,
# or dpkg's journal holds entries while no dpkg runs.
dpkg_interrupted() {
	if [ -n "${1:-}" ] && grep -q 'dpkg was interrupted' "$1" 2>/dev/null; then return 0; fi
	[ -n "$(find "${DPKG_ADMINDIR:-/var/lib/dpkg}/updates" -maxdepth 1 -type f -name '[0-9]*' 2>/dev/null | head -n 1)" ] && ! dpkg_busy
}
# refuse_interrupted: stop before anything, naming what a person runs.
refuse_interrupted() {
	field_bool dpkg_interrupted 1
	field_str fix_command "$FIX_DPKG"
	refuse "dpkg was interrupted on this node (a package operation stopped half-way); nothing was changed. A person runs '$FIX_DPKG' as root on the node, reads its output, then runs this step again"
}
# apt_locked APT-OUTPUT-FILE: did apt give up waiting for dpkg's lock?
apt_locked() { grep -Eq 'Could not get lock|Unable to acquire the dpkg' "$1"; }
# refuse_locked APT-OUTPUT-FILE WAITED: stop, naming the holder apt named
# ("It is held by process PID (NAME)", or without the name when apt could not
# read it); when apt named none ("Could not get lock FILE" alone), the holder
# is read from /proc/locks as inspect does. The holder is left alone.
refuse_locked() {
	lpid=$(sed -n 's/.*held by process \([0-9][0-9]*\).*/\1/p' "$1" | head -n 1)
	lname=$(sed -n 's/.*held by process [0-9][0-9]* (\([^)]*\)).*/\1/p' "$1" | head -n 1)
	if [ -z "$lpid" ]; then
		lpid=$(dpkg_lock_holder)
		[ "$lpid" != "?" ] || lpid=""
	fi
	lcmd=$(proc_command "$lpid")
	[ -n "$lcmd" ] || lcmd=$lname
	field_bool dpkg_locked 1
	field_int lock_holder_pid "$lpid"
	field_str lock_holder_command "$lcmd"
	field_int lock_waited_seconds "$2"
	refuse "dpkg is locked by process ${lpid:-unknown} (${lcmd:-unknown}) and stayed locked for $2 s; nothing was changed and the holder was left alone. Let it finish (or ask who runs it), then run this step again"
}
# dpkg_ready SECONDS: take and release dpkg's lock with apt itself (apt-get
# check, waiting at most SECONDS for a holder: DPkg::Lock::Timeout); refuses
# when dpkg stays locked or was interrupted. Needs $TMPD.
dpkg_ready() {
	rc=0
	# apt prints its "Waiting for cache lock" lines on stdout, errors on stderr.
	LC_ALL=C apt-get -o DPkg::Lock::Timeout="$1" check >"$TMPD/check.out" 2>&1 || rc=$?
	if [ "$rc" != 0 ] && apt_locked "$TMPD/check.out"; then refuse_locked "$TMPD/check.out" "$1"; fi
	if dpkg_interrupted "$TMPD/check.out"; then refuse_interrupted; fi
	[ "$rc" = 0 ] && return 0
	fail "apt-get check exited $rc: $(tail -n 3 "$TMPD/check.out")"
}
