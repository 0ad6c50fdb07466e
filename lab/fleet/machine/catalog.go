package machine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Spec describes a host to create.
type Spec struct {
	Hostname string
	Role     Role
	// GPUModel is "H100" or "H200" (GPU servers only); "" means H100.
	GPUModel string
	// GPUs is the number of GPUs of a GPU server; 0 means 8.
	GPUs int
	// OlderKernel, RunningKernel and NewKernel are kernel ABIs
	// ("6.8.0-45"); the first two are installed, the last is offered by
	// the archive. Empty means 6.8.0-45, 6.8.0-48 and 6.8.0-51.
	OlderKernel, RunningKernel, NewKernel string
	// KernelPanic is the kernel.panic value set in /etc/sysctl.d; 0 leaves
	// it at the kernel default (0: a panic hangs the host).
	KernelPanic int
	// ExtraUsers are directory users getent resolves besides the local ones.
	ExtraUsers []User
}

func (s Spec) withDefaults() Spec {
	if s.GPUModel == "" {
		s.GPUModel = "H100"
	}
	if s.GPUs == 0 {
		s.GPUs = 8
	}
	if s.OlderKernel == "" {
		s.OlderKernel = "6.8.0-45"
	}
	if s.RunningKernel == "" {
		s.RunningKernel = "6.8.0-48"
	}
	if s.NewKernel == "" {
		s.NewKernel = "6.8.0-51"
	}
	return s
}

const (
	ubuntuOrigin = "Ubuntu:24.04/noble-updates, Ubuntu:24.04/noble-security"
	ubuntuSite   = "http://archive.ubuntu.com/ubuntu noble-updates/main"
	k8sOrigin    = "isv:kubernetes:core:stable:v1.31:pkgs.k8s.io"
	k8sSite      = "https://prod-cdn.packages.k8s.io/repositories/isv:/kubernetes:/core:/stable:/v1.31/deb "
	cudaOrigin   = "developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64"
	cudaSite     = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64 "
	// NVIDIABranch is the driver branch of the GPU servers.
	NVIDIABranch  = "550"
	driverVersion = "550.127.08"
)

// kernelPkgVersion turns an ABI "6.8.0-51" into the package version
// "6.8.0-51.52" (the upload number follows the ABI on Ubuntu).
func kernelPkgVersion(abi string) string {
	base, num, _ := strings.Cut(abi, "-")
	n := 0
	fmt.Sscanf(num, "%d", &n)
	upload := n
	if n >= 50 {
		upload = n + 1
	}
	return fmt.Sprintf("%s-%d.%d", base, n, upload)
}

// metaVersion is the version of the linux-generic family for an ABI.
func metaVersion(abi string) string {
	v := kernelPkgVersion(abi)
	return strings.Replace(v, "-", ".", 1)
}

// KernelPackages returns the packages of one kernel ABI for a role.
func KernelPackages(role Role, abi string) []*Package {
	v := kernelPkgVersion(abi)
	rel := abi + "-generic"
	ps := []*Package{
		{Name: "linux-image-" + rel, Arch: "amd64", Kind: "image", Kernel: abi, SizeKB: 14800, Depends: []string{"linux-modules-" + rel}},
		{Name: "linux-modules-" + rel, Arch: "amd64", Kind: "modules", Kernel: abi, SizeKB: 40100},
		{Name: "linux-headers-" + abi, Arch: "all", Kind: "headers", Kernel: abi, SizeKB: 13900},
		{Name: "linux-headers-" + rel, Arch: "amd64", Kind: "headers", Kernel: abi, SizeKB: 3600, Depends: []string{"linux-headers-" + abi}},
	}
	if role == RoleGPU {
		ps = append(ps,
			&Package{Name: "linux-modules-nvidia-" + NVIDIABranch + "-server-" + rel, Arch: "amd64", Kind: "nvidia-modules", Kernel: abi, SizeKB: 130,
				Depends: []string{"linux-objects-nvidia-" + NVIDIABranch + "-server-" + rel, "linux-signatures-nvidia-" + rel, "linux-image-" + rel}},
			&Package{Name: "linux-objects-nvidia-" + NVIDIABranch + "-server-" + rel, Arch: "amd64", Kind: "nvidia-objects", Kernel: abi, SizeKB: 57800},
			&Package{Name: "linux-signatures-nvidia-" + rel, Arch: "amd64", Kind: "nvidia-signatures", Kernel: abi, SizeKB: 10},
		)
	}
	for _, p := range ps {
		p.Auto = true
		p.Site = ubuntuSite
		p.Origin = ubuntuOrigin
		if strings.HasPrefix(p.Name, "linux-modules-nvidia") || strings.HasPrefix(p.Name, "linux-objects-nvidia") || strings.HasPrefix(p.Name, "linux-signatures-nvidia") {
			p.Site = "http://archive.ubuntu.com/ubuntu noble-updates/restricted"
			p.Origin = ubuntuOrigin
			v2 := v + "+1"
			p.Version = v2
		} else {
			p.Version = v
		}
	}
	return ps
}

