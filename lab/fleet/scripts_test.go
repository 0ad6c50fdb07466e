package fleet

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/lab/fleet/emul"
	"github.com/mcp-patch/mcp-patch/scripts"
)

// pool returns the production SSH client (host.Pool) over the fleet's
// inventory and known_hosts.
func pool(t testing.TB, f *Fleet) *host.Pool {
	t.Helper()
	inv, err := host.LoadInventory(f.InventoryFile())
	if err != nil {
		t.Fatalf("load lab inventory: %v", err)
	}
	p, err := host.NewPool(inv, host.Config{
		KnownHostsFiles:   []string{f.KnownHostsFile()},
		KeepaliveInterval: -1,
		CommandTimeout:    2 * time.Minute,
		DialTimeout:       5 * time.Second,
	})
	if err != nil {
		t.Fatalf("new pool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// step runs scripts/host/<name>.sh on node through the pool and decodes
// its one JSON object.
func step(t testing.TB, p *host.Pool, node, name string, env map[string]string) (map[string]any, host.Output) {
	t.Helper()
	script, err := scripts.Host.ReadFile("host/" + name + ".sh")
	if err != nil {
		t.Fatalf("read script %s: %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := p.RunScript(ctx, node, script, env)
	if err != nil {
		t.Fatalf("run %s.sh on %s: %v (stderr: %s)", name, node, err, out.Stderr)
	}
	var obj map[string]any
	if err := json.Unmarshal(out.Stdout, &obj); err != nil {
		t.Fatalf("%s.sh on %s printed no JSON object (exit %d): %v\nstdout: %s\nstderr: %s", name, node, out.ExitCode, err, out.Stdout, out.Stderr)
	}
	return obj, out
}

func wantStatus(t testing.TB, obj map[string]any, out host.Output, want string) {
	t.Helper()
	if obj["status"] != want {
		t.Fatalf("%v: status %v (reason %q), want %s\nstderr: %s", obj["step"], obj["status"], obj["reason"], want, out.Stderr)
	}
}

func TestScriptsSeeTheEmulatedHost(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1, GPUServers: 1})
	p := pool(t, f)
	for _, h := range f.Hosts() {
		t.Run(h.Name, func(t *testing.T) {
			st, err := h.State()
			if err != nil {
				t.Fatal(err)
			}
			k, out := step(t, p, h.Name, "kernel", nil)
			wantStatus(t, k, out, "ok")
			if diff := cmp.Diff(map[string]any{"kernel": OldKernel, "boot_id": st.BootID},
				map[string]any{"kernel": k["kernel"], "boot_id": k["boot_id"]}); diff != "" {
				t.Errorf("kernel.sh (-want +got):\n%s", diff)
			}

			in, out := step(t, p, h.Name, "inspect", map[string]string{"TARGET_KERNEL": NewKernel})
			wantStatus(t, in, out, "ok")
			got := map[string]any{}
			for _, key := range []string{"kernel", "boot_id", "holds", "apt_simulate_exit", "grub_cfg_present", "grubenv_size",
				"boot_source", "boot_fstype", "grubenv_reliable", "kernel_panic", "livepatch_present", "livepatch_format",
				"reboot_required", "nvidia_smi_driver", "target_modules_dir", "target_nvidia_modules"} {
				got[key] = in[key]
			}
			want := map[string]any{
				"kernel": OldKernel, "boot_id": st.BootID,
				"holds":             []any{"containerd", "cri-tools", "kubeadm", "kubectl", "kubelet"},
				"apt_simulate_exit": float64(0), "grub_cfg_present": true, "grubenv_size": float64(1024),
				"boot_source": "/dev/nvme0n1p2", "boot_fstype": "ext4", "grubenv_reliable": true, "kernel_panic": "10",
				"livepatch_present": true, "livepatch_format": "json", "reboot_required": false,
				"nvidia_smi_driver": "", "target_modules_dir": false, "target_nvidia_modules": []any{},
			}
			if h.Role == "gpu" {
				want["nvidia_smi_driver"] = "550.127.08"
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("inspect.sh (-want +got):\n%s\nstderr: %s", diff, out.Stderr)
			}
			if s, _ := in["unattended_blacklist"].(string); !strings.Contains(s, `Unattended-Upgrade::Package-Blacklist:: "linux-";`) {
				t.Errorf("inspect.sh unattended_blacklist = %q, want the linux- entry", s)
			}
			if s, _ := in["packages"].(string); !strings.Contains(s, "kubelet\t1.31.4-1.1\thi \n") || !strings.Contains(s, "linux-image-"+OldKernel+"\t6.8.0-48.48\tii \n") {
				t.Errorf("inspect.sh packages = %q, want held kubelet and the running kernel's image", s)
			}

			sim, out := step(t, p, h.Name, "simulate", nil)
			wantStatus(t, sim, out, "ok")
			if d, _ := sim["plan_digest"].(string); !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(d) {
				t.Errorf("simulate.sh plan_digest = %q", d)
			}
			lines, _ := sim["plan_lines"].([]any)
			if !slices.Contains(lines, any("Inst linux-image-"+NewKernel+" - 6.8.0-51.52 amd64")) {
				t.Errorf("simulate.sh plan_lines lack the new kernel image: %v", lines)
			}
		})
	}
}

func TestGPUCheckAndVerifyOnTheEmulatedHost(t *testing.T) {
	f := newTestFleet(t, Options{GPUServers: 1})
	p := pool(t, f)
	gc, out := step(t, p, "gpu-1", "gpu_check", map[string]string{"EXPECTED_GPUS": "8"})
	wantStatus(t, gc, out, "ok")
	if diff := cmp.Diff(map[string]any{"driver_loaded": true, "gpu_count": float64(8), "nvswitch_present": true, "fabric_manager_state": "active", "fabric_required": true},
		map[string]any{"driver_loaded": gc["driver_loaded"], "gpu_count": gc["gpu_count"], "nvswitch_present": gc["nvswitch_present"],
			"fabric_manager_state": gc["fabric_manager_state"], "fabric_required": gc["fabric_required"]}); diff != "" {
		t.Errorf("gpu_check.sh (-want +got):\n%s", diff)
	}
	v, out := step(t, p, "gpu-1", "verify", map[string]string{"TARGET_KERNEL": OldKernel, "EXPECTED_BONDS": "bond0",
		"EXPECTED_RDMA_PORTS": "8", "EXPECTED_SYSCTLS": "kernel.panic=10", "VERIFY_USERS": "root,nobody-here", "VERIFY_GROUPS": "sudo"})
	wantStatus(t, v, out, "ok")
	bonds, _ := v["bonds"].([]any)
	if diff := cmp.Diff(map[string]any{"kernel_ok": true, "rdma_ports_total": float64(8), "rdma_ports_active": float64(8), "bonds": 1,
		"identity_ok": false, "identity_problems": []any{"user nobody-here not found"}},
		map[string]any{"kernel_ok": v["kernel_ok"], "rdma_ports_total": v["rdma_ports_total"], "rdma_ports_active": v["rdma_ports_active"], "bonds": len(bonds),
			"identity_ok": v["identity_ok"], "identity_problems": v["identity_problems"]}); diff != "" {
		t.Errorf("verify.sh (-want +got):\n%s", diff)
	}

	h := f.Host("gpu-1")
	for _, fault := range []Fault{BondSlaveDown{}, RDMAPortDown{Device: "mlx5_3"}} {
		if err := h.Inject(fault); err != nil {
			t.Fatal(err)
		}
	}
	v, out = step(t, p, "gpu-1", "verify", map[string]string{"TARGET_KERNEL": OldKernel, "EXPECTED_RDMA_PORTS": "8"})
	wantStatus(t, v, out, "check_failed")
	if diff := cmp.Diff([]any{"bond0 slave enp1s0f0np0 is down", "RDMA mlx5_3/1 state is '1: DOWN'"}, v["problems"]); diff != "" {
		t.Errorf("verify.sh problems with a slave and a port down (-want +got):\n%s", diff)
	}
	for _, name := range []string{"bond-slave-down", "rdma-port-down"} {
		if err := h.Clear(name); err != nil {
			t.Fatal(err)
		}
	}
	v, out = step(t, p, "gpu-1", "verify", map[string]string{"TARGET_KERNEL": OldKernel, "EXPECTED_RDMA_PORTS": "8"})
	wantStatus(t, v, out, "ok")

	if err := h.Inject(FabricManagerDown{}); err != nil {
		t.Fatal(err)
	}
	gc, out = step(t, p, "gpu-1", "gpu_check", map[string]string{"EXPECTED_GPUS": "8"})
	wantStatus(t, gc, out, "check_failed")
	if gc["fabric_manager_state"] != "failed" || !strings.Contains(gc["reason"].(string), "NVSwitch fabric is not up") {
		t.Errorf("gpu_check.sh with Fabric Manager down: state %v, reason %q", gc["fabric_manager_state"], gc["reason"])
	}
}

// TestScriptCommandsResolveOnTheLab checks the README's list of external
// commands against a lab host: each resolves, and none resolves to a real
// program that could change this machine.
func TestScriptCommandsResolveOnTheLab(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "scripts", "host", "README.md"))
	if err != nil {
		t.Fatalf("read scripts/host/README.md: %v", err)
	}
	list := regexp.MustCompile("(?m)^- `([a-z_]+)\\.sh`: (.+)$").FindAllStringSubmatch(string(readme), -1)
	if len(list) == 0 {
		t.Fatal("scripts/host/README.md lists no commands")
	}
	// chroot (gpu_check with NVIDIA_DRIVER_ROOT) and crictl (snapshot
	// without etcdctl) are only called on paths the lab does not take.
	notProvided := []string{"chroot", "crictl"}
	f := newTestFleet(t, Options{ControlPlanes: 1, GPUServers: 1})
	for _, h := range f.Hosts() {
		var cmds []string
		for _, m := range list {
			for _, c := range strings.Fields(m[2]) {
				if !slices.Contains(cmds, c) && !slices.Contains(notProvided, c) {
					if c == "nvidia-smi" && h.Role != "gpu" || c == "etcdctl" && h.Role != "control-plane" {
						continue
					}
					cmds = append(cmds, c)
				}
			}
		}
		out := sh(t, f, h, "for c in "+strings.Join(cmds, " ")+"; do printf '%s %s\\n' \"$c\" \"$(command -v \"$c\" || echo MISSING)\"; done")
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			name, path, _ := strings.Cut(line, " ")
			switch {
			case path == "MISSING":
				t.Errorf("%s: %s is not available on the lab host", h.Name, name)
			case slices.Contains(emul.Commands(), name) && !strings.HasPrefix(path, filepath.Join(h.Dir(), "bin")+"/"):
				t.Errorf("%s: %s resolves to %s, not the emulated command", h.Name, name, path)
			case !slices.Contains(emul.Commands(), name) && !strings.HasPrefix(path, filepath.Join(f.Dir(), "safebin")+"/"):
				t.Errorf("%s: %s resolves to %s, outside the lab's tool directories", h.Name, name, path)
			}
		}
	}
	for _, dangerous := range []string{"reboot", "apt-get", "systemctl", "sysctl", "update-grub", "grub-reboot", "grub-editenv", "dpkg", "shutdown"} {
		if !slices.Contains(emul.Commands(), dangerous) {
			t.Errorf("%s is not emulated: a script calling it would reach the real one or fail", dangerous)
		}
	}
	if slices.ContainsFunc(safeTools, func(s string) bool {
		return slices.Contains([]string{"reboot", "shutdown", "systemctl", "apt-get", "apt", "dpkg", "sysctl", "mount", "ip", "modprobe", "chroot"}, s)
	}) {
		t.Error("a dangerous real tool is in the safe list")
	}
}
