package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

// Fault is a failure the lab plays on a host. Inject applies it; Clear
// (by name) takes it back.
type Fault interface {
	// Name is the fault's CLI name ("kernel-panic", "hang-on-boot", ...).
	Name() string
	// Description says what the fault does, for people.
	Description() string
	apply(h *Host, s *machine.State) error
	clear(h *Host, s *machine.State) error
}

// NewKernel is the kernel release the archive offers to every host.
const NewKernel = "6.8.0-51-generic"

// OldKernel is the kernel release every host runs when the fleet starts.
const OldKernel = "6.8.0-48-generic"

// KernelPanic makes a kernel panic while it boots.
type KernelPanic struct {
	// Kernel is the release that panics; "" means NewKernel.
	Kernel string
}

func (KernelPanic) Name() string { return "kernel-panic" }
func (f KernelPanic) Description() string {
	return "kernel " + orDefault(f.Kernel, NewKernel) + " panics at boot; with a panic timeout (panic=N or kernel.panic) the host reboots into GRUB's default entry, without one it stays down"
}
func (f KernelPanic) apply(_ *Host, s *machine.State) error {
	k := orDefault(f.Kernel, NewKernel)
	if !slices.Contains(s.Faults.PanicKernels, k) {
		s.Faults.PanicKernels = append(s.Faults.PanicKernels, k)
	}
	return nil
}
func (f KernelPanic) clear(_ *Host, s *machine.State) error {
	s.Faults.PanicKernels = nil
	return nil
}

// HangOnBoot leaves the host down at its next boot, until cleared (which
// power-cycles it).
type HangOnBoot struct{}

func (HangOnBoot) Name() string { return "hang-on-boot" }
func (HangOnBoot) Description() string {
	return "the next boot hangs (no panic, so no automatic reboot); the host stays down until the fault is cleared, which power-cycles it"
}
func (HangOnBoot) apply(_ *Host, s *machine.State) error { s.Faults.HangOnBoot = true; return nil }
func (HangOnBoot) clear(h *Host, s *machine.State) error {
	s.Faults.HangOnBoot = false
	return nil
}

// NvidiaModulesMissing removes the prebuilt NVIDIA modules for a kernel
// from the archive: apt keeps their meta package back, the kernel is
// installed without them and the driver does not load on it.
type NvidiaModulesMissing struct {
	// Kernel is the release without modules; "" means NewKernel.
	Kernel string
}

func (NvidiaModulesMissing) Name() string { return "nvidia-modules-missing" }
func (f NvidiaModulesMissing) Description() string {
	return "the archive has no NVIDIA modules for " + orDefault(f.Kernel, NewKernel) + ": their meta package is kept back and the driver does not load when that kernel boots"
}
func (f NvidiaModulesMissing) pkgs() []string {
	k := orDefault(f.Kernel, NewKernel)
	return []string{"linux-modules-nvidia-" + machine.NVIDIABranch + "-server-" + k, "linux-objects-nvidia-" + machine.NVIDIABranch + "-server-" + k}
}
func (f NvidiaModulesMissing) apply(_ *Host, s *machine.State) error {
	for _, p := range f.pkgs() {
		if !slices.Contains(s.Faults.Unavailable, p) {
			s.Faults.Unavailable = append(s.Faults.Unavailable, p)
		}
	}
	return nil
}
func (f NvidiaModulesMissing) clear(_ *Host, s *machine.State) error {
	s.Faults.Unavailable = slices.DeleteFunc(s.Faults.Unavailable, func(p string) bool { return slices.Contains(f.pkgs(), p) })
	return nil
}

// GPUMissing makes GPUs fall off the bus at the next boot.
type GPUMissing struct {
	// Count is how many GPUs go missing; 0 means 1.
	Count int
}

