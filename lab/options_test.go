package lab

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/lab/vm"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // "" for valid
	}{
		{"defaults", Options{}, ""},
		{"the demo's shape", Options{ControlPlanes: 3, Canary: 1, GPUServers: 4}, ""},
		{"VM canary, UEFI", Options{ControlPlanes: 3, Canary: 1, GPUServers: 4, VMCanary: true, VMFirmware: vm.UEFI}, ""},
		{"VM canary, BIOS", Options{Canary: 1, VMCanary: true, VMFirmware: vm.BIOS}, ""},
		{"VM canary, default firmware", Options{Canary: 1, VMCanary: true}, ""},
		{"VM canary with two canaries", Options{ControlPlanes: 3, Canary: 2, GPUServers: 4, VMCanary: true}, "the canary count must be 1, not 2"},
		{"VM canary with none", Options{ControlPlanes: 3, GPUServers: 4, VMCanary: true}, "the canary count must be 1, not 0"},
		{"unknown firmware", Options{Canary: 1, VMCanary: true, VMFirmware: "coreboot"}, `not "coreboot"`},
		{"negative count", Options{ControlPlanes: 3, Canary: 1, GPUServers: -1}, "cannot be negative"},
		{"staging's shape", StagingOptions(Options{OtherActors: true}), ""},
		{"an environment", Options{Environment: ProductionEnvironment}, ""},
		{"an environment that is no name", Options{Environment: "Prod EU"}, `environment "Prod EU" is not an environment name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
}

// The VM canary's provisioning script is valid sh, plays 8 GPUs of the
// driver it is given, and points the host steps at what it plays.
func TestVMCanaryProvisionScript(t *testing.T) {
	s := provisionScript(VMCanaryName, "550.144.03", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM1t0K9fXjv4gk0bG7Sm8H6Lh8Oa9x2y9GxwJrI5c0pZ lab operator",
		"# platform sysctls (os-layer intent)\nkernel.panic = 10\n", time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC))
	cmd := exec.Command("sh", "-n")
	cmd.Stdin = strings.NewReader(s)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh -n: %v: %s", err, out)
	}
	for _, want := range []string{
		"printf 'gpu-canary-1\\n' >/etc/hostname",
		"<driver_version>550.144.03</driver_version>",
		"SetEnv PROC_DRIVER_NVIDIA=/run/lab-gpu/proc/driver/nvidia PROC_NVSWITCH=/run/lab-gpu/nvswitch/devices SYS_INFINIBAND=/opt/lab-gpu/infiniband",
		"/lib/modules/\"$(uname -r)\"/kernel/nvidia-550srv/nvidia.ko*",
		"ConditionPathExists=/run/lab-gpu/driver-loaded",
		"Kind=bond",
		"kernel.panic = 10\nEOF",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the script lacks %q", want)
		}
	}
	if n := strings.Count(s, "<gpu id="); n != 8 {
		t.Errorf("nvidia-smi plays %d GPUs, want 8", n)
	}
	if n := strings.Count(s, "printf '4: ACTIVE\\n'"); n != 8 {
		t.Errorf("%d RDMA ports ACTIVE, want 8 (gpu.rdma_devices)", n)
	}
}
