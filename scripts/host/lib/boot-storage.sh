# boot_storage: can GRUB write its environment block at boot? GRUB has no
# write support for mdraid, LVM/device-mapper, btrfs or zfs; there the
# one-shot entry set by grub-reboot is never cleared, so the new kernel would
# stay the default after a panic. Sets BOOT_SOURCE, BOOT_FSTYPE,
# GRUBENV_RELIABLE (1 or 0) and GRUBENV_REASONS (one reason per line).
boot_storage() {
	BOOT_SOURCE=''
	BOOT_FSTYPE=''
	GRUBENV_REASONS=''
	fm=$(findmnt -n -r -o SOURCE,FSTYPE --target "$GRUB_DIR" 2>/dev/null) || fm=''
	read -r BOOT_SOURCE BOOT_FSTYPE <<EOT || true
$fm
EOT
	if [ -z "$BOOT_SOURCE" ]; then
		GRUBENV_REASONS="could not find the filesystem holding $GRUB_DIR"
	fi
	case $BOOT_FSTYPE in
	btrfs | zfs) GRUBENV_REASONS="$GRUBENV_REASONS$NL$GRUB_DIR is on $BOOT_FSTYPE, where GRUB cannot write grubenv" ;;
	esac
	case $BOOT_SOURCE in
	/dev/md*) GRUBENV_REASONS="$GRUBENV_REASONS$NL$GRUB_DIR is on mdraid ($BOOT_SOURCE), where GRUB cannot write grubenv" ;;
	/dev/mapper/* | /dev/dm-*) GRUBENV_REASONS="$GRUBENV_REASONS$NL$GRUB_DIR is on device-mapper (LVM or dm-crypt: $BOOT_SOURCE), where GRUB cannot write grubenv" ;;
	esac
	if [ -r "$GRUB_CFG" ] && grep -q 'GRUB lacks write support' "$GRUB_CFG"; then
		GRUBENV_REASONS="$GRUBENV_REASONS${NL}grub.cfg says: $(grep -m1 'GRUB lacks write support' "$GRUB_CFG" | sed 's/^[[:space:]#]*//')"
	fi
	GRUBENV_REASONS=$(printf '%s\n' "$GRUBENV_REASONS" | sed '/^$/d')
	if [ -z "$GRUBENV_REASONS" ]; then GRUBENV_RELIABLE=1; else GRUBENV_RELIABLE=0; fi
}
