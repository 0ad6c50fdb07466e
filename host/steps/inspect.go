package steps

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/parse"
)

// KernelInfo is the running kernel and boot id of a node.
type KernelInfo struct {
	Node   string `json:"node"`
	Kernel string `json:"kernel"`
	BootID string `json:"boot_id"`
}

// Kernel reads the running kernel and boot id (kernel.sh): tiny, for
// fleet-wide fan-out.
func (s *Steps) Kernel(ctx context.Context, node string) (KernelInfo, error) {
	var out struct {
		Kernel string `json:"kernel"`
		BootID string `json:"boot_id"`
	}
	_, err := s.run(ctx, "kernel", node, nil, &out, false)
	return KernelInfo{Node: node, Kernel: out.Kernel, BootID: strings.TrimSpace(out.BootID)}, err
}

// InspectInput are the inputs of Inspect.
type InspectInput struct {
	// TargetKernel, when set, is the kernel release to look for NVIDIA
	// modules for (packaged linux-modules-nvidia-*-<release> or DKMS-built).
	TargetKernel string `json:"target_kernel,omitempty"`
}

// InstalledKernel is an installed linux-image package.
type InstalledKernel struct {
	Release string `json:"release"`
	Package string `json:"package"`
	Version string `json:"version"`
	Status  string `json:"status"`
	Running bool   `json:"running"`
}

// GrubState is the boot loader as the node has it now.
type GrubState struct {
	CfgPresent bool              `json:"cfg_present"`
	Entries    []parse.GrubEntry `json:"entries"`
	// CfgDefault is grub.cfg's default (see parse.GrubMenu.Default).
	CfgDefault       string `json:"cfg_default"`
	HonoursNextEntry bool   `json:"honours_next_entry"`
	// Env are grubenv's variables (saved_entry, next_entry, ...).
	Env      map[string]string  `json:"env"`
	EnvError string             `json:"env_error,omitempty"`
	Defaults parse.GrubDefaults `json:"defaults"`
	// NextBoot is what GRUB boots next; NextBootError says why it could
	// not be worked out.
	NextBoot      parse.BootTarget `json:"next_boot"`
	NextBootError string           `json:"next_boot_error,omitempty"`
	// EnvWritableAtBoot is false when GRUB cannot write grubenv at boot
	// (mdraid, LVM/device-mapper, btrfs, zfs): a one-shot trial boot is
	// not reliable there. Reasons says why.
	EnvWritableAtBoot bool     `json:"env_writable_at_boot"`
	Reasons           []string `json:"reasons"`
	BootSource        string   `json:"boot_source"`
	BootFSType        string   `json:"boot_fstype"`
	MDStat            string   `json:"mdstat,omitempty"`
}

// LivepatchState is what canonical-livepatch says, if installed.
type LivepatchState struct {
	Present bool            `json:"present"`
	Status  parse.Livepatch `json:"status"`
	Error   string          `json:"error,omitempty"`
}

// NvidiaModules says whether NVIDIA kernel modules exist for a kernel.
type NvidiaModules struct {
	Kernel string `json:"kernel"`
	// Packages are installed linux-modules-nvidia-*-<kernel> packages.
	Packages []string `json:"packages"`
	// Files are nvidia*.ko* under /lib/modules/<kernel>, relative to it;
	// DKMS builds sit under updates/dkms/.
	Files []string `json:"files"`
	DKMS  bool     `json:"dkms"`
	// Present is true when a package or a module file exists.
	Present bool `json:"present"`
}