// Catalog returns the packages of a freshly provisioned host: two kernels
// installed, a newer one offered, the meta packages pointing at it, a few
// ordinary security updates, the Kubernetes packages installed and held
// (with newer versions offered), and on GPU servers the NVIDIA driver,
// Fabric Manager and the prebuilt NVIDIA modules for every kernel.
func Catalog(spec Spec) map[string]*Package {
	spec = spec.withDefaults()
	pkgs := map[string]*Package{}
	add := func(ps ...*Package) {
		for _, p := range ps {
			pkgs[p.Name] = p
		}
	}
	add(KernelPackages(spec.Role, spec.OlderKernel)...)
	add(KernelPackages(spec.Role, spec.RunningKernel)...)
	for _, p := range KernelPackages(spec.Role, spec.NewKernel) {
		p.Candidate, p.Version = p.Version, ""
		add(p)
	}
	newRel := spec.NewKernel + "-generic"
	meta := func(name, dep string) *Package {
		return &Package{Name: name, Arch: "amd64", Version: metaVersion(spec.RunningKernel), Candidate: metaVersion(spec.NewKernel),
			Origin: ubuntuOrigin, Site: ubuntuSite, SizeKB: 10, Depends: []string{dep}}
	}
	lg := meta("linux-generic", "linux-image-generic")
	lg.Depends = []string{"linux-image-generic", "linux-headers-generic"}
	lig := meta("linux-image-generic", "linux-image-"+newRel)
	lig.Depends = []string{"linux-image-" + newRel, "linux-modules-" + newRel}
	lig.Auto = true
	lhg := meta("linux-headers-generic", "linux-headers-"+newRel)
	lhg.Auto = true
	add(lg, lig, lhg)
	if spec.Role == RoleGPU {
		nm := meta("linux-modules-nvidia-"+NVIDIABranch+"-server-generic", "linux-modules-nvidia-"+NVIDIABranch+"-server-"+newRel)
		nm.Version += "+1"
		nm.Candidate += "+1"
		nm.Site = "http://archive.ubuntu.com/ubuntu noble-updates/restricted"
		add(nm)
	}
	upd := func(name, arch, from, to string, size int) *Package {
		return &Package{Name: name, Arch: arch, Version: from, Candidate: to, Origin: ubuntuOrigin, Site: ubuntuSite, SizeKB: size}
	}
	add(
		upd("openssl", "amd64", "3.0.13-0ubuntu3.4", "3.0.13-0ubuntu3.5", 1003),
		upd("libssl3t64", "amd64", "3.0.13-0ubuntu3.4", "3.0.13-0ubuntu3.5", 1940),
		upd("tzdata", "all", "2024a-3ubuntu1.1", "2024b-0ubuntu0.24.04.1", 276),
		upd("openssh-server", "amd64", "1:9.6p1-3ubuntu13.5", "1:9.6p1-3ubuntu13.8", 510),
		upd("openssh-client", "amd64", "1:9.6p1-3ubuntu13.5", "1:9.6p1-3ubuntu13.8", 905),
		&Package{Name: "unattended-upgrades", Arch: "all", Version: "2.9.1+nmu4ubuntu1", SizeKB: 49},
		&Package{Name: "grub-efi-amd64-signed", Arch: "amd64", Version: "1.202+2.12-1ubuntu7", SizeKB: 1400},
		&Package{Name: "grub2-common", Arch: "amd64", Version: "2.12-1ubuntu7", SizeKB: 700},
		&Package{Name: "snapd", Arch: "amd64", Version: "2.66.1+24.04", SizeKB: 30000},
	)
	ctrd := upd("containerd", "amd64", "1.7.12-0ubuntu4.1", "1.7.24-0ubuntu1~24.04.1", 37000)
	ctrd.Hold = true
	add(ctrd)
	for _, n := range []string{"kubelet", "kubeadm", "kubectl"} {
		add(&Package{Name: n, Arch: "amd64", Version: "1.31.4-1.1", Candidate: "1.31.5-1.1", Origin: k8sOrigin, Site: k8sSite, Hold: true, SizeKB: 11000})
	}
	add(&Package{Name: "cri-tools", Arch: "amd64", Version: "1.31.1-1.1", Candidate: "1.32.0-1.1", Origin: k8sOrigin, Site: k8sSite, Hold: true, SizeKB: 15000})
	add(&Package{Name: "kubernetes-cni", Arch: "amd64", Version: "1.5.1-1.1", Origin: k8sOrigin, Site: k8sSite, Auto: true, SizeKB: 31000})
	if spec.Role == RoleGPU {
		dv := driverVersion + "-0ubuntu0.24.04.1"
		for _, n := range []string{"nvidia-driver-" + NVIDIABranch + "-server", "nvidia-utils-" + NVIDIABranch + "-server",
			"libnvidia-compute-" + NVIDIABranch + "-server", "nvidia-kernel-common-" + NVIDIABranch + "-server",
			"nvidia-compute-utils-" + NVIDIABranch + "-server", "nvidia-firmware-" + NVIDIABranch + "-server-" + driverVersion} {
			add(&Package{Name: n, Arch: "amd64", Version: dv, SizeKB: 5000, Auto: n != "nvidia-driver-"+NVIDIABranch+"-server"})
		}
		add(&Package{Name: "nvidia-fabricmanager-" + NVIDIABranch, Arch: "amd64", Version: driverVersion + "-1", Origin: cudaOrigin, Site: cudaSite, SizeKB: 3900})
		add(&Package{Name: "nvidia-container-toolkit", Arch: "amd64", Version: "1.17.3-1", Origin: cudaOrigin, Site: cudaSite, SizeKB: 1200})
		add(&Package{Name: "rdma-core", Arch: "amd64", Version: "50.0-2build2", SizeKB: 70})
		add(&Package{Name: "infiniband-diags", Arch: "amd64", Version: "50.0-2build2", SizeKB: 300})
	}
	return pkgs
}

