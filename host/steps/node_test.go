package steps

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKernelStep(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "boot_id"), "abc-123\n", 0o644)
	s := newSteps(t, Paths{BootIDFile: filepath.Join(dir, "boot_id")}, "")
	k, err := s.Kernel(ctxT(t), testNode)
	if err != nil || k.Kernel != runningKernel(t) || k.BootID != "abc-123" {
		t.Fatalf("%v %+v", err, k)
	}
	// The real boot id file of this machine.
	k, err = newSteps(t, Paths{}, "").Kernel(ctxT(t), testNode)
	real, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || k.BootID != strings.TrimSpace(string(real)) {
		t.Fatalf("%v %+v", err, k)
	}
	if _, err := s.Kernel(ctxT(t), "-gpu"); !errors.Is(err, ErrBadInput) {
		t.Fatalf("leading dash node: %v", err)
	}
}

// verifyRoot builds /proc/net/bonding from the real samples, a sysfs
// infiniband tree and /proc/sys files.
func verifyRoot(t *testing.T, bonds map[string]string, ports map[string][2]string) Paths {
	t.Helper()
	root := t.TempDir()
	for name, fixture := range bonds {
		writeFile(t, filepath.Join(root, "bonding", name), readFixture(t, fixture), 0o644)
	}
	for devPort, st := range ports {
		dev, port, _ := strings.Cut(devPort, "/")
		p := filepath.Join(root, "infiniband", dev, "ports", port)
		writeFile(t, filepath.Join(p, "state"), st[0]+"\n", 0o444)
		writeFile(t, filepath.Join(p, "phys_state"), st[1]+"\n", 0o444)
		writeFile(t, filepath.Join(p, "link_layer"), "InfiniBand\n", 0o444)
		writeFile(t, filepath.Join(p, "rate"), "400 Gb/sec (4X NDR)\n", 0o444)
	}
	writeFile(t, filepath.Join(root, "sys", "kernel", "panic"), "10\n", 0o644)
	writeFile(t, filepath.Join(root, "sys", "net", "ipv4", "tcp_rmem"), "4096\t131072\t6291456\n", 0o644)
	writeFile(t, filepath.Join(root, "sys", "vm", "max_map_count"), "65530\n", 0o644)
	return Paths{ProcBonding: filepath.Join(root, "bonding"), SysInfiniband: filepath.Join(root, "infiniband"), ProcSys: filepath.Join(root, "sys")}
}

