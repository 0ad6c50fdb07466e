# boot_space PLAN-LINES: does /boot hold the kernels the plan installs? A
# kernel whose initrd does not fit leaves dpkg half-configured. Each new
# linux-image-<release> needs about what the running kernel's files take in
# $BOOT_DIR (vmlinuz, initrd.img, System.map, config) plus 20 %, at least
# 64 MiB. Sets BOOT_FREE_KB (empty when df cannot tell), BOOT_NEED_KB,
# BOOT_NEW_KERNELS (one per line) and BOOT_SHORT (1 when it does not fit).
boot_space() {
	BOOT_NEW_KERNELS=$(printf '%s\n' "$1" | awk '$1 == "Inst" && $2 ~ /^linux-image-[0-9]/ && $3 == "-" { sub(/^linux-image-/, "", $2); print $2 }')
	per=0
	running=$(uname -r)
	for f in vmlinuz initrd.img System.map config; do
		[ -f "$BOOT_DIR/$f-$running" ] || continue
		kb=$(du -k "$BOOT_DIR/$f-$running")
		per=$((per + ${kb%%[!0-9]*}))
	done
	per=$((per * 12 / 10))
	[ "$per" -ge 65536 ] || per=65536
	n=$(printf '%s\n' "$BOOT_NEW_KERNELS" | grep -c . || true)
	BOOT_NEED_KB=$((n * per))
	BOOT_FREE_KB=$(df -Pk "$BOOT_DIR" 2>/dev/null | awk 'NR == 2 { print $4 }') || BOOT_FREE_KB=''
	BOOT_SHORT=0
	case $BOOT_FREE_KB in
	'' | *[!0-9]*) BOOT_FREE_KB='' ;;
	*) if [ "$BOOT_FREE_KB" -lt "$BOOT_NEED_KB" ]; then BOOT_SHORT=1; fi ;;
	esac
}
# boot_fields: report boot_space's findings.
boot_fields() {
	field_str boot_dir "$BOOT_DIR"
	field_int boot_free_kb "$BOOT_FREE_KB"
	field_int boot_need_kb "$BOOT_NEED_KB"
	field_lines boot_new_kernels "$BOOT_NEW_KERNELS"
	field_bool boot_short "$BOOT_SHORT"
}
# size_kb KB: a size in KiB for a person: whole MiB from 1 MiB up, KiB
# below it (336 KiB, not "0 MiB").
size_kb() {
	if [ "$1" -lt 1024 ]; then printf '%s KiB' "$1"; else printf '%s MiB' "$(($1 / 1024))"; fi
}
# boot_short_reason: the words of a /boot that is too small.
boot_short_reason() {
	printf '%s has %s free, the new kernel(s) %s need about %s (kernel and initrd, sized on the running one); free space on %s first (remove an old kernel), nothing was changed' \
		"$BOOT_DIR" "$(size_kb "$BOOT_FREE_KB")" "$(printf '%s' "$BOOT_NEW_KERNELS" | tr '\n' ' ' | sed 's/ *$//')" "$(size_kb "$BOOT_NEED_KB")" "$BOOT_DIR"
}
