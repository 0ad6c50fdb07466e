package machine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Host directory layout (relative to Host.Dir):
//
//	state.json, state.lock   the State, under flock
//	env                      the environment of every process on the host
//	bin/                     the emulated commands (links to the tool)
//	root/                    the host's filesystem as the scripts see it:
//	  boot/ (kernels, grub/grub.cfg, grub/grubenv), etc/ (default/grub,
//	  default/grub.d, kubernetes, sysctl.d, apt/apt.conf.d, os-release),
//	  lib/modules/, run/ (reboot-required), proc/ and sys/ (files the
//	  lab refreshes: boot_id, cmdline, uptime, net/bonding, mdstat,
//	  mounts, sys/kernel/*, class/infiniband), var/log/, var/lib/.

// NewState returns the state of a freshly provisioned host.
func NewState(spec Spec) *State {
	spec = spec.withDefaults()
	s := &State{
		Hostname:    spec.Hostname,
		Role:        spec.Role,
		RootUUID:    uuidFrom("root", spec.Hostname),
		Kernel:      spec.RunningKernel + "-generic",
		KernelBuild: kernelBuild(spec.RunningKernel),
		Packages:    Catalog(spec),
		Sysctl:      map[string]string{},
		Services:    map[string]*Service{},
		Livepatch:   Livepatch{Enabled: true, PatchState: "nothing-to-apply", Tier: "updates"},
	}
	svc := func(name string) {
		s.Services[name] = &Service{Name: name, ActiveState: "active", SubState: "running", Result: "success", UnitFileState: "enabled"}
	}
	for _, n := range []string{"ssh.service", "containerd.service", "kubelet.service", "unattended-upgrades.service",
		"systemd-timesyncd.service", "snap.canonical-livepatch.canonical-livepatchd.service"} {
		svc(n)
	}
	s.Users = []User{
		{Name: "root", UID: 0, GID: 0, Gecos: "root", Home: "/root", Shell: "/bin/bash"},
		{Name: "ubuntu", UID: 1000, GID: 1000, Gecos: "Ubuntu", Home: "/home/ubuntu", Shell: "/bin/bash"},
	}
	s.Users = append(s.Users, spec.ExtraUsers...)
	s.Groups = []Group{{Name: "root", GID: 0}, {Name: "sudo", GID: 27, Members: []string{"ubuntu"}}, {Name: "ubuntu", GID: 1000}}
	s.Mounts = []Mount{
		{Target: "/", Source: "/dev/nvme0n1p2", FSType: "ext4", Options: "rw,relatime", UUID: s.RootUUID},
		{Target: "/boot/efi", Source: "/dev/nvme0n1p1", FSType: "vfat", Options: "rw,relatime,fmask=0077,dmask=0077", UUID: strings.ToUpper(idFrom(4, "efi", spec.Hostname) + "-" + idFrom(4, "efi2", spec.Hostname))},
	}
	s.Sysctl = map[string]string{
		"kernel.panic":                "0",
		"kernel.panic_on_oops":        "0",
		"vm.swappiness":               "60",
		"net.ipv4.ip_forward":         "0",
		"fs.inotify.max_user_watches": "8192",
	}
	s.Bonds = []Bond{{Name: "bond0", Slaves: []string{"enp1s0f0np0", "enp1s0f1np1"}}}
	if spec.Role == RoleGPU {
		s.GPUModel = spec.GPUModel
		s.DriverVersion = driverVersion
		s.CUDAVersion = "12.4"
		buses := []string{"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB", "1B", "2B", "3B", "5E", "9B", "AC", "BB", "DC"}
		for i := 0; i < spec.GPUs; i++ {
			bus := fmt.Sprintf("%02X", 0x18+i)
			if i < len(buses) {
				bus = buses[i]
			}
			s.GPUs = append(s.GPUs, GPU{
				Index: i, BusID: "00000000:" + bus + ":00.0", UUID: "GPU-" + uuidFrom("gpu", spec.Hostname, strconv.Itoa(i)),
				Serial: "165" + idFrom(10, "serial", spec.Hostname, strconv.Itoa(i))[:10], Module: i + 1,
			})
		}
		for i := 0; i < 8; i++ {
			s.RDMA = append(s.RDMA, RDMAPort{Device: fmt.Sprintf("mlx5_%d", i), Port: 1, State: "ACTIVE", Rate: 400,
				GUID: "0x" + idFrom(16, "guid", spec.Hostname, strconv.Itoa(i)), LinkLayer: "InfiniBand"})
		}
		svc("nvidia-fabricmanager.service")
		svc("nvidia-persistenced.service")
	}
	return s
}

