package steps

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/parse"
)

// PlannedPackage is one package the upgrade moves.
type PlannedPackage struct {
	Name string `json:"name"`
	// Action is "install" (new), "upgrade", "remove" or "purge".
	Action     string   `json:"action"`
	OldVersion string   `json:"old_version,omitempty"`
	NewVersion string   `json:"new_version,omitempty"`
	Arch       string   `json:"arch,omitempty"`
	Origins    []string `json:"origins,omitempty"`
	// Class is "kernel", "nvidia", "kubernetes" or "other".
	Class string `json:"class"`
}

// PackagePlan is the package set of `apt-get -s full-upgrade`, the thing a person
// approves: its Digest is bound into the approval and re-checked on the
// node before install.
type PackagePlan struct {
	// Digest is "sha256:<hex>" over Lines (see parse.PlanDigest).
	Digest   string           `json:"digest"`
	Lines    []string         `json:"lines"`
	Packages []PlannedPackage `json:"packages"`
	// Removals are packages the upgrade would remove: any stops the round.
	Removals []string `json:"removals"`
	// Kernel, Nvidia and Kubernetes name the packages of each class moved.
	Kernel     []string `json:"kernel"`
	Nvidia     []string `json:"nvidia"`
	Kubernetes []string `json:"kubernetes"`
	// TargetKernel is the newest kernel release a linux-image package of
	// the plan installs ("" when the plan brings no new kernel).
	TargetKernel string   `json:"target_kernel"`
	KeptBack     []string `json:"kept_back"`
	// Phased are upgrades apt defers for phasing: reported, not blockers.
	Phased      []string        `json:"phased"`
	HeldChanged []string        `json:"held_changed"`
	Counts      parse.AptCounts `json:"counts"`
	// Blockers say, in words, why this plan must not go ahead as it is.
	Blockers []string `json:"blockers"`
}

// BuildPlan turns `apt-get -s full-upgrade` output into a Plan. Removals,
// changed holds and moved Kubernetes packages are blockers.
func BuildPlan(aptOutput string) PackagePlan {
	sim := parse.ParseAptSimulate(aptOutput)
	p := PackagePlan{
		Lines: nonNil(parse.PlanLines(aptOutput)), Packages: []PlannedPackage{}, Removals: []string{},
		Kernel: []string{}, Nvidia: []string{}, Kubernetes: []string{},
		KeptBack: nonNil(sim.KeptBack), Phased: nonNil(sim.Phased), HeldChanged: nonNil(sim.HeldChanged), Counts: sim.Counts, Blockers: []string{},
	}
	p.Digest = parse.DigestPlanLines(p.Lines)
	for _, a := range sim.Actions {
		var action string
		switch {
		case a.Op == "Remv":
			action = "remove"
		case a.Op == "Purg":
			action = "purge"
		case a.Op == "Inst" && a.OldVersion == "":
			action = "install"
		case a.Op == "Inst":
			action = "upgrade"
		default:
			continue
		}
		pp := PlannedPackage{Name: a.Package, Action: action, OldVersion: a.OldVersion, NewVersion: a.NewVersion,
			Arch: a.Arch, Origins: a.Origins, Class: parse.ClassifyPackage(a.Package)}
		p.Packages = append(p.Packages, pp)
		switch pp.Class {
		case parse.ClassKernel:
			p.Kernel = append(p.Kernel, pp.Name)
		case parse.ClassNvidia:
			p.Nvidia = append(p.Nvidia, pp.Name)
		case parse.ClassKubernetes:
			p.Kubernetes = append(p.Kubernetes, pp.Name)
		}
		if action == "remove" || action == "purge" {
			p.Removals = append(p.Removals, pp.Name)
		}
		if rel, ok := parse.KernelFromImagePackage(a.Package); ok && a.Op == "Inst" {
			if p.TargetKernel == "" || CompareKernelReleases(rel, p.TargetKernel) > 0 {
				p.TargetKernel = rel
			}
		}
	}
	if len(p.Removals) > 0 {
		p.Blockers = append(p.Blockers, fmt.Sprintf("the upgrade would remove %d package(s): %s", len(p.Removals), strings.Join(p.Removals, ", ")))
	}
	if len(p.HeldChanged) > 0 {
		p.Blockers = append(p.Blockers, "the upgrade would change held packages: "+strings.Join(p.HeldChanged, ", "))
	}
	if len(p.Kubernetes) > 0 {
		p.Blockers = append(p.Blockers, "the upgrade would move Kubernetes packages (they must be held): "+strings.Join(p.Kubernetes, ", "))
	}
	return p
}