// Inspection is a read-only survey of a node before a round.
type Inspection struct {
	Node             string              `json:"node"`
	Kernel           string              `json:"kernel"`
	BootID           string              `json:"boot_id"`
	UptimeSeconds    int64               `json:"uptime_seconds"`
	InstalledKernels []InstalledKernel   `json:"installed_kernels"`
	NvidiaPackages   []parse.DpkgPackage `json:"nvidia_packages"`
	KubePackages     []parse.DpkgPackage `json:"kubernetes_packages"`
	Holds            []string            `json:"holds"`
	// Pending is the upgrade apt-get -s full-upgrade shows now.
	Pending      PackagePlan `json:"pending"`
	PendingError string      `json:"pending_error,omitempty"`
	Grub         GrubState   `json:"grub"`
	// KernelPanic is kernel.panic (seconds before a panicking kernel
	// reboots; 0 means never). -1 when unreadable.
	KernelPanic int            `json:"kernel_panic"`
	Livepatch   LivepatchState `json:"livepatch"`
	// UnattendedBlacklist are unattended-upgrades' Package-Blacklist
	// entries; BlacklistKernel/BlacklistNvidia say whether kernel or NVIDIA
	// packages are kept from unattended upgrades.
	UnattendedBlacklist []string `json:"unattended_blacklist"`
	BlacklistKernel     bool     `json:"blacklist_kernel"`
	BlacklistNvidia     bool     `json:"blacklist_nvidia"`
	RebootRequired      bool     `json:"reboot_required"`
	RebootRequiredPkgs  []string `json:"reboot_required_pkgs"`
	// NvidiaDriverVersion is the loaded driver's version ("" when none).
	NvidiaDriverVersion string        `json:"nvidia_driver_version"`
	TargetModules       NvidiaModules `json:"target_modules"`
	// Dpkg is dpkg's state as the survey found it, without waiting.
	Dpkg DpkgState `json:"dpkg"`
	// Boot is the room on /boot for the kernels the pending upgrade
	// installs, as simulate measures it.
	Boot BootSpace `json:"boot"`
}

// DpkgState is dpkg's state on a node, read without waiting for its lock
// or taking it.
type DpkgState struct {
	// Lock is the process holding dpkg's lock now (nil: none). Its PID is
	// nil when the lock names no process.
	Lock *DpkgLock `json:"lock,omitempty"`
	// Interrupted: dpkg stopped half-way (its journal holds entries and no
	// dpkg runs); FixCommand is what a person runs.
	Interrupted bool   `json:"interrupted"`
	FixCommand  string `json:"fix_command,omitempty"`
	// Audit names the packages dpkg left half-way ("<package> <state>"
	// lines: half-installed, unpacked, half-configured or awaiting
	// triggers, the states `dpkg --audit` reports); empty when all is well.
	Audit string `json:"audit,omitempty"`
}

type inspectOut struct {
	Kernel          string                   `json:"kernel"`
	BootID          string                   `json:"boot_id"`
	Uptime          *int64                   `json:"uptime_seconds"`
	Packages        string                   `json:"packages"`
	Holds           []string                 `json:"holds"`
	AptSimulate     string                   `json:"apt_simulate"`
	AptSimulateErr  string                   `json:"apt_simulate_stderr"`
	AptSimulateExit int                      `json:"apt_simulate_exit"`
	GrubCfg         string                   `json:"grub_cfg"`
	GrubCfgPresent  bool                     `json:"grub_cfg_present"`
	Grubenv         string                   `json:"grubenv"`
	GrubenvSize     *int64                   `json:"grubenv_size"`
	GrubDefaults    []parse.GrubDefaultsFile `json:"grub_defaults"`
	BootSource      string                   `json:"boot_source"`
	BootFSType      string                   `json:"boot_fstype"`
	GrubenvReliable bool                     `json:"grubenv_reliable"`
	GrubenvReasons  []string                 `json:"grubenv_reasons"`
	MDStat          string                   `json:"mdstat"`
	KernelPanic     string                   `json:"kernel_panic"`
	LivepatchOn     bool                     `json:"livepatch_present"`
	LivepatchFormat string                   `json:"livepatch_format"`
	LivepatchStatus string                   `json:"livepatch_status"`
	Blacklist       string                   `json:"unattended_blacklist"`
	RebootRequired  bool                     `json:"reboot_required"`
	RebootPkgs      string                   `json:"reboot_required_pkgs"`
	NvidiaProc      string                   `json:"nvidia_proc_version"`
	NvidiaSMI       string                   `json:"nvidia_smi_driver"`
	TargetMods      []string                 `json:"target_nvidia_modules"`
	Locked          bool                     `json:"dpkg_locked"`
	LockHolderPID   *int                     `json:"dpkg_lock_holder_pid"`
	LockHolderCmd   string                   `json:"dpkg_lock_holder_command"`
	Interrupted     bool                     `json:"dpkg_interrupted"`
	FixCommand      string                   `json:"fix_command"`
	DpkgAudit       string                   `json:"dpkg_audit"`
	BootDir         string                   `json:"boot_dir"`
	BootFreeKB      *int64                   `json:"boot_free_kb"`
	BootNeedKB      int64                    `json:"boot_need_kb"`
	BootNew         []string                 `json:"boot_new_kernels"`
	BootShort       bool                     `json:"boot_short"`
}