func kernelBuild(abi string) string {
	_, num, _ := strings.Cut(abi, "-")
	return "#" + num + "-Ubuntu SMP PREEMPT_DYNAMIC Fri Oct 11 14:16:07 UTC 2024"
}

const defaultGrub = `# If you change this file, run 'update-grub' afterwards to update
# /boot/grub/grub.cfg.
# For full documentation of the options in this file, see:
#   info -f grub -n 'Simple configuration'

GRUB_DEFAULT=0
GRUB_TIMEOUT_STYLE=hidden
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=` + "`lsb_release -i -s 2> /dev/null || echo Debian`" + `
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX=""

# If your computer has multiple operating systems installed, then you
# probably want to run os-prober. However, if your computer is a host
# for guest OSes installed via LVM or raw disk devices, running
# os-prober can destroy those guest OSes' boot entries.
#GRUB_DISABLE_OS_PROBER=false

# Uncomment to disable generation of recovery mode menu entries
#GRUB_DISABLE_RECOVERY="true"
`

const unattendedUpgrades = `// Automatically upgrade packages from these (origin:archive) pairs
Unattended-Upgrade::Allowed-Origins {
	"${distro_id}:${distro_codename}";
	"${distro_id}:${distro_codename}-security";
	"${distro_id}ESMApps:${distro_codename}-apps-security";
	"${distro_id}ESM:${distro_codename}-infra-security";
};

// Python regular expressions, matching packages to exclude from upgrading
Unattended-Upgrade::Package-Blacklist {
	"linux-";
	"nvidia-";
	"libnvidia-";
	"containerd";
	"kube";
};

Unattended-Upgrade::DevRelease "auto";
Unattended-Upgrade::Remove-Unused-Kernel-Packages "true";
Unattended-Upgrade::Automatic-Reboot "false";
`

const autoUpgrades = `APT::Periodic::Update-Package-Lists "1";
APT::Periodic::Unattended-Upgrade "1";
`