func (GPUMissing) Name() string { return "gpu-missing" }
func (f GPUMissing) Description() string {
	return fmt.Sprintf("%d GPU(s) are missing after the next boot (nvidia-smi lists fewer); clearing restores them at the boot after", max(f.Count, 1))
}
func (f GPUMissing) apply(_ *Host, s *machine.State) error {
	if s.Role != machine.RoleGPU {
		return errors.New("not a GPU server")
	}
	s.Faults.GPUsMissing = max(f.Count, 1)
	return nil
}
func (GPUMissing) clear(_ *Host, s *machine.State) error { s.Faults.GPUsMissing = 0; return nil }

// FabricManagerDown fails nvidia-fabricmanager now and at every boot.
type FabricManagerDown struct{}

func (FabricManagerDown) Name() string { return "fabric-manager-down" }
func (FabricManagerDown) Description() string {
	return "nvidia-fabricmanager is failed (now and after boots); GPU fabric state stays In Progress"
}
func (FabricManagerDown) apply(h *Host, s *machine.State) error {
	if s.Role != machine.RoleGPU {
		return errors.New("not a GPU server")
	}
	s.Faults.FabricManagerDown = true
	machine.SetGPUServices(s, time.Now())
	return nil
}
func (FabricManagerDown) clear(_ *Host, s *machine.State) error {
	s.Faults.FabricManagerDown = false
	machine.SetGPUServices(s, time.Now())
	return nil
}

// AptWouldRemove makes the archive's new versions break an installed
// package, so full-upgrade would remove it.
type AptWouldRemove struct {
	// Package is the installed package removed; "" means
	// nvidia-fabricmanager-550 on GPU servers, containerd on others.
	Package string
}

func (AptWouldRemove) Name() string { return "apt-would-remove" }
func (f AptWouldRemove) Description() string {
	return "apt-get full-upgrade would remove " + orDefault(f.Package, "a package (nvidia-fabricmanager-550 or containerd)")
}
func (f AptWouldRemove) pkg(s *machine.State) string {
	if f.Package != "" {
		return f.Package
	}
	if s.Role == machine.RoleGPU {
		return "nvidia-fabricmanager-" + machine.NVIDIABranch
	}
	return "containerd"
}
func (f AptWouldRemove) apply(_ *Host, s *machine.State) error {
	p := f.pkg(s)
	if s.Packages[p] == nil || !s.Packages[p].Installed() {
		return fmt.Errorf("package %s is not installed", p)
	}
	if !slices.Contains(s.Faults.RemoveOnUpgrade, p) {
		s.Faults.RemoveOnUpgrade = append(s.Faults.RemoveOnUpgrade, p)
	}
	return nil
}
func (AptWouldRemove) clear(_ *Host, s *machine.State) error {
	s.Faults.RemoveOnUpgrade = nil
	return nil
}

// PackagePublished is an update the archive publishes after the plan was
// made: the host's package plan gains an upgrade, so a live plan differs
// from the reviewed one.
type PackagePublished struct {
	// Package is the installed package updated; "" means snapd.
	Package string
}

func (PackagePublished) Name() string { return "package-published" }
func (f PackagePublished) Description() string {
	return "the archive publishes an update of " + orDefault(f.Package, "snapd") + ": full-upgrade now upgrades it too (the plan drifts)"
}
func (f PackagePublished) apply(_ *Host, s *machine.State) error {
	_, err := machine.PublishUpdate(s, orDefault(f.Package, "snapd"))
	return err
}
func (f PackagePublished) clear(_ *Host, s *machine.State) error {
	machine.WithdrawUpdate(s, orDefault(f.Package, "snapd"))
	return nil
}

// PackageNotHeld takes the apt hold off a Kubernetes package.
type PackageNotHeld struct {
	// Package is the package unheld; "" means kubelet.
	Package string
}