func TestVerifyStep(t *testing.T) {
	running := runningKernel(t)
	up := [2]string{"4: ACTIVE", "5: LinkUp"}
	good := verifyRoot(t,
		map[string]string{"bond0": "net/proc-net-bonding_8023ad-lacp_2x10G_telegraf.txt", "bond1": "net/proc-net-bonding-bond0_active-backup_fail_over_mac-active_both-up_centos7.txt"},
		map[string][2]string{"mlx5_0/1": up, "mlx5_1/1": up})
	bad := verifyRoot(t,
		map[string]string{"bond0": "net/proc-net-bonding-bond0_8023ad-lacp-fast_one-slave-down_centos.txt"},
		map[string][2]string{"mlx5_0/1": up, "mlx5_1/1": {"1: DOWN", "3: Disabled"}})
	in := VerifyInput{
		TargetKernel: running, ExpectedBonds: []string{"bond0"}, ExpectedRDMAPorts: 2,
		ExpectedSysctls: map[string]string{"kernel.panic": "10", "net.ipv4.tcp_rmem": "4096 131072  6291456"},
		Users:           []string{"root", "no-such-user-xyz"}, Groups: []string{"root"},
	}
	tests := []struct {
		name     string
		paths    Paths
		in       func(VerifyInput) VerifyInput
		passed   bool
		problems []string
	}{
		{"healthy", good, func(v VerifyInput) VerifyInput { return v }, true, []string{}},
		{"wrong kernel, slave down, port down, sysctl off", bad, func(v VerifyInput) VerifyInput {
			v.TargetKernel = "5.15.0-86-generic"
			v.ExpectedBonds = []string{"bond0", "bond2"}
			v.ExpectedRDMAPorts = 3
			v.ExpectedSysctls = map[string]string{"vm.max_map_count": "262144", "kernel.nope": "1"}
			return v
		}, false, []string{
			"running kernel " + running + ", expected 5.15.0-86-generic",
			"bond0 slave enp1s0f0 is down",
			"bond bond2 is missing",
			"RDMA mlx5_1/1 state is '1: DOWN'",
			"found 2 RDMA ports, expected 3",
			"sysctl kernel.nope does not exist",
			"sysctl vm.max_map_count is '65530', expected '262144'",
			"bond0 slave enp1s0f1 LACP is churned",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := newSteps(t, tc.paths, "").Verify(ctxT(t), testNode, tc.in(in))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.problems, v.Problems); d != "" || v.Passed != tc.passed {
				t.Errorf("passed %v problems (-want +got)\n%s", v.Passed, d)
			}
			if v.IdentityOK || !slices.Equal(v.IdentityProblems, []string{"user no-such-user-xyz not found"}) {
				t.Errorf("identity %v %q", v.IdentityOK, v.IdentityProblems)
			}
			if len(v.Users) != 2 || !v.Users[0].Found || !strings.HasPrefix(v.Users[0].Entry, "root:x:0:0:") || v.Groups[0].Entry == "" {
				t.Errorf("lookups %+v %+v", v.Users, v.Groups)
			}
		})
	}
	v, err := newSteps(t, good, "").Verify(ctxT(t), testNode, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Bonds) != 2 || v.Bonds[0].Mode != "IEEE 802.3ad Dynamic link aggregation" || len(v.RDMAPorts) != 2 || !v.RDMAPorts[0].Up() {
		t.Errorf("parsed %+v %+v", v.Bonds, v.RDMAPorts)
	}
	for name, bad := range map[string]VerifyInput{
		"sysctl with comma":   {TargetKernel: running, ExpectedSysctls: map[string]string{"a.b": "1,c=2"}},
		"sysctl path escape":  {TargetKernel: running, ExpectedSysctls: map[string]string{"../../etc/shadow": "x"}},
		"user with a space":   {TargetKernel: running, Users: []string{"a b"}},
		"kernel with a quote": {TargetKernel: "5.15'"},
	} {
		if _, err := newSteps(t, good, "").Verify(ctxT(t), testNode, bad); !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestGPUCheckStep: there is no GPU here, so nvidia-smi is a stand-in that
// prints a real `nvidia-smi -q -x` capture (8x V100S); systemctl is a
// stand-in for the Fabric Manager unit state.
func TestGPUCheckStep(t *testing.T) {
	root := t.TempDir()
	xml := filepath.Join(root, "smi.xml")
	writeFile(t, xml, readFixture(t, "nvidia/nvidia-smi-q-x_8x-tesla-v100s-pcie_v11-dtd_460.73.01.xml"), 0o644)
	writeFile(t, filepath.Join(root, "proc", "nvidia", "version"), "NVRM version: NVIDIA UNIX x86_64 Kernel Module  460.73.01  Thu Apr  1 21:40:36 UTC 2021\n", 0o644)
	nvswitch := filepath.Join(root, "proc", "nvswitch")
	writeFile(t, filepath.Join(nvswitch, "0"), "", 0o644)
	smi := stubDir(t, map[string]string{"nvidia-smi": `[ "$*" = "-q -x" ] && exec cat ` + xml + "\n"})
	fmUp := stubDir(t, map[string]string{"nvidia-smi": `[ "$*" = "-q -x" ] && exec cat ` + xml + "\n", "systemctl": "echo active\n"})
	noDriver := stubDir(t, map[string]string{"nvidia-smi": "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2; exit 9\n", "lsmod": "echo 'Module Size Used by'\n"})
	paths := Paths{ProcDriverNvidia: filepath.Join(root, "proc", "nvidia"), ProcNvswitch: filepath.Join(root, "proc", "none")}
	withSwitch := paths
	withSwitch.ProcNvswitch = nvswitch
	tests := []struct {
		name     string
		paths    Paths
		stubs    string
		in       GPUCheckInput
		passed   bool
		problems []string
	}{
		{"8 GPUs, no NVSwitch", paths, smi, GPUCheckInput{ExpectedGPUs: 8}, true, []string{}},
		{"one GPU missing", paths, smi, GPUCheckInput{ExpectedGPUs: 9}, false,
			[]string{"nvidia-smi sees 8 GPUs, expected 9", "nvidia-smi reports 8 attached GPUs, expected 9"}},
		{"NVSwitch without fabric manager", withSwitch, smi, GPUCheckInput{}, false,
			[]string{"NVSwitch fabric is not up: nvidia-fabricmanager is 'unknown' and no GPU reports a fabric state"}},
		{"NVSwitch with fabric manager active", withSwitch, fmUp, GPUCheckInput{ExpectedGPUs: 8}, true, []string{}},
		{"driver not loaded", Paths{ProcDriverNvidia: filepath.Join(root, "none"), ProcNvswitch: filepath.Join(root, "none")}, noDriver, GPUCheckInput{}, false,
			[]string{"the nvidia kernel module is not loaded", "nvidia-smi exited 9: NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := newSteps(t, tc.paths, tc.stubs).GPUCheck(ctxT(t), testNode, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.problems, g.Problems); d != "" || g.Passed != tc.passed {
				t.Errorf("passed %v problems (-want +got)\n%s", g.Passed, d)
			}
			if tc.passed && (len(g.GPUs) != 8 || g.DriverVersion != "460.73.01" || g.CUDAVersion != "11.2") {
				t.Errorf("%+v", g)
			}
		})
	}
	if _, err := newSteps(t, paths, smi).GPUCheck(ctxT(t), testNode, GPUCheckInput{FabricManager: "maybe"}); !errors.Is(err, ErrBadInput) {
		t.Errorf("bad fabric manager mode: %v", err)
	}
}

