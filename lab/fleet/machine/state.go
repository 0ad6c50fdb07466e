package machine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Role is what a host does in the cluster.
type Role string

const (
	RoleControlPlane Role = "control-plane"
	RoleGPU          Role = "gpu"
)

// Package is one Debian package as dpkg and apt know it on this host.
type Package struct {
	Name string `json:"name"`
	// Arch is "amd64" or "all".
	Arch string `json:"arch"`
	// Version is the installed version; empty when not installed.
	Version string `json:"version,omitempty"`
	// Candidate is the newest version the archive offers; empty when the
	// archive offers nothing newer than (or nothing besides) Version.
	Candidate string `json:"candidate,omitempty"`
	// Origin is the archive of Candidate as apt prints it in Inst lines,
	// e.g. "Ubuntu:24.04/noble-updates, Ubuntu:24.04/noble-security".
	Origin string `json:"origin,omitempty"`
	// Site is where apt downloads Candidate from, as in "Get:" lines:
	// "http://archive.ubuntu.com/ubuntu noble-updates/main".
	Site string `json:"site,omitempty"`
	// Auto marks a package installed as a dependency (apt-mark showauto).
	Auto bool `json:"auto,omitempty"`
	// Hold is dpkg's "hold" selection (apt-mark hold).
	Hold bool `json:"hold,omitempty"`
	// ConfigOnly is dpkg's "rc" state: removed, configuration kept.
	ConfigOnly bool `json:"config_only,omitempty"`
	// Depends names packages the Candidate needs; apt installs the ones
	// missing as NEW packages.
	Depends []string `json:"depends,omitempty"`
	// Kernel is the kernel ABI ("6.8.0-51") whose files this package
	// carries (image, modules, headers, NVIDIA modules); empty otherwise.
	Kernel string `json:"kernel,omitempty"`
	// Kind says which kernel files the package carries: "image",
	// "modules", "headers", "nvidia-modules"; empty for other packages.
	Kind string `json:"kind,omitempty"`
	// SizeKB is the download size.
	SizeKB int `json:"size_kb,omitempty"`
}

// Installed reports whether dpkg has the package unpacked and configured.
func (p *Package) Installed() bool { return p.Version != "" && !p.ConfigOnly }

// GPU is one GPU as nvidia-smi reports it.
type GPU struct {
	Index  int    `json:"index"`
	BusID  string `json:"bus_id"` // "00000000:18:00.0"
	UUID   string `json:"uuid"`
	Serial string `json:"serial"`
	Module int    `json:"module_id"`
}

// Service is a systemd unit (a real one or a transient systemd-run unit).
type Service struct {
	Name string `json:"name"`
	// ActiveState/SubState/Result as `systemctl show` prints them.
	ActiveState string `json:"active_state"`
	SubState    string `json:"sub_state"`
	Result      string `json:"result"`
	// UnitFileState: "enabled", "disabled", "static", "transient".
	UnitFileState  string    `json:"unit_file_state"`
	MainPID        int       `json:"main_pid,omitempty"`
	ExecMainStatus int       `json:"exec_main_status"`
	ExecMainCode   string    `json:"exec_main_code,omitempty"` // "exited" or "killed"
	Transient      bool      `json:"transient,omitempty"`
	RemainAfter    bool      `json:"remain_after_exit,omitempty"`
	Description    string    `json:"description,omitempty"`
	Command        []string  `json:"command,omitempty"`
	InvocationID   string    `json:"invocation_id,omitempty"`
	Started        time.Time `json:"started,omitzero"`
	Exited         time.Time `json:"exited,omitzero"`
	// Log is the journal file (relative to the host root) of a transient unit.
	Log string `json:"log,omitempty"`
}

// Bond is one Linux bonding interface.
type Bond struct {
	Name   string   `json:"name"`   // bond0
	Slaves []string `json:"slaves"` // enp1s0f0np0 ...
	Down   []string `json:"down,omitempty"`
}