// Inspect surveys a node (inspect.sh). It changes nothing on the node.
func (s *Steps) Inspect(ctx context.Context, node string, in InspectInput) (Inspection, error) {
	env := map[string]string{}
	if in.TargetKernel != "" {
		if err := ValidateKernel("target kernel", in.TargetKernel); err != nil {
			return Inspection{}, fmt.Errorf("inspect node %s: %w", node, err)
		}
		env["TARGET_KERNEL"] = in.TargetKernel
	}
	var o inspectOut
	if _, err := s.run(ctx, "inspect", node, env, &o, false); err != nil {
		return Inspection{}, err
	}
	return inspectionOf(node, in.TargetKernel, o), nil
}

// inspectionOf builds the Inspection from the script's fields; modules are
// the NVIDIA module files found for target.
func inspectionOf(node, target string, o inspectOut) Inspection {
	ins := Inspection{
		Node: node, Kernel: o.Kernel, BootID: strings.TrimSpace(o.BootID), Holds: nonNil(o.Holds),
		InstalledKernels: []InstalledKernel{}, NvidiaPackages: []parse.DpkgPackage{}, KubePackages: []parse.DpkgPackage{},
		RebootRequired: o.RebootRequired, RebootRequiredPkgs: parse.ParseRebootRequiredPkgs(o.RebootPkgs),
		KernelPanic: -1,
	}
	if o.Uptime != nil {
		ins.UptimeSeconds = *o.Uptime
	}
	pkgs := parse.ParseDpkgQuery(o.Packages)
	for _, p := range pkgs {
		if rel, ok := parse.KernelFromImagePackage(p.Name); ok && p.Status != "un" && p.Status != "pn" {
			ins.InstalledKernels = append(ins.InstalledKernels, InstalledKernel{
				Release: rel, Package: p.Name, Version: p.Version, Status: p.Status, Running: rel == o.Kernel,
			})
			continue
		}
		if !p.Installed {
			continue
		}
		switch parse.ClassifyPackage(p.Name) {
		case parse.ClassNvidia:
			ins.NvidiaPackages = append(ins.NvidiaPackages, p)
		case parse.ClassKubernetes:
			ins.KubePackages = append(ins.KubePackages, p)
		}
	}
	sort.Slice(ins.InstalledKernels, func(i, j int) bool {
		return CompareKernelReleases(ins.InstalledKernels[i].Release, ins.InstalledKernels[j].Release) < 0
	})
	if o.AptSimulateExit == 0 {
		ins.Pending = BuildPlan(o.AptSimulate)
	} else {
		ins.PendingError = fmt.Sprintf("apt-get -s full-upgrade exited %d: %s", o.AptSimulateExit, tail(strings.TrimSpace(o.AptSimulateErr), 500))
		ins.Pending = BuildPlan("")
	}
	ins.Grub = grubState(o)
	if n, err := strconv.Atoi(strings.TrimSpace(o.KernelPanic)); err == nil {
		ins.KernelPanic = n
	}
	ins.Livepatch.Present = o.LivepatchOn
	ins.Livepatch.Status.Fixes = []string{}
	if o.LivepatchOn {
		lp, err := parse.ParseLivepatchStatus(o.LivepatchStatus, o.LivepatchFormat)
		if err != nil {
			ins.Livepatch.Error = err.Error()
		} else {
			ins.Livepatch.Status = lp
		}
	}
	ins.UnattendedBlacklist = parse.ParseAptConfigBlacklist(o.Blacklist)
	ins.BlacklistKernel = blacklistMatches(ins.UnattendedBlacklist, "linux-image-generic", "linux-image-6.8.0-45-generic")
	ins.BlacklistNvidia = blacklistMatches(ins.UnattendedBlacklist, "nvidia-driver-550", "libnvidia-compute-550", "linux-modules-nvidia-550-generic")
	if v, err := parse.ParseNvidiaProcVersion(o.NvidiaProc); err == nil {
		ins.NvidiaDriverVersion = v
	} else {
		ins.NvidiaDriverVersion = strings.TrimSpace(o.NvidiaSMI)
	}
	ins.TargetModules = targetModules(target, pkgs, o.TargetMods)
	ins.Dpkg = DpkgState{Interrupted: o.Interrupted, FixCommand: o.FixCommand, Audit: strings.TrimSpace(o.DpkgAudit)}
	if o.Locked {
		ins.Dpkg.Lock = &DpkgLock{PID: o.LockHolderPID, Command: o.LockHolderCmd}
	}
	ins.Boot = BootSpace{Dir: o.BootDir, FreeKB: o.BootFreeKB, NeedKB: o.BootNeedKB, NewKernels: nonNil(o.BootNew), Short: o.BootShort}
	return ins
}

