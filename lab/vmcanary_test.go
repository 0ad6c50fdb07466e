package lab

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/lab/vm"
)

// TestRealVMCanaryRound runs the demo round on a lab whose canary GPU
// server is the real Debian VM under OVMF (`mcp-patch lab up --vm-canary`):
// the unchanged server drives it over SSH like any node, so the canary's
// install, fallback drill (a real panic, back on the old kernel through
// GRUB's default), trial boot (grub-reboot), verify, GPU acceptance and
// promote run on a real bootloader and kernels. It runs in scripts/test.sh's
// real-VM phase (its name starts with TestRealVM), not beside the lab's
// other tests.
func TestRealVMCanaryRound(t *testing.T) {
	for _, c := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s is not installed (scripts/setup.sh installs it): %v", c, err)
		}
	}
	start := time.Now()
	l := upLab(t, Options{ControlPlanes: 3, Canary: 1, GPUServers: 1, VMCanary: true, VMFirmware: vm.UEFI})
	c := l.VMCanary
	if c == nil {
		t.Fatal("the lab has no VM canary")
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("VM canary's serial log tail:\n%s", c.VM.SerialTail(80))
		}
	})
	img := c.VM.Image
	labUp := time.Since(start)
	t.Logf("lab with the VM canary up after %s (kernels %s -> %s, %s)", labUp.Round(time.Second), img.OldKernel, img.NewKernel, c.Firmware)
	sh := func(script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := c.run(ctx, script)
		if err != nil {
			t.Fatalf("on the VM: %v\nscript: %s", err, script)
		}
		return out
	}

	// Provisioned: its name, the played GPUs with their driver, the real
	// bond, the platform's sysctls, booted by UEFI from GRUB's entry.
	if got := sh("hostname"); got != VMCanaryName {
		t.Errorf("the VM's hostname is %q, want %s", got, VMCanaryName)
	}
	if got := sh("nvidia-smi -q -x | grep -c '<gpu id='"); got != "8" {
		t.Errorf("nvidia-smi sees %s GPUs, want 8", got)
	}
	if got := sh("systemctl is-active nvidia-fabricmanager.service"); got != "active" {
		t.Errorf("nvidia-fabricmanager is %s", got)
	}
	if got := sh("grep -c '^MII Status: up' /proc/net/bonding/bond0"); got != "3" {
		t.Errorf("bond0 and its two links: %s of 3 up", got)
	}
	if got := sh("sysctl -n net.bridge.bridge-nf-call-iptables vm.max_map_count | tr '\\n' ' '"); got != "1 262144" {
		t.Errorf("platform sysctls: %q", got)
	}
	if !strings.Contains(sh("efibootmgr"), "debian") {
		t.Errorf("not booted from GRUB's UEFI entry")
	}
	panicsBefore := strings.Count(serial(t, c), "Kernel panic")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	roundStart := time.Now()
	res, err := l.RunRound(ctx, "2026-12", tw{t}, testLog(t))
	if err != nil {
		t.Fatalf("round: %v (after %d calls)", err, res.Outcome.Calls)
	}
	if !res.Outcome.Closed {
		t.Fatalf("round did not close: %+v", res.Outcome)
	}
	t.Logf("round closed in %s: %d calls, %d approvals", time.Since(roundStart).Round(time.Second), res.Outcome.Calls, res.Outcome.Approvals)

	// The canary runs the new kernel, GRUB's default is it, nothing is
	// left queued, and the cluster's Node reports it.
	if got := sh("uname -r"); got != img.NewKernel {
		t.Errorf("the VM canary runs %s after the round, want %s", got, img.NewKernel)
	}
	if env := sh("grub-editenv list"); strings.Contains(env, "next_entry=") && !strings.Contains(env, "next_entry=\n") && !strings.HasSuffix(env, "next_entry=") {
		t.Errorf("a one-shot entry is still queued after promote: %s", env)
	}
	n, err := l.Cluster.Client().CoreV1().Nodes().Get(ctx, VMCanaryName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.NodeInfo.KernelVersion != img.NewKernel {
		t.Errorf("the canary's Node reports kernel %s, want %s", n.Status.NodeInfo.KernelVersion, img.NewKernel)
	}
	if n.Spec.Unschedulable {
		t.Errorf("the canary's Node is still cordoned")
	}
	// The fallback drill was a real panic on the new kernel.
	if got := strings.Count(serial(t, c), "Kernel panic") - panicsBefore; got < 1 {
		t.Errorf("the serial log shows %d kernel panics during the round; the fallback drill makes one", got)
	}
	// The canary's steps in the round's journal.
	journal, err := exec.Command("git", "-C", l.IntentRepo, "show", res.Branch+":rounds/2026-12/journal.jsonl").Output()
	if err != nil {
		t.Fatalf("journal not committed: %v", err)
	}
	var canary []string
	for _, line := range strings.Split(string(journal), "\n") {
		if strings.Contains(line, `"node":"`+VMCanaryName+`"`) {
			canary = append(canary, line)
		}
	}
	for _, want := range []string{`"fell_back"`, `"new_kernel"`} {
		if !strings.Contains(strings.Join(canary, "\n"), want) {
			t.Errorf("the journal's records of %s lack %s", VMCanaryName, want)
		}
	}
	// The promoted default holds across one more boot (GRUB, not only
	// grubenv's word for it).
	bootID := sh("cat /proc/sys/kernel/random/boot_id")
	rebootStart := time.Now()
	sh("systemd-run --on-active=3 --quiet systemctl reboot")
	bctx, bcancel := context.WithTimeout(context.Background(), vmRebootTimeout)
	defer bcancel()
	if err := c.VM.WaitFor(bctx, "the VM canary to boot again", func(ctx context.Context) error {
		out, err := c.run(ctx, "cat /proc/sys/kernel/random/boot_id")
		if err != nil {
			return err
		}
		if out == bootID {
			return errStillUp
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := sh("uname -r"); got != img.NewKernel {
		t.Errorf("after one more reboot the canary runs %s, want the promoted %s", got, img.NewKernel)
	}
	t.Logf("boot after the round: %s", time.Since(rebootStart).Round(time.Second))
	t.Logf("whole test: %s (lab up %s)", time.Since(start).Round(time.Second), labUp.Round(time.Second))
}

var errStillUp = errors.New("the old boot is still up")

func serial(t *testing.T, c *VMCanary) string {
	t.Helper()
	s, err := c.VM.Serial()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