// PublishUpdate makes the archive offer a newer version of an installed
// package that has none (its version with ".1" appended, from
// noble-updates), as an update published after a plan was made; it
// returns the version offered. WithdrawUpdate takes it back.
func PublishUpdate(s *State, name string) (string, error) {
	p := s.Packages[name]
	if p == nil || !p.Installed() {
		return "", fmt.Errorf("package %s is not installed", name)
	}
	if p.Candidate != "" && p.Candidate != p.Version {
		return "", fmt.Errorf("the archive already offers %s %s", name, p.Candidate)
	}
	p.Candidate, p.Origin, p.Site = p.Version+".1", ubuntuOrigin, ubuntuSite
	if p.SizeKB == 0 {
		p.SizeKB = 100
	}
	return p.Candidate, nil
}

// WithdrawUpdate takes back an update PublishUpdate offered and not yet
// installed.
func WithdrawUpdate(s *State, name string) {
	if p := s.Packages[name]; p != nil && p.Candidate == p.Version+".1" {
		p.Candidate = ""
	}
}

// idFrom derives a stable hex id of n characters from seed parts.
func idFrom(n int, parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	s := hex.EncodeToString(h[:])
	for len(s) < n {
		s += s
	}
	return s[:n]
}

// uuidFrom derives a stable RFC 4122-shaped UUID from seed parts.
func uuidFrom(parts ...string) string {
	s := idFrom(32, parts...)
	return s[0:8] + "-" + s[8:12] + "-4" + s[13:16] + "-a" + s[17:20] + "-" + s[20:32]
}
