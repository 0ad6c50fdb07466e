#!/bin/sh
# build-vm-image.sh — build the lab's real Debian 12 GPU-server image once.
#
# One disk that boots both ways: a GPT label with a BIOS boot partition
# (GRUB's i386-pc core image, booted by SeaBIOS), an EFI system partition
# (vfat, mounted at /boot/efi; GRUB's x86_64-efi image with an NVRAM boot
# entry written by efibootmgr, booted by OVMF) and an ext4 root holding
# /boot/grub (grub.cfg and grubenv for both). grub-pc is the installed GRUB
# package, grub-efi-amd64-bin and efibootmgr beside it. systemd as PID 1,
# sshd, the serial console on ttyS0, kernel.panic=10, and two real Debian
# kernels of the cloud flavour (linux-image-cloud-amd64: virtio, a fraction
# of the generic flavour's modules): the "running" one installed (bookworm)
# and a newer one (bookworm-security) waiting in a local apt repository
# inside the image (/srv/lab-repo), with dummy NVIDIA modules
# packages for both, Kubernetes-named packages (held) with newer versions
# in the repository, a package whose conffile changes (edited locally in the
# image, so an install must keep the local file without asking), a package
# whose update is phased at 0 %, and needrestart. The repository is the only
# apt source inside the image, so the VM needs no network.
#
# The result lands in
#
#   ${MCP_PATCH_CACHE:-$HOME/.cache/mcp-patch}/vm/<key>/
#     disk.qcow2        the base image (tests boot qcow2 overlays on it)
#     id_ed25519[.pub]  the lab's SSH key, authorized for root in the image
#     ssh_host_ed25519_key.pub  the image's host key (for known_hosts)
#     OVMF_VARS.fd      the UEFI variables after the first boot (the boot
#                       entry grub-install wrote); UEFI VMs boot a copy
#     image.env         OLD_KERNEL, NEW_KERNEL, ROOT_UUID, ... (KEY=value)
#     firstboot.log     the serial log of the first boot
#
# <key> is a hash of this script's commands (comments do not count), so a
# second run is instant. Debian packages come from the mirror this machine's
# apt uses (VM_MIRROR / VM_SECURITY_MIRROR override it). The build needs
# root (losetup, mount, chroot), debootstrap, dpkg-dev, qemu-utils,
# qemu-system-x86, ovmf and dosfstools; it takes 6-15 minutes: debootstrap,
# the kernels, then a first boot under QEMU with OVMF that runs the real
# grub-install (both targets) and update-grub (they cannot run in the build
# chroot on a loop-mounted root).
#
# Run by hand:   sh scripts/build-vm-image.sh
#                sh scripts/build-vm-image.sh --cached-only
#                  (print the image directory if it is built, else exit 3)
# Progress goes to stderr; the last line on stdout is the image directory.
set -eu

say() { printf 'build-vm-image: %s\n' "$*" >&2; }