// KubePackage is one of the packages that must stay held during a round.
type KubePackage struct {
	Name      string `json:"name"`
	Installed bool   `json:"installed"`
	Version   string `json:"version,omitempty"`
	Held      bool   `json:"held"`
}

// Simulation is what simulate.sh found.
type Simulation struct {
	Node string      `json:"node"`
	Plan PackagePlan `json:"plan"`
	// Kubernetes lists containerd, kubelet, kubeadm, kubectl, cri-tools:
	// installed or not, held or not.
	Kubernetes []KubePackage `json:"kubernetes"`
	// Unheld are installed Kubernetes packages without a hold.
	Unheld []string `json:"unheld"`
	Holds  []string `json:"holds"`
	// AptOutput is the raw `apt-get -s full-upgrade` output.
	AptOutput string `json:"apt_output"`
	// Boot says whether /boot has room for the kernels the plan installs.
	Boot BootSpace `json:"boot"`
	// DpkgInterrupted: dpkg stopped half-way on the node; the script
	// refused (ErrRefused) and FixCommand is what a person runs there.
	DpkgInterrupted bool   `json:"dpkg_interrupted,omitempty"`
	FixCommand      string `json:"fix_command,omitempty"`
}

// BootSpace is the free space on the filesystem holding /boot against what
// the new kernels need (each about the running kernel's vmlinuz, initrd,
// System.map and config, plus 20 %, at least 64 MiB).
type BootSpace struct {
	Dir string `json:"dir"`
	// FreeKB is nil when df could not tell.
	FreeKB     *int64   `json:"free_kb"`
	NeedKB     int64    `json:"need_kb"`
	NewKernels []string `json:"new_kernels"`
	// Short: FreeKB < NeedKB (a blocker: the kernel's initrd would not fit
	// and dpkg would stop half-configured).
	Short bool `json:"short"`
}

// ShortReason says, with the figures, why /boot is too small.
func (b BootSpace) ShortReason() string {
	free := "unknown"
	if b.FreeKB != nil {
		free = SizeKB(*b.FreeKB)
	}
	return fmt.Sprintf("%s has %s free, the new kernel(s) %s need about %s (kernel and initrd, sized on the running one); free space on %s first (remove an old kernel)",
		b.Dir, free, strings.Join(b.NewKernels, " "), SizeKB(b.NeedKB), b.Dir)
}

// SizeKB words a size given in KiB for a person: whole MiB from 1 MiB up,
// KiB below it (336 KiB, not "0 MiB").
func SizeKB(kb int64) string {
	if kb < 1024 {
		return fmt.Sprintf("%d KiB", kb)
	}
	return fmt.Sprintf("%d MiB", kb/1024)
}

// KubernetesPackages are the packages held through a round.
var KubernetesPackages = []string{"containerd", "containerd.io", "kubelet", "kubeadm", "kubectl", "cri-tools"}

// Simulate runs `apt-get -s full-upgrade` on the node (simulate.sh) and
// returns the Plan with its digest. The digest the script computed and the
// one computed here must agree, or the call fails.
func (s *Steps) Simulate(ctx context.Context, node string) (Simulation, error) {
	var o simulateOut
	if _, err := s.run(ctx, "simulate", node, nil, &o, false); err != nil {
		return Simulation{Node: node, DpkgInterrupted: o.Interrupt, FixCommand: o.FixCommand}, err
	}
	return simulationOf(node, o)
}