func (PackageNotHeld) Name() string { return "package-not-held" }
func (f PackageNotHeld) Description() string {
	return orDefault(f.Package, "kubelet") + " is not held, so full-upgrade would upgrade it"
}
func (f PackageNotHeld) apply(_ *Host, s *machine.State) error {
	p := s.Packages[orDefault(f.Package, "kubelet")]
	if p == nil {
		return fmt.Errorf("package %s unknown", orDefault(f.Package, "kubelet"))
	}
	p.Hold = false
	return nil
}
func (f PackageNotHeld) clear(_ *Host, s *machine.State) error {
	if p := s.Packages[orDefault(f.Package, "kubelet")]; p != nil {
		p.Hold = true
	}
	return nil
}

// SSHDropMidInstall cuts the host's SSH connections once, shortly after a
// real package installation starts; the installation goes on where it
// does not depend on the session.
type SSHDropMidInstall struct{}

func (SSHDropMidInstall) Name() string { return "ssh-drop-mid-install" }
func (SSHDropMidInstall) Description() string {
	return "every SSH connection to the host is cut once, while apt-get installs; a detached install goes on"
}
func (SSHDropMidInstall) apply(_ *Host, s *machine.State) error {
	s.Faults.SSHDropMidInstall = true
	return nil
}
func (SSHDropMidInstall) clear(_ *Host, s *machine.State) error {
	s.Faults.SSHDropMidInstall = false
	return nil
}

// HostKeyChanged gives the host a new SSH host key (as a reinstall would);
// the lab known_hosts keeps the old one. Clearing restores the old key.
type HostKeyChanged struct{}

