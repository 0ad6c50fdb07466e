package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
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
	// Booted by OVMF from the boot entry grub-install wrote (GRUB's
	// x86_64-efi image on the ESP); grub.cfg and grubenv stay on the root
	// filesystem, where that image looks for them, so grub-reboot and
	// grub-editenv work as under BIOS.
	efi := sh("test -d /sys/firmware/efi && efibootmgr && find /boot/efi -type f | sort && ls -l /boot/grub/grubenv")
	t.Logf("UEFI boot entries, the ESP and grubenv:\n%s", efi)
	if !strings.Contains(efi, "/boot/efi/EFI/debian/grubx64.efi") {
		t.Errorf("no GRUB image on the ESP:\n%s", efi)
	}
	if cur := sh("efibootmgr | sed -n 's/^BootCurrent: //p'"); !strings.Contains(sh("efibootmgr | grep '^Boot"+cur+"'"), "debian") {
		t.Errorf("BootCurrent %s is not GRUB's debian entry:\n%s", cur, efi)
	}
	ictx, icancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer icancel()
	insp, err := steps.New(c.pool, nil).Inspect(ictx, VMCanaryName, steps.InspectInput{TargetKernel: img.NewKernel})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if insp.Kernel != img.OldKernel || !insp.Grub.EnvWritableAtBoot || !insp.Grub.HonoursNextEntry || insp.NvidiaDriverVersion != c.DriverVersion {
		t.Fatalf("inspect under UEFI: kernel %s, grubenv writable %v, next_entry honoured %v, NVIDIA driver %q (want %s)", insp.Kernel, insp.Grub.EnvWritableAtBoot, insp.Grub.HonoursNextEntry, insp.NvidiaDriverVersion, c.DriverVersion)
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
	env, err := parse.ParseGrubEnv([]byte(sh("cat /boot/grub/grubenv")))
	if err != nil {
		t.Fatalf("grubenv: %v", err)
	}
	if ne := env.Get("next_entry"); ne != "" {
		t.Errorf("a one-shot entry is still queued after promote: next_entry=%s", ne)
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
	// The canary's window in the round's journal: every step done, the
	// trial boot on the new kernel, and the fallback drill's lesson.
	journal, err := exec.Command("git", "-C", l.IntentRepo, "show", res.Branch+":rounds/2026-12/journal.jsonl").Output()
	if err != nil {
		t.Fatalf("journal not committed: %v", err)
	}
	done := map[string]string{}
	drill := ""
	var took []string // the canary's steps, each from its start to its end
	started := map[string]time.Time{}
	var lastEnd time.Time
	for _, line := range strings.Split(strings.TrimSpace(string(journal)), "\n") {
		var r struct {
			Kind, Node, Step, Outcome, Detail, Kernel string
			Time                                      time.Time
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		if r.Kind == "step_started" && r.Node == VMCanaryName {
			started[r.Step] = r.Time
		}
		if r.Kind == "step_finished" && r.Node == VMCanaryName && r.Outcome == "done" {
			done[r.Step] = r.Kernel
			took = append(took, fmt.Sprintf("%s %s", r.Step, r.Time.Sub(started[r.Step]).Round(time.Second)))
			lastEnd = r.Time
		}
		if r.Kind == "lesson" && strings.HasPrefix(r.Detail, "fallback drill on "+VMCanaryName+" passed") {
			drill = r.Detail
			// The drill's arm, reboot through a real panic and disarm, from
			// the install's end.
			took = append(took, fmt.Sprintf("fallback_drill %s", r.Time.Sub(lastEnd).Round(time.Second)))
		}
	}
	t.Logf("canary steps: %s", strings.Join(took, ", "))
	for _, step := range []string{"drain", "install", "trial_boot", "verify", "uncordon", "gpu_acceptance", "promote", "gate"} {
		if _, ok := done[step]; !ok {
			t.Errorf("the journal shows no %s done on %s", step, VMCanaryName)
		}
	}
	if done["trial_boot"] != img.NewKernel {
		t.Errorf("the trial boot's record names kernel %q, want %s", done["trial_boot"], img.NewKernel)
	}
	if !strings.Contains(drill, "back on "+img.OldKernel) {
		t.Errorf("no lesson of a fallback drill back on %s: %q", img.OldKernel, drill)
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

	// The played driver follows the running kernel's modules: without the
	// NVIDIA modules for it the driver does not load, and GPU acceptance's
	// host check is red, as on a server whose new kernel lacks them.
	sh("mv /lib/modules/$(uname -r)/kernel/" + vmNvidiaKo + " /root/nvidia-modules.away && systemctl restart lab-gpu.service nvidia-fabricmanager.service")
	gctx, gcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer gcancel()
	gc, err := steps.New(c.pool, nil).GPUCheck(gctx, VMCanaryName, steps.GPUCheckInput{ExpectedGPUs: 8, FabricManager: "required"})
	if gc.Passed || gc.DriverLoaded || gc.GPUCount != 0 || gc.FabricManagerState == "active" {
		t.Errorf("GPU check without the running kernel's NVIDIA modules: %+v (%v)", gc, err)
	}
	t.Logf("GPU check without the NVIDIA modules: %v (%v)", gc.Problems, err)
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