func TestSnapshotStep(t *testing.T) {
	etc := t.TempDir()
	writeFile(t, filepath.Join(etc, "kubernetes", "admin.conf"), "apiVersion: v1\n", 0o600)
	writeFile(t, filepath.Join(etc, "kubernetes", "pki", "ca.crt"), "cert\n", 0o644)
	writeFile(t, filepath.Join(etc, "netplan", "50-cloud-init.yaml"), "network: {}\n", 0o600)
	writeFile(t, filepath.Join(etc, "default", "grub"), readFixture(t, "grub/etc-default-grub_ubuntu2204-aws"), 0o644)
	writeFile(t, filepath.Join(etc, "sysctl.d", "99-panic.conf"), "kernel.panic = 10\n", 0o644)
	writeFile(t, filepath.Join(etc, "apt", "sources.list"), "deb http://archive.ubuntu.com/ubuntu jammy main\n", 0o644)
	backups := t.TempDir()
	s := newSteps(t, Paths{EtcDir: etc, BackupDir: backups}, "")
	ctx := ctxT(t)
	res, err := s.Snapshot(ctx, testNode, "r1", RoleWorker, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused || res.EtcdMethod != "none" || len(res.Files) != 2 {
		t.Fatalf("%+v", res)
	}
	if d := cmp.Diff([]string{"netplan", "default/grub", "sysctl.d", "apt/sources.list"}, res.HostConfigPaths); d != "" {
		t.Errorf("paths (-want +got)\n%s", d)
	}
	for _, f := range res.Files {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(b)) != f.Size {
			t.Errorf("%s: recorded %s/%d", f.Name, f.SHA256, f.Size)
		}
	}
	out, err := exec.Command("tar", "-tzf", filepath.Join(backups, "r1", "etc-kubernetes.tar.gz")).Output()
	if err != nil || !strings.Contains(string(out), "kubernetes/pki/ca.crt") {
		t.Errorf("tar: %v %s", err, out)
	}
	// Again: the complete snapshot is kept as it is.
	again, err := s.Snapshot(ctx, testNode, "r1", RoleWorker, "")
	if err != nil || !again.Reused || !cmp.Equal(again.Files, res.Files) {
		t.Fatalf("again: %v %+v", err, again)
	}
	// A damaged snapshot is not silently replaced.
	writeFile(t, filepath.Join(backups, "r1", "host-config.tar.gz"), "garbage", 0o600)
	if _, err := s.Snapshot(ctx, testNode, "r1", RoleWorker, ""); !errors.Is(err, ErrStepFailed) || !strings.Contains(err.Error(), "does not match its SHA256SUMS") {
		t.Fatalf("damaged: %v", err)
	}
	// A control plane needs kubeadm's etcd client certificate and etcdctl
	// or crictl; without them nothing is recorded as complete.
	_, err = s.Snapshot(ctx, testNode, "r2", RoleControlPlane, "")
	if !errors.Is(err, ErrStepFailed) || !strings.Contains(err.Error(), "pki/etcd/ca.crt") {
		t.Fatalf("control plane: %v", err)
	}
	if _, err := os.Stat(filepath.Join(backups, "r2", "SHA256SUMS")); !os.IsNotExist(err) {
		t.Error("incomplete snapshot marked complete")
	}
}
