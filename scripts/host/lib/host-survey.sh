# The read-only survey of a node, in parts a script calls in this order:
# survey_input (the paths), survey_kernel, survey_packages, then its own
# apt simulation, survey_boot, and survey_modules for a kernel release.
: "${GRUB_CFG:=/boot/grub/grub.cfg}"
: "${GRUB_DIR:=/boot/grub}"
: "${GRUB_DEFAULTS:=/etc/default/grub}"
: "${BOOT_ID_FILE:=/proc/sys/kernel/random/boot_id}"
: "${PROC_UPTIME:=/proc/uptime}"
: "${PROC_SYS:=/proc/sys}"
: "${PROC_MDSTAT:=/proc/mdstat}"
: "${REBOOT_REQUIRED:=/var/run/reboot-required}"
: "${PROC_DRIVER_NVIDIA:=/proc/driver/nvidia}"
: "${MODULES_DIR:=/lib/modules}"

survey_input() {
	for v in GRUB_CFG GRUB_DIR GRUB_DEFAULTS BOOT_ID_FILE PROC_UPTIME PROC_SYS PROC_MDSTAT REBOOT_REQUIRED PROC_DRIVER_NVIDIA MODULES_DIR; do
		eval "check_path $v \"\$$v\""
	done
}

# survey_file NAME PATH: the file as text, every line ending in a newline
# ("" when it cannot be read).
survey_file() {
	if [ -r "$2" ]; then field "$1" "$(json_awk text <"$2")"; else field_text "$1" ''; fi
}

survey_kernel() {
	STAGE='reading the running kernel'
	kernel=$(uname -r)
	field_str kernel "$kernel"
	STAGE="reading $BOOT_ID_FILE"
	# read, a built-in, takes the first line of these one-line files.
	boot_id=''
	IFS= read -r boot_id <"$BOOT_ID_FILE" || [ -n "$boot_id" ]
	field_str boot_id "$boot_id"
	up=''
	IFS= read -r up 2>/dev/null <"$PROC_UPTIME" || true
	field_int uptime_seconds "${up%%.*}"
}

survey_packages() {
	STAGE='listing installed kernel, NVIDIA and Kubernetes packages'
	# dpkg-query exits 1 when one of the patterns matches nothing; the lines it
	# did print are still right.
	pkgs=$(dpkg-query -W -f='${Package}\t${Version}\t${db:Status-Abbrev}\n' \
		'linux-image-*' 'linux-modules-*' 'linux-headers-*' 'nvidia-*' 'libnvidia-*' \
		'containerd*' kubelet kubeadm kubectl cri-tools 2>/dev/null) || true
	field_text packages "$pkgs"

	STAGE='listing apt holds (apt-mark showhold)'
	holds=$(apt-mark showhold)
	field_lines holds "$holds"
}

survey_boot() {
	STAGE='reading GRUB configuration'
	survey_file grub_cfg "$GRUB_CFG"
	field_bool grub_cfg_present "$(yes_if [ -r "$GRUB_CFG" ])"
	if [ -r "$GRUB_DIR/grubenv" ]; then
		field_text grubenv "$(cat "$GRUB_DIR/grubenv")"
		field_int grubenv_size "$(stat -c %s "$GRUB_DIR/grubenv")"
	else
		field_text grubenv ''
	fi
	defaults=''
	for f in "$GRUB_DEFAULTS" "$GRUB_DEFAULTS".d/*.cfg; do
		[ -r "$f" ] || continue
		defaults="$defaults${defaults:+,}{\"path\":$(jstr "$f"),\"content\":$(jtext "$(cat "$f")")}"
	done
	field grub_defaults "[$defaults]"

	STAGE='checking where grubenv lives'
	boot_storage
	field_str boot_source "$BOOT_SOURCE"
	field_str boot_fstype "$BOOT_FSTYPE"
	field_bool grubenv_reliable "$GRUBENV_RELIABLE"
	field_lines grubenv_reasons "$GRUBENV_REASONS"
	survey_file mdstat "$PROC_MDSTAT"

	STAGE='reading kernel.panic'
	# cat, not the shell's read: read takes one byte per read(2), and the
	# kernel answers a read of an integer sysctl at an offset other than 0
	# with end of file, so kernel.panic = 10 would read as "1".
	panic=$(cat "$PROC_SYS/kernel/panic" 2>/dev/null) || panic=''
	field_str kernel_panic "$panic"

	STAGE='reading Livepatch status'
	if command -v canonical-livepatch >/dev/null 2>&1; then
		field_bool livepatch_present 1
		rc=0
		lp=$(canonical-livepatch status --format json 2>/dev/null) || rc=$?
		format=json
		if [ "$rc" != 0 ] || [ -z "$lp" ]; then
			rc=0
			lp=$(canonical-livepatch status --format yaml 2>&1) || rc=$?
			format=yaml
		fi
		field_str livepatch_format "$format"
		field_text livepatch_status "$lp"
		field_int livepatch_exit "$rc"
	else
		field_bool livepatch_present 0
	fi

	STAGE='reading the unattended-upgrades blacklist'
	field_text unattended_blacklist "$(apt-config dump | grep '^Unattended-Upgrade::Package-Blacklist' || true)"

	STAGE='reading reboot-required'
	field_bool reboot_required "$(yes_if [ -e "$REBOOT_REQUIRED" ])"
	survey_file reboot_required_pkgs "$REBOOT_REQUIRED.pkgs"

	STAGE='reading the NVIDIA driver version'
	survey_file nvidia_proc_version "$PROC_DRIVER_NVIDIA/version"
	if command -v nvidia-smi >/dev/null 2>&1; then
		field_str nvidia_smi_driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)"
	else
		field_str nvidia_smi_driver ''
	fi
}

# survey_modules RELEASE: the nvidia*.ko* files under $MODULES_DIR/RELEASE,
# relative to it, one per line (none when the directory is missing).
survey_modules() {
	if [ -d "$MODULES_DIR/$1" ]; then
		(cd "$MODULES_DIR/$1" && find . -name 'nvidia*.ko*' | sed 's|^\./||' | LC_ALL=C sort)
	fi
}