// RDMAPort is one port of an RDMA device (mlx5_N port 1).
type RDMAPort struct {
	Device    string `json:"device"` // mlx5_0
	Port      int    `json:"port"`
	State     string `json:"state"` // "ACTIVE" or "DOWN"
	Rate      int    `json:"rate_gbps"`
	GUID      string `json:"guid"`
	LinkLayer string `json:"link_layer"` // "InfiniBand" or "Ethernet"
}

// User is a passwd entry getent resolves (local or from the directory).
type User struct {
	Name  string `json:"name"`
	UID   int    `json:"uid"`
	GID   int    `json:"gid"`
	Gecos string `json:"gecos"`
	Home  string `json:"home"`
	Shell string `json:"shell"`
}

// Group is a group entry getent resolves.
type Group struct {
	Name    string   `json:"name"`
	GID     int      `json:"gid"`
	Members []string `json:"members,omitempty"`
}

// Mount is one line of the mount table findmnt reads.
type Mount struct {
	Target  string `json:"target"`
	Source  string `json:"source"`
	FSType  string `json:"fstype"`
	Options string `json:"options"`
	UUID    string `json:"uuid,omitempty"`
}

// Livepatch is what canonical-livepatch status reports.
type Livepatch struct {
	Enabled    bool   `json:"enabled"`
	PatchState string `json:"patch_state"` // "applied", "nothing-to-apply"
	Version    string `json:"version,omitempty"`
	Tier       string `json:"tier"`
}

// Faults are the injected failures the emulated commands and the boot
// logic consult. The lab sets them; see the fleet package.
type Faults struct {
	// PanicKernels are kernel releases that panic while booting.
	PanicKernels []string `json:"panic_kernels,omitempty"`
	// HangOnBoot leaves the host down after the next shutdown.
	HangOnBoot bool `json:"hang_on_boot,omitempty"`
	// Unavailable packages are missing from the archive (e.g. the NVIDIA
	// modules for the new kernel, not yet published).
	Unavailable []string `json:"unavailable,omitempty"`
	// GPUsMissing GPUs fall off the bus at the next boot.
	GPUsMissing int `json:"gpus_missing,omitempty"`
	// FabricManagerDown keeps nvidia-fabricmanager failed.
	FabricManagerDown bool `json:"fabric_manager_down,omitempty"`
	// RemoveOnUpgrade are installed packages a full-upgrade would remove.
	RemoveOnUpgrade []string `json:"remove_on_upgrade,omitempty"`
	// SSHDropMidInstall asks the lab to cut the host's SSH connections once
	// a real package installation has started.
	SSHDropMidInstall bool `json:"ssh_drop_mid_install,omitempty"`
	// BootOnMDRaid puts /boot on an md RAID1 device.
	BootOnMDRaid bool `json:"boot_on_mdraid,omitempty"`
	// BootFreeKB, when set, is what df reports free on /boot.
	BootFreeKB int64 `json:"boot_free_kb,omitempty"`
	// Phased are packages whose upgrade apt defers for phasing.
	Phased []string `json:"phased,omitempty"`
	// BondDownKernels are kernel releases whose NIC driver leaves the first
	// slave of every bond without link (a driver regression): the host
	// boots, but its bonds are short of slaves while it runs one of them.
	BondDownKernels []string `json:"bond_down_kernels,omitempty"`
}