main() {
	cached_only=false
	case ${1:-} in
	--cached-only) cached_only=true ;;
	"") ;;
	*)
		printf 'usage: %s [--cached-only]\n' "$0" >&2
		exit 2
		;;
	esac

	self=$(cd "$(dirname "$0")" && pwd)/build-vm-image.sh
	cache=${MCP_PATCH_CACHE:-$HOME/.cache/mcp-patch}/vm
	key=$(grep -v '^[[:space:]]*#' "$self" | grep -v '^[[:space:]]*say ' | sha256sum | cut -c1-16)
	dest=$cache/$key

	if built "$dest"; then
		say "cached: $dest"
		printf '%s\n' "$dest"
		exit 0
	fi
	if $cached_only; then
		say "not built yet: $dest"
		exit 3
	fi
	[ "$(id -u)" = 0 ] || {
		say "needs root (losetup, mount, chroot)"
		exit 1
	}
	for c in debootstrap dpkg-deb dpkg-scanpackages qemu-img qemu-system-x86_64 losetup sfdisk mkfs.ext4 mkfs.vfat flock ssh-keygen; do
		command -v "$c" >/dev/null 2>&1 || {
			say "missing $c (scripts/setup.sh installs it)"
			exit 1
		}
	done
	ovmf_code=${VM_OVMF_CODE:-/usr/share/OVMF/OVMF_CODE_4M.fd}
	ovmf_vars=${VM_OVMF_VARS:-/usr/share/OVMF/OVMF_VARS_4M.fd}
	for f in "$ovmf_code" "$ovmf_vars"; do
		[ -r "$f" ] || {
			say "missing $f (Debian's ovmf package; scripts/setup.sh installs it)"
			exit 1
		}
	done

	mkdir -p "$cache"
	if [ -z "${MCP_PATCH_VM_LOCKED:-}" ]; then
		say "waiting for the build lock $cache/.lock"
		MCP_PATCH_VM_LOCKED=1
		export MCP_PATCH_VM_LOCKED
		exec flock "$cache/.lock" sh "$self" "$@"
	fi
	if built "$dest"; then
		say "cached (built meanwhile): $dest"
		printf '%s\n' "$dest"
		exit 0
	fi
	for stale in "$cache"/.build-*; do
		[ -e "$stale" ] || continue
		say "removing the remains of an interrupted build: $stale"
		umount -R "$stale/root" 2>/dev/null || true
		rm -rf "$stale"
	done

	mirror=${VM_MIRROR:-$(apt_mirror '/debian$' http://deb.debian.org/debian)}
	security=${VM_SECURITY_MIRROR:-$(apt_mirror '/debian-security$' http://deb.debian.org/debian-security)}

	work=$cache/.build-$key-$$
	root=$work/root
	loop=''
	trap 'cleanup' EXIT INT TERM
	mkdir -p "$root"
	start=$(date +%s)
	say "key $key; building into $dest (mirror $mirror, security $security)"

	# The disk (GPT): 1 MiB BIOS boot partition for GRUB's i386-pc core
	# image, a 62 MiB EFI system partition, the root filesystem after it up
	# to the last MiB (the backup GPT lives at the disk's end).
	disk=$work/disk.raw
	truncate -s 3G "$disk"
	printf 'label: gpt\nstart=2048, size=2048, type=21686148-6449-6E6F-744E-656564454649, name=bios\nstart=4096, size=126976, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp\nstart=131072, size=6158336, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n' | sfdisk -q "$disk"
	# The kernel here may lack partition support (no partition nodes from
	# losetup -P), so each partition is mapped with an offset.
	loop=$(losetup -f --show -o $((4096 * 512)) --sizelimit $((126976 * 512)) "$disk")
	mkfs.vfat -n ESP "$loop" >/dev/null
	esp_uuid=$(blkid -s UUID -o value "$loop")
	losetup -d "$loop"
	loop=$(losetup -f --show -o $((131072 * 512)) --sizelimit $((6158336 * 512)) "$disk")
	mkfs.ext4 -q -L root "$loop"
	root_uuid=$(blkid -s UUID -o value "$loop" 2>/dev/null || tune2fs -l "$loop" | sed -n 's/^Filesystem UUID:[[:space:]]*//p')
	mount "$loop" "$root"
	if [ -z "$esp_uuid" ] || [ -z "$root_uuid" ]; then
		say "could not read the filesystems' UUIDs (ESP '$esp_uuid', root '$root_uuid')"
		exit 1
	fi

	say "debootstrap bookworm"
	debootstrap --variant=minbase \
		--include=systemd-sysv,udev,dbus,openssh-server,kmod,initramfs-tools,iproute2,procps,sudo,less,ca-certificates,apt-utils \
		bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
		tail -n 30 "$work/debootstrap.log" >&2
		exit 1
	}
	say "debootstrap done after $(($(date +%s) - start))s"
	# dpkg without an fsync per file: the image is rebuilt, never repaired,
	# and the install inside the VM is where most of a test's time goes.
	printf 'force-unsafe-io\n' >"$root/etc/dpkg/dpkg.cfg.d/lab-unsafe-io"

	mount -t proc proc "$root/proc"
	mount -t sysfs sys "$root/sys"
	mount --bind /dev "$root/dev"
	mount -t devpts devpts "$root/dev/pts"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod +x "$root/usr/sbin/policy-rc.d"
	cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $security bookworm-security main
EOF
	# update-grub and grub-install cannot run here; they are diverted to
	# no-ops while the image is built and restored before the first boot.
	for f in /usr/sbin/update-grub /usr/sbin/grub-install; do
		inchroot dpkg-divert --local --rename --add "$f" >/dev/null
		printf '#!/bin/sh\nexit 0\n' >"$root$f"
		chmod +x "$root$f"
	done
	inchroot apt-get update -q >"$work/apt.log" 2>&1

	# The running kernel is the one bookworm's linux-image-cloud-amd64
	# points to, the new one the one bookworm-security's points to.
	flavour=linux-image-cloud-amd64
	old_meta=$(inchroot apt-cache madison $flavour | awk -F'|' '$3 ~ /bookworm\/main/ && $3 !~ /security/ {gsub(/ /, "", $2); print $2; exit}')
	new_meta=$(inchroot apt-cache madison $flavour | awk -F'|' '$3 ~ /security/ {gsub(/ /, "", $2); print $2; exit}')
	old_pkg=$(inchroot apt-cache show "$flavour=$old_meta" | sed -n 's/^Depends: \(linux-image-[^ ,]*\).*/\1/p' | head -n 1)
	new_pkg=$(inchroot apt-cache show "$flavour=$new_meta" | sed -n 's/^Depends: \(linux-image-[^ ,]*\).*/\1/p' | head -n 1)
	old_kernel=${old_pkg#linux-image-}
	new_kernel=${new_pkg#linux-image-}
	if [ -z "$old_kernel" ] || [ -z "$new_kernel" ] || [ "$old_kernel" = "$new_kernel" ]; then
		say "could not pick two kernels (old '$old_kernel' from $old_meta, new '$new_kernel' from $new_meta)"
		exit 1
	fi
	say "kernels: running $old_kernel ($old_meta), new $new_kernel ($new_meta)"

	say "installing the running kernel, GRUB and needrestart"
	DEBIAN_FRONTEND=noninteractive inchroot apt-get install -y -q --no-install-recommends \
		"$flavour=$old_meta" "$old_pkg" grub-pc grub-efi-amd64-bin efibootmgr dosfstools needrestart zstd >>"$work/apt.log" 2>&1 || {
		tail -n 30 "$work/apt.log" >&2
		exit 1
	}
	say "installed after $(($(date +%s) - start))s"
	# Initrds built later (the new kernel's, inside the VM) hold only the
	# modules this VM needs (MODULES=most takes minutes under TCG) and are
	# compressed by zstd at level 1 (bookworm's default is level 9, and
	# gzip when zstd is missing): the update-initramfs the kernel's postinst
	# runs is the largest part of an install inside the guest.
	sed -i -e 's/^MODULES=.*/MODULES=dep/' -e 's/^COMPRESS=.*/COMPRESS=zstd/' "$root/etc/initramfs-tools/initramfs.conf"
	printf 'COMPRESSLEVEL=1\n' >>"$root/etc/initramfs-tools/initramfs.conf"

	# The local repository: the new kernel from the mirror and the lab's
	# own packages.
	repo=$root/srv/lab-repo
	mkdir -p "$repo"
	(cd "$repo" && inchroot sh -c "cd /srv/lab-repo && apt-get download -q $flavour=$new_meta $new_pkg") >>"$work/apt.log" 2>&1 || {
		tail -n 30 "$work/apt.log" >&2
		exit 1
	}
	pkgs=$work/pkgs
	mkdir -p "$pkgs/installed"
	# NVIDIA modules: a real module of each kernel under nvidia's name, so
	# depmod and the kernel's postinst see a valid .ko.
	mkdir -p "$work/newmods"
	dpkg-deb --fsys-tarfile "$repo/${new_pkg}_"*.deb | tar -x -C "$work/newmods" --wildcards "./lib/modules/$new_kernel/kernel/drivers/net/dummy.ko*"
	mkmodpkg "$old_kernel" "$old_meta" "$root/lib/modules/$old_kernel/kernel/drivers/net" "$pkgs/installed"
	mkmodpkg "$new_kernel" "$new_meta" "$work/newmods/lib/modules/$new_kernel/kernel/drivers/net" "$repo"
	mkpkg linux-modules-nvidia-550-server-generic 550.144.03+1 "Depends: linux-modules-nvidia-550-server-$old_kernel" "$pkgs/installed"
	mkpkg linux-modules-nvidia-550-server-generic 550.144.03+2 "Depends: linux-modules-nvidia-550-server-$new_kernel" "$repo"
	for p in containerd kubelet kubeadm kubectl cri-tools; do
		mkpkg "$p" 1.30.0-1.1 "" "$pkgs/installed"
		mkpkg "$p" 1.30.2-1.1 "" "$repo"
	done
	mkconfpkg 1.0 'interval = 60' "$pkgs/installed"
	mkconfpkg 1.1 'interval = 30' "$repo"
	mkpkg lab-phased-tool 1.0 "" "$pkgs/installed"
	mkpkg lab-phased-tool 1.1 "Phased-Update-Percentage: 0" "$repo"
	mkdir -p "$root/var/cache/lab-installed"
	cp "$pkgs/installed"/*.deb "$root/var/cache/lab-installed/"
	DEBIAN_FRONTEND=noninteractive inchroot sh -c 'dpkg -i /var/cache/lab-installed/*.deb' >>"$work/apt.log" 2>&1 || {
		tail -n 30 "$work/apt.log" >&2
		exit 1
	}
	rm -rf "$root/var/cache/lab-installed"
	inchroot apt-mark hold containerd kubelet kubeadm kubectl cri-tools >/dev/null
	# A local edit of the conffile: the upgrade must keep it, without asking.
	printf '# edited on this host\ninterval = 15\n' >>"$root/etc/lab-agent/agent.conf"
	(cd "$repo" && dpkg-scanpackages -m . /dev/null >Packages 2>/dev/null)
	printf 'deb [trusted=yes] file:/srv/lab-repo ./\n' >"$root/etc/apt/sources.list"
	inchroot apt-get update -q >>"$work/apt.log" 2>&1
	inchroot apt-get clean

	say "configuring the system"
	printf 'canary\n' >"$root/etc/hostname"
	printf '127.0.0.1 localhost\n127.0.1.1 canary\n' >"$root/etc/hosts"
	# nofail and a long device timeout: udev is slow to name the ESP on a
	# busy machine under TCG, and only grub-install needs it mounted.
	printf 'UUID=%s / ext4 errors=remount-ro 0 1\nUUID=%s /boot/efi vfat umask=0077,nofail,x-systemd.device-timeout=15min 0 2\n' "$root_uuid" "$esp_uuid" >"$root/etc/fstab"
	mkdir -p "$root/boot/efi"
	mkdir -p "$root/etc/systemd/network"
	printf '[Match]\nName=en* eth*\n\n[Network]\nDHCP=ipv4\n' >"$root/etc/systemd/network/10-wired.network"
	inchroot systemctl enable systemd-networkd.service >/dev/null 2>&1
	inchroot systemctl enable serial-getty@ttyS0.service >/dev/null 2>&1 || true
	# Nothing on the host waits for the network to be "online".
	inchroot systemctl mask systemd-networkd-wait-online.service >/dev/null 2>&1 || true
	# Periodic jobs that would spend the guest's one emulated CPU during a
	# test, or take the dpkg lock in the middle of one (the tests hold it
	# on purpose, with a holder they know).
	inchroot systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer >/dev/null 2>&1 || true
	printf 'kernel.panic = 10\n' >"$root/etc/sysctl.d/90-panic.conf"
	cat >"$root/etc/default/grub" <<'EOF'
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200n8"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
EOF
	# The lab's key for root; the host key is recorded for known_hosts.
	ssh-keygen -q -t ed25519 -N '' -C mcp-patch-lab-vm -f "$work/id_ed25519"
	rm -f "$root"/etc/ssh/ssh_host_*
	inchroot ssh-keygen -q -A >&2
	cp "$root/etc/ssh/ssh_host_ed25519_key.pub" "$work/ssh_host_ed25519_key.pub"
	mkdir -p "$root/root/.ssh"
	cp "$work/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
	chmod 700 "$root/root/.ssh"
	chmod 600 "$root/root/.ssh/authorized_keys"
	printf 'UseDNS no\n' >"$root/etc/ssh/sshd_config.d/lab.conf"
	# machine-id: one per image, so phased updates are decided the same way
	# in every boot of it.
	inchroot systemd-machine-id-setup >/dev/null 2>&1

	# First boot: the real grub-install and update-grub, then power off.
	mkdir -p "$root/var/lib/mcp-lab"
	cat >"$root/etc/systemd/system/mcp-lab-firstboot.service" <<'EOF'
[Unit]
Description=mcp-patch lab image: install GRUB on the disk (first boot)
ConditionPathExists=!/var/lib/mcp-lab/firstboot.done
After=local-fs.target
RequiresMountsFor=/boot/efi

[Service]
Type=oneshot
StandardOutput=journal+console
ExecStart=/bin/sh -c 'if grub-install --target=i386-pc /dev/vda && grub-install --target=x86_64-efi --efi-directory=/boot/efi --bootloader-id=debian && efibootmgr -v && update-grub; then touch /var/lib/mcp-lab/firstboot.done; echo mcp-lab-firstboot: done; else echo mcp-lab-firstboot: failed; fi; systemctl --no-block poweroff'

[Install]
WantedBy=multi-user.target
EOF
	inchroot systemctl enable mcp-lab-firstboot.service >/dev/null 2>&1
	for f in /usr/sbin/update-grub /usr/sbin/grub-install; do
		rm -f "$root$f"
		inchroot dpkg-divert --local --rename --remove "$f" >/dev/null
	done
	rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf"
	cp "$root/boot/vmlinuz-$old_kernel" "$work/vmlinuz"
	cp "$root/boot/initrd.img-$old_kernel" "$work/initrd.img"
	sync
	umount "$root/dev/pts" "$root/dev" "$root/sys" "$root/proc"
	umount "$root"
	losetup -d "$loop"
	loop=''
	say "filesystem done after $(($(date +%s) - start))s"

	# Under OVMF, so grub-install's efibootmgr writes the boot entry into
	# the variables file the UEFI VMs start from.
	say "first boot under QEMU with OVMF (grub-install for BIOS and UEFI, update-grub)"
	fb_start=$(date +%s)
	cp "$ovmf_vars" "$work/OVMF_VARS.fd"
	rc=0
	timeout 1500 qemu-system-x86_64 -m 768 -accel tcg,tb-size=256 -smp 1 -nographic -no-reboot \
		-drive "if=pflash,format=raw,unit=0,readonly=on,file=$ovmf_code" \
		-drive "if=pflash,format=raw,unit=1,file=$work/OVMF_VARS.fd" \
		-drive "file=$disk,format=raw,if=virtio" \
		-kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
		-append "root=UUID=$root_uuid ro console=ttyS0,115200n8 panic=10" \
		-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0 \
		-serial "file:$work/firstboot.log" -monitor none </dev/null >/dev/null 2>&1 || rc=$?
	if [ "$rc" != 0 ] || ! grep -q 'mcp-lab-firstboot: done' "$work/firstboot.log"; then
		say "first boot failed (qemu exit $rc); serial log tail:"
		tail -n 40 "$work/firstboot.log" >&2
		exit 1
	fi
	say "first boot took $(($(date +%s) - fb_start))s"

	qemu-img convert -O qcow2 "$disk" "$work/disk.qcow2"
	rm -f "$disk" "$work/vmlinuz" "$work/initrd.img"
	rm -rf "$work/newmods" "$pkgs"
	{
		printf 'KEY=%s\n' "$key"
		printf 'OLD_KERNEL=%s\nOLD_KERNEL_VERSION=%s\n' "$old_kernel" "$old_meta"
		printf 'NEW_KERNEL=%s\nNEW_KERNEL_VERSION=%s\n' "$new_kernel" "$new_meta"
		printf 'ROOT_UUID=%s\nESP_UUID=%s\n' "$root_uuid" "$esp_uuid"
		printf 'OVMF_CODE=%s\n' "$ovmf_code"
		printf 'MIRROR=%s\nSECURITY_MIRROR=%s\n' "$mirror" "$security"
		printf 'BUILT=%s\nSECONDS=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(($(date +%s) - start))"
	} >"$work/image.env"
	touch "$work/COMPLETE"
	rmdir "$root"
	rm -rf "$dest"
	mv "$work" "$dest"
	trap - EXIT INT TERM
	say "built in $(($(date +%s) - start))s: $(du -sh "$dest/disk.qcow2" | cut -f1) in $dest"
	printf '%s\n' "$dest"
}

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
	for m in "$root/dev/pts" "$root/dev" "$root/sys" "$root/proc" "$root"; do
		if mountpoint -q "$m" 2>/dev/null; then umount -l "$m" || true; fi
	done
	if [ -n "$loop" ]; then losetup -d "$loop" || true; fi
	rm -rf "$work"
}

inchroot() { LC_ALL=C chroot "$root" "$@"; }

# apt_mirror ERE DEFAULT: the first URI of this machine's apt sources whose
# path matches ERE.
apt_mirror() {
	found=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk '$1 == "URIs:" {for (i = 2; i <= NF; i++) print $i} $1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}' |
		sed 's|/*$||' | grep -E "$1" | head -n 1) || found=''
	printf '%s\n' "${found:-$2}"
}

# mkpkg NAME VERSION EXTRA-CONTROL-LINE OUTDIR: an empty binary package.
mkpkg() {
	d=$work/pkg-$1-$2
	mkdir -p "$d/DEBIAN" "$d/usr/share/doc/$1"
	printf 'lab package %s %s\n' "$1" "$2" >"$d/usr/share/doc/$1/README"
	{
		printf 'Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: mcp-patch lab <lab@localhost>\n' "$1" "$2"
		[ -z "$3" ] || printf '%s\n' "$3"
		printf 'Section: admin\nPriority: optional\nDescription: mcp-patch lab stand-in for %s\n' "$1"
	} >"$d/DEBIAN/control"
	dpkg-deb -Zgzip --root-owner-group --build "$d" "$4/$1_$2_amd64.deb" >/dev/null
	rm -rf "$d"
}

# mkmodpkg KERNEL VERSION DRIVERDIR OUTDIR: linux-modules-nvidia-550-server-KERNEL.
mkmodpkg() {
	name=linux-modules-nvidia-550-server-$1
	d=$work/pkg-$name
	mkdir -p "$d/DEBIAN" "$d/lib/modules/$1/kernel/nvidia-550srv"
	for m in "$3"/dummy.ko*; do
		cp "$m" "$d/lib/modules/$1/kernel/nvidia-550srv/nvidia.${m##*/dummy.}"
	done
	printf 'Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: mcp-patch lab <lab@localhost>\nDepends: linux-image-%s\nSection: kernel\nPriority: optional\nDescription: mcp-patch lab stand-in for the NVIDIA 550 modules of %s\n' \
		"$name" "$2" "$1" "$1" >"$d/DEBIAN/control"
	# shellcheck disable=SC2016 # $1 is the postinst's own argument
	printf '#!/bin/sh\nset -e\ncase "$1" in configure) depmod -a %s || true ;; esac\n' "$1" >"$d/DEBIAN/postinst"
	chmod 755 "$d/DEBIAN/postinst"
	dpkg-deb -Zgzip --root-owner-group --build "$d" "$4/${name}_$2_amd64.deb" >/dev/null
	rm -rf "$d"
}

# mkconfpkg VERSION LINE OUTDIR: lab-agent-config with conffile
# /etc/lab-agent/agent.conf.
mkconfpkg() {
	d=$work/pkg-conf-$1
	mkdir -p "$d/DEBIAN" "$d/etc/lab-agent"
	printf '# lab agent settings (package default)\n%s\n' "$2" >"$d/etc/lab-agent/agent.conf"
	printf '/etc/lab-agent/agent.conf\n' >"$d/DEBIAN/conffiles"
	printf 'Package: lab-agent-config\nVersion: %s\nArchitecture: all\nMaintainer: mcp-patch lab <lab@localhost>\nSection: admin\nPriority: optional\nDescription: mcp-patch lab package with a conffile\n' "$1" >"$d/DEBIAN/control"
	dpkg-deb -Zgzip --root-owner-group --build "$d" "$3/lab-agent-config_$1_all.deb" >/dev/null
	rm -rf "$d"
}

# built reports whether dir holds a finished image (COMPLETE is written
# last, and the directory is moved into place whole).
built() {
	[ -f "$1/disk.qcow2" ] && [ -f "$1/image.env" ] && [ -f "$1/COMPLETE" ]
}

main "$@"
exit