func (HostKeyChanged) Name() string { return "host-key-changed" }
func (HostKeyChanged) Description() string {
	return "the host offers a new SSH host key that the lab known_hosts does not list"
}
func (HostKeyChanged) apply(h *Host, _ *machine.State) error {
	_, priv, err := generateKey()
	if err != nil {
		return err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.hostKey = signer
	h.mu.Unlock()
	return nil
}
func (HostKeyChanged) clear(h *Host, _ *machine.State) error {
	h.mu.Lock()
	h.hostKey = h.origKey
	h.mu.Unlock()
	return nil
}

// BootOnMDRaid puts /boot on an md RAID1 device: findmnt and /proc/mdstat
// show it, grub.cfg is regenerated with diskfilter, and GRUB cannot clear
// next_entry at boot any more.
type BootOnMDRaid struct{}

func (BootOnMDRaid) Name() string { return "boot-on-mdraid" }
func (BootOnMDRaid) Description() string {
	return "/boot (and grubenv) lives on md RAID1 (/dev/md0): GRUB cannot write grubenv, so a one-shot next_entry is never cleared"
}
func (BootOnMDRaid) apply(h *Host, s *machine.State) error {
	s.Faults.BootOnMDRaid = true
	return h.refreshBootFiles(s)
}
func (BootOnMDRaid) clear(h *Host, s *machine.State) error {
	s.Faults.BootOnMDRaid = false
	return h.refreshBootFiles(s)
}

// BondSlaveDown takes a bond slave's link down (now; it stays down across
// boots until cleared).
type BondSlaveDown struct {
	// Slave is the interface; "" means the first slave of bond0.
	Slave string
}

func (BondSlaveDown) Name() string { return "bond-slave-down" }
func (f BondSlaveDown) Description() string {
	return "the bond slave " + orDefault(f.Slave, "(first of bond0)") + " loses its link: /proc/net/bonding shows it down"
}
func (f BondSlaveDown) apply(h *Host, s *machine.State) error {
	if len(s.Bonds) == 0 || len(s.Bonds[0].Slaves) == 0 {
		return errors.New("no bond")
	}
	slave := orDefault(f.Slave, s.Bonds[0].Slaves[0])
	for i := range s.Bonds {
		if slices.Contains(s.Bonds[i].Slaves, slave) {
			if !slices.Contains(s.Bonds[i].Down, slave) {
				s.Bonds[i].Down = append(s.Bonds[i].Down, slave)
			}
			return machine.WriteRuntimeFiles(h.m, s, time.Now())
		}
	}
	return fmt.Errorf("no bond has slave %s", slave)
}
func (BondSlaveDown) clear(h *Host, s *machine.State) error {
	for i := range s.Bonds {
		s.Bonds[i].Down = nil
	}
	return machine.WriteRuntimeFiles(h.m, s, time.Now())
}

// BondDownOnKernel is a NIC driver regression in a kernel: while the host
// runs that kernel, the first slave of every bond has no link. The host
// boots it fine (the trial boot is green), verify_node is red there, and
// green again once the host is back on its old kernel (rollback_node).
type BondDownOnKernel struct {
	// Kernel is the release with the regression; "" means NewKernel.
	Kernel string
}

func (BondDownOnKernel) Name() string { return "bond-down-on-new-kernel" }
func (f BondDownOnKernel) Description() string {
	return "kernel " + orDefault(f.Kernel, NewKernel) + "'s NIC driver leaves the first slave of every bond without link: it boots, verify_node is red on it and green on the old kernel"
}
func (f BondDownOnKernel) apply(h *Host, s *machine.State) error {
	k := orDefault(f.Kernel, NewKernel)
	if !slices.Contains(s.Faults.BondDownKernels, k) {
		s.Faults.BondDownKernels = append(s.Faults.BondDownKernels, k)
	}
	return machine.WriteRuntimeFiles(h.m, s, time.Now())
}
func (BondDownOnKernel) clear(h *Host, s *machine.State) error {
	s.Faults.BondDownKernels = nil
	return machine.WriteRuntimeFiles(h.m, s, time.Now())
}

// RDMAPortDown takes an RDMA port down (now; until cleared).
type RDMAPortDown struct {
	// Device is the HCA; "" means mlx5_0.
	Device string
}

func (RDMAPortDown) Name() string { return "rdma-port-down" }
func (f RDMAPortDown) Description() string {
	return "RDMA port " + orDefault(f.Device, "mlx5_0") + "/1 goes DOWN (sysfs state and phys_state)"
}
func (f RDMAPortDown) apply(h *Host, s *machine.State) error {
	dev := orDefault(f.Device, "mlx5_0")
	for i := range s.RDMA {
		if s.RDMA[i].Device == dev {
			s.RDMA[i].State = "DOWN"
			return machine.WriteRuntimeFiles(h.m, s, time.Now())
		}
	}
	return fmt.Errorf("no RDMA device %s", dev)
}
func (RDMAPortDown) clear(h *Host, s *machine.State) error {
	for i := range s.RDMA {
		s.RDMA[i].State = "ACTIVE"
	}
	return machine.WriteRuntimeFiles(h.m, s, time.Now())
}

// DpkgLocked starts a real process on this machine that holds the host's
// dpkg frontend lock (as another apt, unattended-upgrades or a person
// would) until cleared: apt waits for it and names it; install_updates
// must refuse after the lock timeout and leave it alone.
type DpkgLocked struct{}

func (DpkgLocked) Name() string { return "dpkg-locked" }
func (DpkgLocked) Description() string {
	return "another process holds dpkg's lock (/var/lib/dpkg/lock-frontend) until cleared; apt waits for it, then names it"
}
func (DpkgLocked) apply(h *Host, _ *machine.State) error { return h.holdDpkgLock() }
func (DpkgLocked) clear(h *Host, _ *machine.State) error { return h.releaseDpkgLock() }

// DpkgInterrupted leaves dpkg as a killed dpkg leaves it: apt refuses to
// do anything until a person runs dpkg --configure -a.
type DpkgInterrupted struct{}

func (DpkgInterrupted) Name() string { return "dpkg-interrupted" }
func (DpkgInterrupted) Description() string {
	return "dpkg was interrupted half-way; apt says to run 'dpkg --configure -a' first"
}
func (DpkgInterrupted) apply(_ *Host, s *machine.State) error { s.DpkgInterrupted = true; return nil }
func (DpkgInterrupted) clear(_ *Host, s *machine.State) error { s.DpkgInterrupted = false; return nil }

// BootNearlyFull leaves too little room on /boot for another kernel and
// initrd (df reports FreeKB there).
type BootNearlyFull struct {
	// FreeKB is what stays free; 0 means 20 MiB.
	FreeKB int64
}

func (BootNearlyFull) Name() string { return "boot-nearly-full" }
func (f BootNearlyFull) Description() string {
	return "/boot has " + strconv.FormatInt(f.free()/1024, 10) + " MiB free, too little for the new kernel and its initrd"
}
func (f BootNearlyFull) free() int64 {
	if f.FreeKB > 0 {
		return f.FreeKB
	}
	return 20 * 1024
}
func (f BootNearlyFull) apply(_ *Host, s *machine.State) error {
	s.Faults.BootFreeKB = f.free()
	return nil
}
func (BootNearlyFull) clear(_ *Host, s *machine.State) error { s.Faults.BootFreeKB = 0; return nil }

// PhasedUpdate makes apt defer a package's upgrade for phasing: it is
// kept back by phasing, which is neither a removal nor a failure.
type PhasedUpdate struct {
	// Package is the phased package; "" means tzdata.
	Package string
}

func (PhasedUpdate) Name() string { return "phased-update" }
func (f PhasedUpdate) Description() string {
	return "apt defers the upgrade of " + orDefault(f.Package, "tzdata") + " (phased update): kept back by phasing, not a removal"
}
func (f PhasedUpdate) apply(_ *Host, s *machine.State) error {
	p := orDefault(f.Package, "tzdata")
	if s.Packages[p] == nil {
		return fmt.Errorf("package %s unknown", p)
	}
	if !slices.Contains(s.Faults.Phased, p) {
		s.Faults.Phased = append(s.Faults.Phased, p)
	}
	return nil
}
func (PhasedUpdate) clear(_ *Host, s *machine.State) error { s.Faults.Phased = nil; return nil }

// GrubDefaultOverridden drops a local GRUB drop-in that is read after the
// trial boot's and sets GRUB_DEFAULT, so the old kernel would not stay the
// default; trial_boot must refuse before writing anything.
type GrubDefaultOverridden struct{}

// grubLocalDropin is the drop-in GrubDefaultOverridden writes.
const grubLocalDropin = "/etc/default/grub.d/99-zz-local.cfg"

func (GrubDefaultOverridden) Name() string { return "grub-default-overridden" }
func (GrubDefaultOverridden) Description() string {
	return grubLocalDropin + " sets GRUB_DEFAULT=0 and is read after the trial-boot drop-in"
}
func (GrubDefaultOverridden) apply(h *Host, _ *machine.State) error {
	p := h.m.Path(grubLocalDropin)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte("# a local override\nGRUB_DEFAULT=0\n"), 0o644)
}
func (GrubDefaultOverridden) clear(h *Host, _ *machine.State) error {
	if err := os.Remove(h.m.Path(grubLocalDropin)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (h *Host) refreshBootFiles(s *machine.State) error {
	if _, err := machine.UpdateGrub(h.m, s, h.pathEnv()); err != nil {
		return err
	}
	return machine.WriteRuntimeFiles(h.m, s, time.Now())
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// FaultInfo names and describes a fault kind.
type FaultInfo struct {
	Name        string
	Description string
	// Arg says what FaultByName's arg means for this fault ("" when none).
	Arg string
}

var faultKinds = []struct {
	info FaultInfo
	make func(arg string) (Fault, error)
}{
	{FaultInfo{"kernel-panic", KernelPanic{}.Description(), "kernel release [" + NewKernel + "]"}, func(a string) (Fault, error) { return KernelPanic{Kernel: a}, nil }},
	{FaultInfo{"hang-on-boot", HangOnBoot{}.Description(), ""}, func(string) (Fault, error) { return HangOnBoot{}, nil }},
	{FaultInfo{"nvidia-modules-missing", NvidiaModulesMissing{}.Description(), "kernel release [" + NewKernel + "]"}, func(a string) (Fault, error) { return NvidiaModulesMissing{Kernel: a}, nil }},
	{FaultInfo{"gpu-missing", GPUMissing{}.Description(), "number of GPUs [1]"}, func(a string) (Fault, error) {
		if a == "" {
			return GPUMissing{}, nil
		}
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("gpu-missing: %q is not a GPU count", a)
		}
		return GPUMissing{Count: n}, nil
	}},
	{FaultInfo{"fabric-manager-down", FabricManagerDown{}.Description(), ""}, func(string) (Fault, error) { return FabricManagerDown{}, nil }},
	{FaultInfo{"apt-would-remove", AptWouldRemove{}.Description(), "package [nvidia-fabricmanager-550 / containerd]"}, func(a string) (Fault, error) { return AptWouldRemove{Package: a}, nil }},
	{FaultInfo{"package-published", PackagePublished{}.Description(), "package [snapd]"}, func(a string) (Fault, error) { return PackagePublished{Package: a}, nil }},
	{FaultInfo{"package-not-held", PackageNotHeld{}.Description(), "package [kubelet]"}, func(a string) (Fault, error) { return PackageNotHeld{Package: a}, nil }},
	{FaultInfo{"ssh-drop-mid-install", SSHDropMidInstall{}.Description(), ""}, func(string) (Fault, error) { return SSHDropMidInstall{}, nil }},
	{FaultInfo{"host-key-changed", HostKeyChanged{}.Description(), ""}, func(string) (Fault, error) { return HostKeyChanged{}, nil }},
	{FaultInfo{"boot-on-mdraid", BootOnMDRaid{}.Description(), ""}, func(string) (Fault, error) { return BootOnMDRaid{}, nil }},
	{FaultInfo{"bond-slave-down", BondSlaveDown{}.Description(), "slave interface [first of bond0]"}, func(a string) (Fault, error) { return BondSlaveDown{Slave: a}, nil }},
	{FaultInfo{"bond-down-on-new-kernel", BondDownOnKernel{}.Description(), "kernel release [" + NewKernel + "]"}, func(a string) (Fault, error) { return BondDownOnKernel{Kernel: a}, nil }},
	{FaultInfo{"rdma-port-down", RDMAPortDown{}.Description(), "device [mlx5_0]"}, func(a string) (Fault, error) { return RDMAPortDown{Device: a}, nil }},
	{FaultInfo{"dpkg-locked", DpkgLocked{}.Description(), ""}, func(string) (Fault, error) { return DpkgLocked{}, nil }},
	{FaultInfo{"dpkg-interrupted", DpkgInterrupted{}.Description(), ""}, func(string) (Fault, error) { return DpkgInterrupted{}, nil }},
	{FaultInfo{"boot-nearly-full", BootNearlyFull{}.Description(), "free KiB [20480]"}, func(a string) (Fault, error) {
		if a == "" {
			return BootNearlyFull{}, nil
		}
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("boot-nearly-full: %q is not a number of KiB", a)
		}
		return BootNearlyFull{FreeKB: n}, nil
	}},
	{FaultInfo{"phased-update", PhasedUpdate{}.Description(), "package [tzdata]"}, func(a string) (Fault, error) { return PhasedUpdate{Package: a}, nil }},
	{FaultInfo{"grub-default-overridden", GrubDefaultOverridden{}.Description(), ""}, func(string) (Fault, error) { return GrubDefaultOverridden{}, nil }},
}

// Faults lists every fault kind.
func Faults() []FaultInfo {
	out := make([]FaultInfo, len(faultKinds))
	for i, k := range faultKinds {
		out[i] = k.info
	}
	return out
}

// FaultByName builds a fault from its CLI name and optional argument.
func FaultByName(name, arg string) (Fault, error) {
	for _, k := range faultKinds {
		if k.info.Name == name {
			return k.make(arg)
		}
	}
	names := make([]string, len(faultKinds))
	for i, k := range faultKinds {
		names[i] = k.info.Name
	}
	return nil, fmt.Errorf("unknown fault %q (known: %s)", name, strings.Join(names, ", "))
}

// Inject applies a fault to the host. Applying one already active
// replaces it.
func (h *Host) Inject(f Fault) error {
	err := h.m.Update(func(s *machine.State) error { return f.apply(h, s) })
	if err != nil {
		return fmt.Errorf("inject %s on %s: %w", f.Name(), h.Name, err)
	}
	h.mu.Lock()
	h.faults = slices.DeleteFunc(h.faults, func(o Fault) bool { return o.Name() == f.Name() })
	h.faults = append(h.faults, f)
	h.mu.Unlock()
	h.fleet.log.Info("lab fault injected", "node", h.Name, "fault", f.Name())
	return nil
}

// Clear takes back the named fault. Clearing hang-on-boot on a hung host
// power-cycles it.
func (h *Host) Clear(name string) error {
	h.mu.Lock()
	i := slices.IndexFunc(h.faults, func(f Fault) bool { return f.Name() == name })
	var f Fault
	if i >= 0 {
		f = h.faults[i]
	}
	h.mu.Unlock()
	if f == nil {
		var err error
		if f, err = FaultByName(name, ""); err != nil {
			return fmt.Errorf("clear fault on %s: %w", h.Name, err)
		}
	}
	if err := h.m.Update(func(s *machine.State) error { return f.clear(h, s) }); err != nil {
		return fmt.Errorf("clear %s on %s: %w", name, h.Name, err)
	}
	h.mu.Lock()
	h.faults = slices.DeleteFunc(h.faults, func(o Fault) bool { return o.Name() == name })
	hung := h.power == PowerHung
	h.mu.Unlock()
	h.fleet.log.Info("lab fault cleared", "node", h.Name, "fault", name)
	if name == (HangOnBoot{}).Name() && hung {
		h.PowerCycle()
	}
	return nil
}

// ActiveFaults lists the faults injected and not cleared.
func (h *Host) ActiveFaults() []Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.faults)
}