// State is everything about one host that outlives a command.
type State struct {
	Hostname string `json:"hostname"`
	Role     Role   `json:"role"`
	// RootUUID is the filesystem UUID of / (GRUB entry ids carry it).
	RootUUID string `json:"root_uuid"`
	// Kernel is the running kernel release ("6.8.0-48-generic").
	Kernel string `json:"kernel"`
	// KernelBuild is what `uname -v` prints for the running kernel.
	KernelBuild string    `json:"kernel_build"`
	BootID      string    `json:"boot_id"`
	BootTime    time.Time `json:"boot_time"`
	// BootEntry is the GRUB entry (id path) the running kernel was booted from.
	BootEntry string `json:"boot_entry"`
	Cmdline   string `json:"cmdline"`
	Boots     int    `json:"boots"`

	Packages map[string]*Package `json:"packages"`
	// DpkgInterrupted is set while dpkg runs and stays set when it is
	// killed, as dpkg's own journal does.
	DpkgInterrupted bool `json:"dpkg_interrupted,omitempty"`
	// Downloaded holds "name version" of packages in the apt cache.
	Downloaded []string `json:"downloaded,omitempty"`

	Sysctl map[string]string `json:"sysctl"`

	GPUModel      string `json:"gpu_model,omitempty"`
	GPUs          []GPU  `json:"gpus,omitempty"`
	GPUsVisible   int    `json:"gpus_visible"`
	DriverVersion string `json:"driver_version,omitempty"`
	CUDAVersion   string `json:"cuda_version,omitempty"`
	DriverLoaded  bool   `json:"driver_loaded"`

	Services map[string]*Service `json:"services"`
	NextUnit int                 `json:"next_unit"`

	Bonds  []Bond     `json:"bonds,omitempty"`
	RDMA   []RDMAPort `json:"rdma,omitempty"`
	Users  []User     `json:"users"`
	Groups []Group    `json:"groups"`
	Mounts []Mount    `json:"mounts"`

	Livepatch Livepatch `json:"livepatch"`
	Faults    Faults    `json:"faults"`
}

// Package returns the named package or nil.
func (s *State) Package(name string) *Package { return s.Packages[name] }

// SortedPackages returns the packages ordered by name.
func (s *State) SortedPackages() []*Package {
	out := make([]*Package, 0, len(s.Packages))
	for _, p := range s.Packages {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Package) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// InstalledKernels returns the ABIs ("6.8.0-48") of installed linux-image
// packages, oldest first.
func (s *State) InstalledKernels() []string {
	var out []string
	for _, p := range s.Packages {
		if p.Kind == "image" && p.Installed() {
			out = append(out, p.Kernel)
		}
	}
	slices.SortFunc(out, CompareVersions)
	return out
}

// Unavailable reports whether the archive lacks the package (a fault).
func (s *State) Unavailable(name string) bool { return slices.Contains(s.Faults.Unavailable, name) }

// Host is an open host directory.
type Host struct {
	Dir string
}

// Open returns the host directory dir; it must hold a state file.
func Open(dir string) (*Host, error) {
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		return nil, fmt.Errorf("open emulated host %s: %w", dir, err)
	}
	return &Host{Dir: dir}, nil
}

const (
	stateFile = "state.json"
	lockFile  = "state.lock"
)

// Root is the directory laid out like the host's filesystem.
func (h *Host) Root() string { return filepath.Join(h.Dir, "root") }

// Path returns the host-root path of an absolute path on the host.
func (h *Host) Path(abs string) string { return filepath.Join(h.Root(), filepath.FromSlash(abs)) }

func (h *Host) lock(how int) (func(), error) {
	f, err := os.OpenFile(filepath.Join(h.Dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock host state: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock host state: %w", err)
	}
	return func() { f.Close() }, nil
}

func (h *Host) read() (*State, error) {
	data, err := os.ReadFile(filepath.Join(h.Dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("read host state: %w", err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("parse host state %s: %w", h.Dir, err)
	}
	return &s, nil
}

func (h *Host) write(s *State) error {
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return fmt.Errorf("encode host state: %w", err)
	}
	tmp := filepath.Join(h.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write host state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(h.Dir, stateFile)); err != nil {
		return fmt.Errorf("write host state: %w", err)
	}
	return nil
}

// View reads the state under a shared lock.
func (h *Host) View() (*State, error) {
	unlock, err := h.lock(syscall.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return h.read()
}

// Update runs fn on the state under an exclusive lock and saves what it
// left, unless fn returns an error (then nothing is saved). fn may also
// write files under the host root: the lock covers them.
func (h *Host) Update(fn func(*State) error) error {
	unlock, err := h.lock(syscall.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := h.read()
	if err != nil {
		return err
	}
	if err := fn(s); err != nil {
		return err
	}
	return h.write(s)
}

// Create writes a new state (and nothing else) into dir.
func Create(dir string, s *State) (*Host, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create host dir: %w", err)
	}
	h := &Host{Dir: dir}
	unlock, err := h.lock(syscall.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := h.write(s); err != nil {
		return nil, err
	}
	return h, nil
}