// Populate lays out the host root for a new host: configuration, installed
// kernels and their modules, GRUB files (grub.cfg generated by the same
// code update-grub uses), an empty GRUB environment block and the runtime
// files of a first boot. path is the PATH for sourcing /etc/default/grub.
func Populate(h *Host, path string) error {
	return h.Update(func(s *State) error {
		root := h.Root()
		files := map[string]string{
			"etc/hostname":                             s.Hostname + "\n",
			"etc/os-release":                           "PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nVERSION=\"24.04.1 LTS (Noble Numbat)\"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\nUBUNTU_CODENAME=noble\n",
			"etc/lsb-release":                          "DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE=24.04\nDISTRIB_CODENAME=noble\nDISTRIB_DESCRIPTION=\"Ubuntu 24.04.1 LTS\"\n",
			"etc/default/grub":                         defaultGrub,
			"etc/default/grub.d/init-select.cfg":       "# Set by grub-pc/grub-efi postinst; nothing to select on this host.\n",
			"etc/apt/apt.conf.d/50unattended-upgrades": unattendedUpgrades,
			"etc/apt/apt.conf.d/20auto-upgrades":       autoUpgrades,
			"etc/kubernetes/kubelet.conf":              kubeconfig(s.Hostname, "system:node:"+s.Hostname),
			"etc/kubernetes/pki/ca.crt":                "-----BEGIN CERTIFICATE-----\nMIIB (lab cluster CA placeholder)\n-----END CERTIFICATE-----\n",
			"var/lib/kubelet/config.yaml":              "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n",
			"etc/passwd":                               passwdFile(s),
			"etc/group":                                groupFile(s),
		}
		if s.Role == RoleControlPlane {
			files["etc/kubernetes/admin.conf"] = kubeconfig(s.Hostname, "kubernetes-admin")
			files["etc/kubernetes/manifests/etcd.yaml"] = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - name: etcd\n    image: registry.k8s.io/etcd:3.5.15-0\n    command:\n    - etcd\n    - --data-dir=/var/lib/etcd\n    - --listen-client-urls=https://127.0.0.1:2379\n"
			files["etc/kubernetes/manifests/kube-apiserver.yaml"] = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\nspec:\n  containers:\n  - name: kube-apiserver\n    image: registry.k8s.io/kube-apiserver:v1.31.4\n"
			files["etc/kubernetes/pki/etcd/ca.crt"] = files["etc/kubernetes/pki/ca.crt"]
			files["etc/kubernetes/pki/etcd/healthcheck-client.crt"] = files["etc/kubernetes/pki/ca.crt"]
			files["etc/kubernetes/pki/etcd/healthcheck-client.key"] = "-----BEGIN PRIVATE KEY-----\n(lab placeholder)\n-----END PRIVATE KEY-----\n"
		}
		if v := s.Sysctl["kernel.panic"]; v != "0" {
			files["etc/sysctl.d/90-kernel-panic.conf"] = "kernel.panic = " + v + "\n"
		}
		for rel, content := range files {
			if err := writeFile(filepath.Join(root, rel), content); err != nil {
				return err
			}
		}
		for _, d := range []string{"run", "tmp", "root", "var/log", "var/lib/dpkg", "var/cache/apt/archives", "var/backups", "etc/sysctl.d"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				return err
			}
		}
		if err := os.Symlink("../run", filepath.Join(root, "var/run")); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		for _, p := range s.Packages {
			if p.Installed() {
				if err := InstallFiles(h, s, p); err != nil {
					return err
				}
			}
		}
		env := &GrubEnv{}
		if err := os.MkdirAll(filepath.Join(root, "boot/grub"), 0o755); err != nil {
			return err
		}
		if err := WriteGrubEnv(filepath.Join(root, "boot/grub/grubenv"), env); err != nil {
			return err
		}
		if _, err := UpdateGrub(h, s, path); err != nil {
			return err
		}
		return nil
	})
}

func kubeconfig(host, user string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: TEFCLUNB\n    server: https://k8s-api.lab:6443\n  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n    user: %s\n  name: %s@kubernetes\ncurrent-context: %s@kubernetes\nusers:\n- name: %s\n  user: {}\n# node %s\n", user, user, user, user, host)
}

func passwdFile(s *State) string {
	var b strings.Builder
	for _, u := range s.Users {
		if u.UID < 60000 {
			fmt.Fprintf(&b, "%s:x:%d:%d:%s:%s:%s\n", u.Name, u.UID, u.GID, u.Gecos, u.Home, u.Shell)
		}
	}
	return b.String()
}