func grubState(o inspectOut) GrubState {
	g := GrubState{
		CfgPresent: o.GrubCfgPresent, Env: map[string]string{}, EnvWritableAtBoot: o.GrubenvReliable,
		Reasons: nonNil(o.GrubenvReasons), BootSource: o.BootSource, BootFSType: o.BootFSType, MDStat: o.MDStat,
		Defaults: parse.ParseGrubDefaults(o.GrubDefaults),
	}
	menu := parse.ParseGrubCfg(o.GrubCfg)
	g.Entries = nonNil(menu.Entries)
	g.CfgDefault = menu.Default
	g.HonoursNextEntry = menu.HonoursNextEntry
	raw := o.Grubenv
	if o.GrubenvSize != nil && len(raw) == int(*o.GrubenvSize)+1 {
		// The script carries text line by line and ends it with a newline
		// the 1024-byte block does not have.
		raw = strings.TrimSuffix(raw, "\n")
	}
	env, err := parse.ParseGrubEnv([]byte(raw))
	if err != nil {
		g.EnvError = err.Error()
	} else {
		g.Env = env.Vars
	}
	nb, err := parse.NextBoot(menu, env)
	g.NextBoot = nb
	if err != nil {
		g.NextBootError = err.Error()
	}
	return g
}

// blacklistMatches says whether any unattended-upgrades blacklist entry (a
// Python regular expression matched at the start of the name) covers one
// of the sample package names. Entries that are not valid Go regular
// expressions are compared as prefixes.
func blacklistMatches(entries []string, samples ...string) bool {
	for _, e := range entries {
		re, err := compileAnchored(e)
		for _, s := range samples {
			if (err == nil && re.MatchString(s)) || (err != nil && strings.HasPrefix(s, e)) {
				return true
			}
		}
	}
	return false
}

func compileAnchored(pythonRE string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + pythonRE + `)`)
}

func targetModules(kernel string, pkgs []parse.DpkgPackage, files []string) NvidiaModules {
	m := NvidiaModules{Kernel: kernel, Packages: []string{}, Files: nonNil(files)}
	if kernel == "" {
		return m
	}
	for _, p := range pkgs {
		if p.Installed && strings.HasPrefix(p.Name, "linux-modules-nvidia-") && strings.HasSuffix(p.Name, "-"+kernel) {
			m.Packages = append(m.Packages, p.Name)
		}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "updates/dkms/") {
			m.DKMS = true
		}
	}
	m.Present = len(m.Packages) > 0 || len(m.Files) > 0
	return m
}