// startControl opens the unix socket the hosts' commands report events on
// (reboot, poweroff, install-started).
func (f *Fleet) startControl() error {
	p := filepath.Join(f.dir, "control.sock")
	if len(p) > 100 {
		tmp, err := os.MkdirTemp("", "labctl-")
		if err != nil {
			return err
		}
		p = filepath.Join(tmp, "control.sock")
	}
	os.Remove(p)
	l, err := net.Listen("unix", p)
	if err != nil {
		return fmt.Errorf("open lab control socket: %w", err)
	}
	f.control, f.controlPath = l, p
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.handleControl(c)
			}()
		}
	}()
	return nil
}

func (f *Fleet) handleControl(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var req struct{ Host, Event string }
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		return
	}
	reply := func(err error) {
		resp := map[string]any{"ok": err == nil}
		if err != nil {
			resp["error"] = err.Error()
		}
		data, _ := json.Marshal(resp)
		c.Write(append(data, '\n'))
	}
	h := f.byName[req.Host]
	if h == nil {
		reply(fmt.Errorf("unknown lab host %q", req.Host))
		return
	}
	switch req.Event {
	case "reboot":
		f.log.Info("lab host reboot requested", "node", h.Name)
		h.Reboot()
		reply(nil)
	case "poweroff":
		h.PowerOff()
		reply(nil)
	case "install-started":
		drop := false
		h.m.Update(func(s *machine.State) error {
			drop = s.Faults.SSHDropMidInstall
			s.Faults.SSHDropMidInstall = false
			return nil
		})
		reply(nil)
		if drop {
			h.mu.Lock()
			h.faults = slices.DeleteFunc(h.faults, func(o Fault) bool { return o.Name() == (SSHDropMidInstall{}).Name() })
			h.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				if f.sleep(f.opts.InstallStep * 2) {
					h.DropConnections()
				}
			}()
		}
	default:
		reply(fmt.Errorf("unknown event %q", req.Event))
	}
}