func groupFile(s *State) string {
	var b strings.Builder
	for _, g := range s.Groups {
		fmt.Fprintf(&b, "%s:x:%d:%s\n", g.Name, g.GID, strings.Join(g.Members, ","))
	}
	return b.String()
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// nvidiaModuleDir is where Ubuntu's prebuilt NVIDIA modules live.
const nvidiaModuleDir = "kernel/nvidia-" + NVIDIABranch + "srv"

// packageFiles lists the files (relative to the host root) a package puts
// on disk, by kind.
func packageFiles(p *Package) []string {
	rel := p.Kernel + "-generic"
	switch p.Kind {
	case "image":
		return []string{"boot/vmlinuz-" + rel, "boot/config-" + rel, "boot/System.map-" + rel}
	case "modules":
		return []string{"lib/modules/" + rel + "/modules.dep", "lib/modules/" + rel + "/kernel/drivers/net/bonding/bonding.ko.zst"}
	case "headers":
		if p.Arch == "all" {
			return []string{"usr/src/linux-headers-" + p.Kernel + "/Makefile"}
		}
		return []string{"usr/src/linux-headers-" + rel + "/.config"}
	case "nvidia-modules":
		return []string{"lib/modules/" + rel + "/" + nvidiaModuleDir + "/nvidia.ko", "lib/modules/" + rel + "/" + nvidiaModuleDir + "/nvidia-modeset.ko"}
	}
	return nil
}

// InstallFiles puts a package's files on disk and runs what its maintainer
// scripts would: a kernel image gets its initramfs.
func InstallFiles(h *Host, s *State, p *Package) error {
	for _, f := range packageFiles(p) {
		if err := writeFile(filepath.Join(h.Root(), f), p.Name+" "+p.Version+"\n"); err != nil {
			return fmt.Errorf("install %s: %w", p.Name, err)
		}
	}
	if p.Kind == "image" {
		rel := p.Kernel + "-generic"
		if err := writeFile(h.Path("/boot/initrd.img-"+rel), "initramfs for "+rel+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// RemoveFiles deletes a package's files (and a kernel's initramfs).
func RemoveFiles(h *Host, p *Package) error {
	fs := packageFiles(p)
	if p.Kind == "image" {
		fs = append(fs, "boot/initrd.img-"+p.Kernel+"-generic")
	}
	for _, f := range fs {
		if err := os.Remove(filepath.Join(h.Root(), f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p.Name, err)
		}
	}
	if p.Kind == "modules" || p.Kind == "nvidia-modules" {
		dir := h.Path("/lib/modules/" + p.Kernel + "-generic")
		removeEmptyDirs(dir)
	}
	return nil
}

func removeEmptyDirs(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		os.Remove(d)
	}
}

// BootableKernels returns the kernel releases with an image in /boot.
func BootableKernels(h *Host) []string {
	matches, _ := filepath.Glob(h.Path("/boot/vmlinuz-*"))
	var out []string
	for _, m := range matches {
		out = append(out, strings.TrimPrefix(filepath.Base(m), "vmlinuz-"))
	}
	slices.SortFunc(out, CompareVersions)
	return out
}

// UpdateGrubResult is what update-grub did.
type UpdateGrubResult struct {
	Settings GrubSettings
	Kernels  []string // newest first
}

// UpdateGrub regenerates /boot/grub/grub.cfg from the kernels in /boot and
// the GRUB defaults, as update-grub (grub-mkconfig) does.
func UpdateGrub(h *Host, s *State, path string) (UpdateGrubResult, error) {
	set, err := LoadGrubSettings(h.Root(), path)
	if err != nil {
		return UpdateGrubResult{}, err
	}
	kernels := BootableKernels(h)
	slices.Reverse(kernels)
	layout := GrubLayout{RootUUID: s.RootUUID, MDRaid: s.Faults.BootOnMDRaid}
	if s.Faults.BootOnMDRaid {
		layout.BootUUID = uuidFrom("md0", s.Hostname)
	}
	cfg := GenerateGrubCfg(set, layout, kernels)
	if err := writeFile(h.Path("/boot/grub/grub.cfg.new"), cfg); err != nil {
		return UpdateGrubResult{}, err
	}
	if err := os.Rename(h.Path("/boot/grub/grub.cfg.new"), h.Path("/boot/grub/grub.cfg")); err != nil {
		return UpdateGrubResult{}, err
	}
	return UpdateGrubResult{Settings: set, Kernels: kernels}, nil
}

// MDUUID is the filesystem UUID of /boot when the md RAID fault is on.
func MDUUID(s *State) string { return uuidFrom("md0", s.Hostname) }

// EffectiveMounts returns the mount table including fault-driven changes.
func EffectiveMounts(s *State) []Mount {
	ms := slices.Clone(s.Mounts)
	if s.Faults.BootOnMDRaid {
		ms = append(ms, Mount{Target: "/boot", Source: "/dev/md0", FSType: "ext4", Options: "rw,relatime", UUID: MDUUID(s)})
		slices.SortStableFunc(ms, func(a, b Mount) int { return strings.Compare(a.Target, b.Target) })
	}
	return ms
}

// WriteRuntimeFiles refreshes the proc/sys-like files the scripts read
// (boot_id, cmdline, uptime, version, sysctls, modules, bonding, RDMA
// ports, mounts, mdstat, NVIDIA driver version) from the state.
func WriteRuntimeFiles(h *Host, s *State, now time.Time) error {
	files := map[string]string{
		"proc/sys/kernel/random/boot_id": s.BootID + "\n",
		"proc/cmdline":                   s.Cmdline + "\n",
		"proc/version":                   fmt.Sprintf("Linux version %s (buildd@lcy02-amd64-046) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) 13.2.0, GNU ld (GNU Binutils for Ubuntu) 2.42) %s\n", s.Kernel, s.KernelBuild),
		"proc/sys/kernel/hostname":       s.Hostname + "\n",
		"proc/sys/kernel/osrelease":      s.Kernel + "\n",
	}
	files["proc/uptime"] = UptimeLine(s, now)
	for k, v := range s.Sysctl {
		files["proc/sys/"+strings.ReplaceAll(k, ".", "/")] = v + "\n"
	}
	var mods strings.Builder
	mods.WriteString("bonding 245760 0 - Live 0x0000000000000000\nmlx5_ib 520192 0 - Live 0x0000000000000000\nmlx5_core 2580480 1 mlx5_ib, Live 0x0000000000000000\n")
	if s.DriverLoaded {
		mods.WriteString("nvidia_uvm 4911104 0 - Live 0x0000000000000000\nnvidia_modeset 1343488 0 - Live 0x0000000000000000\nnvidia 54095872 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n")
	}
	files["proc/modules"] = mods.String()
	var mounts strings.Builder
	for _, m := range EffectiveMounts(s) {
		fmt.Fprintf(&mounts, "%s %s %s %s 0 0\n", m.Source, m.Target, m.FSType, m.Options)
	}
	files["proc/self/mounts"] = mounts.String()
	files["proc/mounts"] = mounts.String()
	md := "Personalities : [raid1] [linear] [multipath] [raid0] [raid6] [raid5] [raid4] [raid10] \n"
	if s.Faults.BootOnMDRaid {
		md += "md0 : active raid1 nvme1n1p2[1] nvme0n1p3[0]\n      2094080 blocks super 1.2 [2/2] [UU]\n      \n"
	}
	md += "unused devices: <none>\n"
	files["proc/mdstat"] = md
	for _, b := range s.Bonds {
		files["proc/net/bonding/"+b.Name] = BondingFile(s, b)
	}
	for _, p := range s.RDMA {
		dir := fmt.Sprintf("sys/class/infiniband/%s/ports/%d/", p.Device, p.Port)
		state, phys := "4: ACTIVE", "5: LinkUp"
		if p.State != "ACTIVE" {
			state, phys = "1: DOWN", "3: Disabled"
		}
		files[dir+"state"] = state + "\n"
		files[dir+"phys_state"] = phys + "\n"
		files[dir+"rate"] = fmt.Sprintf("%d Gb/sec (4X NDR)\n", p.Rate)
		files[dir+"link_layer"] = p.LinkLayer + "\n"
		files["sys/class/infiniband/"+p.Device+"/node_guid"] = guidColons(p.GUID) + "\n"
		files["sys/class/infiniband/"+p.Device+"/fw_ver"] = "28.39.1002\n"
		files["sys/class/infiniband/"+p.Device+"/hca_type"] = "MT4129\n"
	}
	if s.DriverLoaded {
		files["proc/driver/nvidia/version"] = fmt.Sprintf("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Sep 24 08:07:36 UTC 2024\nGCC version:  gcc version 13.2.0 (Ubuntu 13.2.0-23ubuntu4) \n", s.DriverVersion)
		files["sys/module/nvidia/version"] = s.DriverVersion + "\n"
	}
	for _, stale := range []string{"proc/driver/nvidia", "sys/module/nvidia", "proc/net/bonding"} {
		if err := os.RemoveAll(filepath.Join(h.Root(), stale)); err != nil {
			return err
		}
	}
	for rel, content := range files {
		if err := writeFile(filepath.Join(h.Root(), rel), content); err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
	}
	return nil
}

// UptimeLine is /proc/uptime for the state at now.
func UptimeLine(s *State, now time.Time) string {
	up := now.Sub(s.BootTime).Seconds()
	if up < 0 {
		up = 0
	}
	return fmt.Sprintf("%.2f %.2f\n", up, up*15.7)
}

func guidColons(g string) string {
	g = strings.TrimPrefix(g, "0x")
	var parts []string
	for i := 0; i+4 <= len(g); i += 4 {
		parts = append(parts, g[i:i+4])
	}
	return strings.Join(parts, ":")
}

// BondingFile renders /proc/net/bonding/<bond> as the bonding driver does
// for an 802.3ad bond.
func BondingFile(s *State, b Bond) string {
	var w strings.Builder
	if slices.Contains(s.Faults.BondDownKernels, s.Kernel) && len(b.Slaves) > 0 && !slices.Contains(b.Down, b.Slaves[0]) {
		b.Down = append(slices.Clone(b.Down), b.Slaves[0])
	}
	status := "up"
	if len(b.Down) == len(b.Slaves) {
		status = "down"
	}
	fmt.Fprintf(&w, "Ethernet Channel Bonding Driver: %s\n\n", strings.SplitN(s.Kernel, "-", 2)[0])
	fmt.Fprintf(&w, "Bonding Mode: IEEE 802.3ad Dynamic link aggregation\nTransmit Hash Policy: layer3+4 (1)\nMII Status: %s\nMII Polling Interval (ms): 100\nUp Delay (ms): 0\nDown Delay (ms): 0\nPeer Notification Delay (ms): 0\n\n", status)
	fmt.Fprintf(&w, "802.3ad info\nLACP active: on\nLACP rate: fast\nMin links: 0\nAggregator selection policy (ad_select): stable\nSystem priority: 65535\nSystem MAC address: %s\n", mac(s.Hostname, b.Name))
	fmt.Fprintf(&w, "Active Aggregator Info:\n\tAggregator ID: 1\n\tNumber of ports: %d\n\tActor Key: 21\n\tPartner Key: 32785\n\tPartner Mac Address: 00:1c:73:aa:bb:cc\n", len(b.Slaves)-len(b.Down))
	for i, sl := range b.Slaves {
		st, speed, duplex := "up", "100000 Mbps", "full"
		if slices.Contains(b.Down, sl) {
			st, speed, duplex = "down", "Unknown", "Unknown"
		}
		fmt.Fprintf(&w, "\nSlave Interface: %s\nMII Status: %s\nSpeed: %s\nDuplex: %s\nLink Failure Count: 0\nPermanent HW addr: %s\nSlave queue ID: 0\nAggregator ID: 1\nActor Churn State: none\nPartner Churn State: none\nActor Churned Count: 0\nPartner Churned Count: 0\n",
			sl, st, speed, duplex, mac(s.Hostname, sl+strconv.Itoa(i)))
	}
	return w.String()
}

func mac(parts ...string) string {
	id := idFrom(10, parts...)
	return "b8:3f:d2:" + id[0:2] + ":" + id[2:4] + ":" + id[4:6]
}
