package steps

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/mcp-patch/mcp-patch/host/parse"
)

// VerifyInput are the expectations of a node check.
type VerifyInput struct {
	TargetKernel string `json:"target_kernel"`
	// ExpectedBonds must exist in /proc/net/bonding (every bond found is
	// checked either way).
	ExpectedBonds []string `json:"expected_bonds,omitempty"`
	// ExpectedRDMAPorts is the number of RDMA ports; 0 means not checked
	// (every port found must still be ACTIVE/LinkUp).
	ExpectedRDMAPorts int `json:"expected_rdma_ports,omitempty"`
	// ExpectedSysctls maps a sysctl key (dotted) to its value; white space
	// runs compare as one space.
	ExpectedSysctls map[string]string `json:"expected_sysctls,omitempty"`
	// Users and Groups must resolve through getent (NSS: files, LDAP,
	// SSSD, ...); reported separately from the node check.
	Users  []string `json:"users,omitempty"`
	Groups []string `json:"groups,omitempty"`
}

// SysctlCheck is one expected sysctl.
type SysctlCheck struct {
	Key      string `json:"key"`
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
	Found    bool   `json:"found"`
	OK       bool   `json:"ok"`
}

// IdentityLookup is one getent lookup.
type IdentityLookup struct {
	Name  string `json:"name"`
	Found bool   `json:"found"`
	Entry string `json:"entry,omitempty"`
}

// NodeVerification is the node check after a trial boot.
type NodeVerification struct {
	Node   string `json:"node"`
	Kernel string `json:"kernel"`
	// BootID is the boot the check ran on: uncordon and promote are held
	// to it.
	BootID    string           `json:"boot_id"`
	KernelOK  bool             `json:"kernel_ok"`
	Bonds     []parse.Bond     `json:"bonds"`
	RDMAPorts []parse.RDMAPort `json:"rdma_ports"`
	Sysctls   []SysctlCheck    `json:"sysctls"`
	// Problems are the failed node checks (kernel, bonds, RDMA, sysctls).
	Problems []string `json:"problems"`
	// Passed is true when Problems is empty.
	Passed bool             `json:"passed"`
	Users  []IdentityLookup `json:"users"`
	Groups []IdentityLookup `json:"groups"`
	// IdentityProblems are users or groups getent did not find; they do
	// not fail the node check.
	IdentityProblems []string `json:"identity_problems"`
	IdentityOK       bool     `json:"identity_ok"`
}