// simulateOut is what simulate.sh (and preflight.sh) print for the
// simulated upgrade.
type simulateOut struct {
	Packages   string   `json:"packages"`
	Holds      []string `json:"holds"`
	AptOutput  string   `json:"apt_output"`
	PlanDigest string   `json:"plan_digest"`
	PlanLines  []string `json:"plan_lines"`
	BootDir    string   `json:"boot_dir"`
	BootFreeKB *int64   `json:"boot_free_kb"`
	BootNeedKB int64    `json:"boot_need_kb"`
	BootNew    []string `json:"boot_new_kernels"`
	BootShort  bool     `json:"boot_short"`
	Interrupt  bool     `json:"dpkg_interrupted"`
	FixCommand string   `json:"fix_command"`
	Phased     []string `json:"phased"`
}

// simulationOf builds the Simulation from the script's fields. The digest
// the script computed and the one computed here must agree.
func simulationOf(node string, o simulateOut) (Simulation, error) {
	sim := Simulation{Node: node, Holds: nonNil(o.Holds), AptOutput: o.AptOutput, Kubernetes: []KubePackage{}, Unheld: []string{},
		Boot: BootSpace{Dir: o.BootDir, FreeKB: o.BootFreeKB, NeedKB: o.BootNeedKB, NewKernels: nonNil(o.BootNew), Short: o.BootShort}}
	sim.Plan = BuildPlan(o.AptOutput)
	if sim.Plan.Digest != o.PlanDigest || !slices.Equal(sim.Plan.Lines, nonNil(o.PlanLines)) {
		return sim, fmt.Errorf("simulate on node %s: %w: the node computed plan digest %s, Go computed %s", node, ErrProtocol, o.PlanDigest, sim.Plan.Digest)
	}
	byName := map[string]parse.DpkgPackage{}
	for _, p := range parse.ParseDpkgQuery(o.Packages) {
		byName[p.Name] = p
	}
	for _, name := range KubernetesPackages {
		p, ok := byName[name]
		kp := KubePackage{Name: name, Installed: ok && p.Installed, Held: slices.Contains(o.Holds, name) || (ok && p.Held)}
		if kp.Installed {
			kp.Version = p.Version
		}
		if !kp.Installed && name == "containerd.io" {
			if c, ok := byName["containerd"]; ok && c.Installed {
				continue // one containerd flavour is enough
			}
		}
		if !kp.Installed && name == "containerd" {
			if c, ok := byName["containerd.io"]; ok && c.Installed {
				continue
			}
		}
		sim.Kubernetes = append(sim.Kubernetes, kp)
		if kp.Installed && !kp.Held {
			sim.Unheld = append(sim.Unheld, name)
		}
	}
	if len(sim.Unheld) > 0 {
		sim.Plan.Blockers = append(sim.Plan.Blockers, "Kubernetes packages not held: "+strings.Join(sim.Unheld, ", ")+" (apt-mark hold them)")
	}
	for _, p := range o.Phased {
		if !slices.Contains(sim.Plan.Phased, p) {
			sim.Plan.Phased = append(sim.Plan.Phased, p)
		}
	}
	if sim.Boot.Short {
		sim.Plan.Blockers = append(sim.Plan.Blockers, sim.Boot.ShortReason())
	}
	return sim, nil
}

// CompareKernelReleases orders kernel releases such as 5.15.0-86-generic
// and 5.15.0-101-generic: runs of digits compare as numbers, the rest as
// text. It returns -1, 0 or 1.
func CompareKernelReleases(a, b string) int {
	for a != "" && b != "" {
		ad, bd := isDigit(a[0]), isDigit(b[0])
		if ad && bd {
			ai, bi := digitsEnd(a), digitsEnd(b)
			an, bn := strings.TrimLeft(a[:ai], "0"), strings.TrimLeft(b[:bi], "0")
			if len(an) != len(bn) {
				if len(an) < len(bn) {
					return -1
				}
				return 1
			}
			if c := strings.Compare(an, bn); c != 0 {
				return c
			}
			a, b = a[ai:], b[bi:]
			continue
		}
		if a[0] != b[0] {
			if a[0] < b[0] {
				return -1
			}
			return 1
		}
		a, b = a[1:], b[1:]
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	}
	return 1
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digitsEnd(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}