var (
	ifacePattern  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`) })
	sysctlKey     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./-]*$`) })
	sysctlValue   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[^,=\x00-\x1f\x7f]*$`) })
	identityName  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?$`) })
	blankRunsExpr = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[ \t]+`) })
)

// Verify checks the node on its new kernel (verify.sh): kernel, bonds,
// RDMA ports, sysctls, and identity lookups reported apart. A failed check
// is not an error: Passed is false and Problems says why.
func (s *Steps) Verify(ctx context.Context, node string, in VerifyInput) (NodeVerification, error) {
	v := NodeVerification{Node: node}
	env, err := verifyEnv(in)
	if err != nil {
		return v, fmt.Errorf("verify node %s: %w", node, err)
	}
	var o struct {
		Kernel   string `json:"kernel"`
		BootID   string `json:"boot_id"`
		KernelOK bool   `json:"kernel_ok"`
		Bonds    []struct {
			Name string `json:"name"`
			Raw  string `json:"raw"`
		} `json:"bonds"`
		Ports []struct {
			Device    string `json:"device"`
			Port      string `json:"port"`
			State     string `json:"state"`
			PhysState string `json:"phys_state"`
			LinkLayer string `json:"link_layer"`
			Rate      string `json:"rate"`
		} `json:"rdma_ports"`
		Sysctls          []SysctlCheck    `json:"sysctls"`
		Users            []IdentityLookup `json:"users"`
		Groups           []IdentityLookup `json:"groups"`
		Problems         []string         `json:"problems"`
		IdentityProblems []string         `json:"identity_problems"`
		IdentityOK       bool             `json:"identity_ok"`
	}
	if _, err := s.run(ctx, "verify", node, env, &o, true); err != nil {
		return v, err
	}
	v.Kernel, v.BootID, v.KernelOK = o.Kernel, strings.TrimSpace(o.BootID), o.KernelOK
	v.Sysctls, v.Users, v.Groups = nonNil(o.Sysctls), nonNil(o.Users), nonNil(o.Groups)
	v.Problems, v.IdentityProblems, v.IdentityOK = nonNil(o.Problems), nonNil(o.IdentityProblems), o.IdentityOK
	v.Bonds, v.RDMAPorts = []parse.Bond{}, []parse.RDMAPort{}
	for _, b := range o.Bonds {
		bond := parse.ParseBonding(b.Name, b.Raw)
		v.Bonds = append(v.Bonds, bond)
		// The script checks MII status; the parser also knows 802.3ad
		// aggregator and churn trouble.
		for _, p := range bond.Problems() {
			if !strings.Contains(p, "MII status") && !strings.Contains(p, "has no slaves") {
				v.Problems = append(v.Problems, p)
			}
		}
	}
	for _, p := range o.Ports {
		v.RDMAPorts = append(v.RDMAPorts, parse.SysfsRDMAPort(p.Device, p.Port, p.State, p.PhysState, p.LinkLayer, p.Rate))
	}
	v.Passed = len(v.Problems) == 0
	return v, nil
}

func verifyEnv(in VerifyInput) (map[string]string, error) {
	if err := ValidateKernel("target kernel", in.TargetKernel); err != nil {
		return nil, err
	}
	env := map[string]string{"TARGET_KERNEL": in.TargetKernel}
	for _, b := range in.ExpectedBonds {
		if !ifacePattern().MatchString(b) {
			return nil, fmt.Errorf("%w: bond name %q", ErrBadInput, b)
		}
	}
	if len(in.ExpectedBonds) > 0 {
		env["EXPECTED_BONDS"] = strings.Join(in.ExpectedBonds, ",")
	}
	if in.ExpectedRDMAPorts < 0 || in.ExpectedRDMAPorts > 9999 {
		return nil, fmt.Errorf("%w: expected RDMA ports %d", ErrBadInput, in.ExpectedRDMAPorts)
	}
	if in.ExpectedRDMAPorts > 0 {
		env["EXPECTED_RDMA_PORTS"] = strconv.Itoa(in.ExpectedRDMAPorts)
	}
	keys := make([]string, 0, len(in.ExpectedSysctls))
	for k, val := range in.ExpectedSysctls {
		if !sysctlKey().MatchString(k) || strings.Contains(k, "..") {
			return nil, fmt.Errorf("%w: sysctl key %q", ErrBadInput, k)
		}
		if !sysctlValue().MatchString(val) || strings.Contains(val, "..") {
			return nil, fmt.Errorf("%w: sysctl %s value %q (no commas, '=', '..' or control characters)", ErrBadInput, k, val)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var pairs []string
	for _, k := range keys {
		pairs = append(pairs, k+"="+blankRunsExpr().ReplaceAllString(in.ExpectedSysctls[k], " "))
	}
	if len(pairs) > 0 {
		env["EXPECTED_SYSCTLS"] = strings.Join(pairs, ",")
	}
	for what, list := range map[string][]string{"VERIFY_USERS": in.Users, "VERIFY_GROUPS": in.Groups} {
		for _, n := range list {
			if !identityName().MatchString(n) {
				return nil, fmt.Errorf("%w: %s entry %q", ErrBadInput, strings.ToLower(strings.TrimPrefix(what, "VERIFY_")), n)
			}
		}
		if len(list) > 0 {
			env[what] = strings.Join(list, ",")
		}
	}
	return env, nil
}

// GPUCheckInput are the expectations of the GPU check.
type GPUCheckInput struct {
	// DriverRoot is where the driver's user space lives: "" or "/" for the
	// host, "/run/nvidia/driver" with the GPU operator's driver container.
	DriverRoot string `json:"driver_root,omitempty"`
	// ExpectedGPUs is the GPU count; 0 means not checked.
	ExpectedGPUs int `json:"expected_gpus,omitempty"`
	// FabricManager is "auto" (required where NVSwitch devices exist),
	// "required" or "skip"; "" means auto.
	FabricManager string `json:"fabric_manager,omitempty"`
}

// GPUCheck is the state of the NVIDIA stack on a node.
type GPUCheck struct {
	Node string `json:"node"`
	// Kernel and BootID are the boot the check ran on: promote is held to
	// it.
	Kernel        string      `json:"kernel"`
	BootID        string      `json:"boot_id"`
	DriverLoaded  bool        `json:"driver_loaded"`
	DriverVersion string      `json:"driver_version"`
	CUDAVersion   string      `json:"cuda_version"`
	GPUCount      int         `json:"gpu_count"`
	GPUs          []parse.GPU `json:"gpus"`
	NVSwitch      bool        `json:"nvswitch_present"`
	// FabricManagerState is `systemctl is-active nvidia-fabricmanager`.
	FabricManagerState string   `json:"fabric_manager_state"`
	FabricRequired     bool     `json:"fabric_required"`
	Problems           []string `json:"problems"`
	Passed             bool     `json:"passed"`
}

// GPUCheck checks the driver, every GPU and the NVSwitch fabric
// (gpu_check.sh), adding per-GPU health hints from nvidia-smi's XML (ECC,
// pending retirement or remapping, fabric state). A failed check is not an
// error: Passed is false.
func (s *Steps) GPUCheck(ctx context.Context, node string, in GPUCheckInput) (GPUCheck, error) {
	g := GPUCheck{Node: node, GPUs: []parse.GPU{}, Problems: []string{}}
	env := map[string]string{}
	if in.DriverRoot != "" && in.DriverRoot != "/" {
		if !strings.HasPrefix(in.DriverRoot, "/") || strings.ContainsAny(in.DriverRoot, "\n\r\t\x00") {
			return g, fmt.Errorf("gpu check on node %s: %w: driver root %q", node, ErrBadInput, in.DriverRoot)
		}
		env["NVIDIA_DRIVER_ROOT"] = in.DriverRoot
	}
	if in.ExpectedGPUs < 0 || in.ExpectedGPUs > 999 {
		return g, fmt.Errorf("gpu check on node %s: %w: expected GPUs %d", node, ErrBadInput, in.ExpectedGPUs)
	}
	if in.ExpectedGPUs > 0 {
		env["EXPECTED_GPUS"] = strconv.Itoa(in.ExpectedGPUs)
	}
	switch in.FabricManager {
	case "", "auto", "required", "skip":
		if in.FabricManager != "" {
			env["FABRIC_MANAGER"] = in.FabricManager
		}
	default:
		return g, fmt.Errorf("gpu check on node %s: %w: fabric manager %q must be auto, required or skip", node, ErrBadInput, in.FabricManager)
	}
	var o struct {
		Kernel      string   `json:"kernel"`
		BootID      string   `json:"boot_id"`
		ProcVersion string   `json:"proc_version"`
		Loaded      bool     `json:"driver_loaded"`
		SMIExit     int      `json:"nvidia_smi_exit"`
		XML         string   `json:"nvidia_smi_xml"`
		GPUCount    int      `json:"gpu_count"`
		NVSwitch    bool     `json:"nvswitch_present"`
		FMState     string   `json:"fabric_manager_state"`
		Required    bool     `json:"fabric_required"`
		Problems    []string `json:"problems"`
	}
	if _, err := s.run(ctx, "gpu_check", node, env, &o, true); err != nil {
		return g, err
	}
	g.Kernel, g.BootID = o.Kernel, strings.TrimSpace(o.BootID)
	g.DriverLoaded, g.GPUCount, g.NVSwitch, g.FabricManagerState, g.FabricRequired = o.Loaded, o.GPUCount, o.NVSwitch, o.FMState, o.Required
	g.Problems = nonNil(o.Problems)
	if v, err := parse.ParseNvidiaProcVersion(o.ProcVersion); err == nil {
		g.DriverVersion = v
	}
	if o.SMIExit == 0 {
		smi, err := parse.ParseNvidiaSMIXML([]byte(o.XML))
		if err != nil {
			g.Problems = append(g.Problems, "nvidia-smi -q -x output does not parse: "+err.Error())
		} else {
			g.GPUs = smi.GPUs
			g.CUDAVersion = smi.CUDAVersion
			if g.DriverVersion == "" {
				g.DriverVersion = smi.DriverVersion
			}
			seen := map[string]bool{}
			for _, gpu := range smi.GPUs {
				for _, p := range gpu.Problems {
					g.Problems = append(g.Problems, "GPU "+gpu.PCIBusID+" ("+gpu.UUID+"): "+p)
				}
				if gpu.UUID != "" && seen[gpu.UUID] {
					g.Problems = append(g.Problems, "GPU uuid "+gpu.UUID+" listed twice")
				}
				seen[gpu.UUID] = true
			}
			if in.ExpectedGPUs > 0 && smi.AttachedGPUs != 0 && smi.AttachedGPUs != in.ExpectedGPUs {
				g.Problems = append(g.Problems, fmt.Sprintf("nvidia-smi reports %d attached GPUs, expected %d", smi.AttachedGPUs, in.ExpectedGPUs))
			}
		}
	}
	g.Passed = len(g.Problems) == 0
	return g, nil
}
