package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
	"github.com/mcp-patch/mcp-patch/lab/vm"
	"github.com/mcp-patch/mcp-patch/lab/world"
)

// VMCanaryName is the node name of the canary GPU server when it is the
// real VM (Options.VMCanary): the name the emulated canary has.
const VMCanaryName = "gpu-canary-1"

// vmRebootTimeout is the lab's ssh.reboot_timeout with a VM canary: one
// reboot under QEMU TCG takes 50-70 s on a quiet machine and minutes on a
// loaded one (the real-VM tests allow 15 minutes).
const vmRebootTimeout = 20 * time.Minute

// vmPoll is the demo agent's pause before it calls a step of the VM canary
// in progress again (200 ms for the emulated hosts): each call runs a host
// step on the VM's one emulated CPU, which the install needs.
const vmPoll = 3 * time.Second

// VMCanary is the lab's canary GPU server when it is a real Debian VM:
// real GRUB (BIOS or UEFI), real kernels, systemd, apt and sshd, with the
// GPU surfaces a VM cannot have played from files (see provisionScript).
type VMCanary struct {
	// Name is its node name (VMCanaryName).
	Name string
	VM   *vm.VM
	// Firmware is what it boots with.
	Firmware vm.Firmware
	// DriverVersion is the NVIDIA driver version its stand-ins report
	// (the version of the image's NVIDIA module package).
	DriverVersion string

	pool  *host.Pool
	watch *vmWatch
}

// startVMCanary finds (or builds) the VM image and boots a fresh overlay
// of it; Lab.provisionVMCanary makes it the lab's canary once sshd answers.
func startVMCanary(ctx context.Context, opts Options) (*VMCanary, error) {
	img, err := vm.FindImage(ctx, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("lab: VM canary: %w", err)
	}
	dir := filepath.Join(opts.Dir, "vm-canary")
	// A reset lab boots a fresh overlay: the last one's disk is gone.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("lab: VM canary: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: VM canary: %w", err)
	}
	v, err := vm.Boot(ctx, img, vm.Options{Dir: dir, Name: VMCanaryName, Firmware: opts.VMFirmware, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("lab: VM canary: %w", err)
	}
	return &VMCanary{Name: VMCanaryName, VM: v, Firmware: opts.VMFirmware}, nil
}

// Close stops the probe, the SSH connections and QEMU.
func (c *VMCanary) Close() error {
	var errs []error
	if c.watch != nil {
		c.watch.stop()
	}
	if c.pool != nil {
		errs = append(errs, c.pool.Close())
	}
	errs = append(errs, c.VM.Stop())
	return errors.Join(errs...)
}

// provision waits for the VM's sshd and makes it the lab's canary
// GPU server: its node name, the fleet's operator key, the platform's
// sysctls and bond, and the GPU surfaces played from files.
func (c *VMCanary) provision(ctx context.Context, operatorPub, sysctls string) error {
	bctx, cancel := context.WithTimeout(ctx, vmRebootTimeout)
	defer cancel()
	if err := c.VM.WaitSSH(bctx); err != nil {
		return fmt.Errorf("lab: VM canary: %w", err)
	}
	inv, err := host.NewMapInventory(host.Target{}, host.Target{Name: c.Name, Address: "127.0.0.1", Port: c.VM.Port, User: "root"})
	if err != nil {
		return fmt.Errorf("lab: VM canary: %w", err)
	}
	c.pool, err = host.NewPool(inv, host.Config{
		KnownHostsFiles:   []string{c.VM.KnownHosts},
		IdentityFiles:     []string{c.VM.Image.KeyFile},
		DialTimeout:       20 * time.Second,
		CommandTimeout:    5 * time.Minute,
		KeepaliveInterval: 5 * time.Second,
		KeepaliveTimeout:  10 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("lab: VM canary: %w", err)
	}
	ver, err := c.run(bctx, "dpkg-query -W -f='${Version}' linux-modules-nvidia-550-server-generic")
	if err != nil {
		return fmt.Errorf("lab: VM canary: the NVIDIA module package's version: %w", err)
	}
	c.DriverVersion, _, _ = strings.Cut(ver, "+")
	if _, err := c.run(bctx, provisionScript(c.Name, c.DriverVersion, operatorPub, sysctls, time.Now())); err != nil {
		return fmt.Errorf("lab: VM canary: provision: %w", err)
	}
	c.watch = newVMWatch(c)
	return nil
}

// run runs script on the VM as root and returns its stdout; a non-zero
// exit is an error with its stderr.
func (c *VMCanary) run(ctx context.Context, script string) (string, error) {
	out, err := c.pool.RunScript(ctx, c.Name, []byte("set -eu\n"+script+"\n"), nil)
	if err != nil {
		return "", err
	}
	if out.ExitCode != 0 {
		return "", fmt.Errorf("exit %d: %s", out.ExitCode, strings.TrimSpace(string(out.Stderr)))
	}
	return strings.TrimSpace(string(out.Stdout)), nil
}

// Paths of the GPU surfaces the VM canary plays (sshd's SetEnv points the
// host steps at them, as the emulated hosts' sshd points them into each
// host's root).
const (
	vmGPUDir    = "/opt/lab-gpu"  // what does not change: nvidia-smi's answers, RDMA ports
	vmGPURunDir = "/run/lab-gpu"  // what a boot makes: the driver, while the kernel has its modules
	vmNvidiaKo  = "nvidia-550srv" // the image's NVIDIA module directory under /lib/modules/KERNEL/kernel
)

// provisionScript is the shell that makes the booted VM the lab's canary
// GPU server. A VM has no GPU, NVSwitch or InfiniBand HCA, so those are
// played from files, the way the emulated hosts play them, but tied to the
// real boot: a unit at every boot "loads the driver" (writes
// /proc/driver/nvidia/version's stand-in and the NVSwitch devices, and
// lets nvidia-fabricmanager.service start) only when the running kernel
// has the NVIDIA module package's nvidia.ko, and the nvidia-smi stand-in
// fails as the real one does without its driver. The bond is real: bond0
// over two dummy links, made by systemd-networkd (the bonding driver
// writes /proc/net/bonding/bond0). The platform's sysctls go to
// /etc/sysctl.d (br_netfilter loaded at boot for the bridge ones) and are
// applied now.
func provisionScript(name, driverVersion, operatorPub, sysctls string, now time.Time) string {
	st := machine.NewState(machine.Spec{Hostname: name, Role: machine.RoleGPU})
	st.DriverVersion = driverVersion
	st.GPUsVisible = len(st.GPUs)
	smi := strings.TrimRight(machine.NvidiaSmiXML(st, now), "\n") + "\n"
	var ib strings.Builder
	for _, p := range st.RDMA {
		d := fmt.Sprintf("%s/infiniband/%s", vmGPUDir, p.Device)
		fmt.Fprintf(&ib, "mkdir -p %[1]s/ports/%[2]d\nprintf '4: ACTIVE\\n' >%[1]s/ports/%[2]d/state\nprintf '5: LinkUp\\n' >%[1]s/ports/%[2]d/phys_state\n"+
			"printf '%[3]d Gb/sec (4X NDR)\\n' >%[1]s/ports/%[2]d/rate\nprintf '%[4]s\\n' >%[1]s/ports/%[2]d/link_layer\nprintf 'MT4129\\n' >%[1]s/hca_type\n",
			d, p.Port, p.Rate, p.LinkLayer)
	}
	var query strings.Builder
	for range st.GPUs {
		query.WriteString(driverVersion + "\\n")
	}
	return fmt.Sprintf(`# The node's name.
printf '%[1]s\n' >/etc/hostname
hostname %[1]s
printf '127.0.0.1 localhost\n127.0.1.1 %[1]s\n' >/etc/hosts
# The fleet's operator key, as on every lab host.
printf '%%s\n' '%[4]s' >>/root/.ssh/authorized_keys

# GPU surfaces.
rm -rf %[2]s && mkdir -p %[2]s
cat >%[2]s/nvidia-smi.xml <<'LAB_SMI_EOF'
%[5]sLAB_SMI_EOF
%[6]s
cat >/usr/local/sbin/lab-gpu-driver <<'EOF'
#!/bin/sh
# mcp-patch lab: the NVIDIA driver "loads" at boot when the running kernel
# has nvidia.ko (a VM has no GPU; the driver's files are played).
set -eu
rm -rf %[3]s
mkdir -p %[3]s/proc/driver/nvidia %[3]s/nvswitch
if ls /lib/modules/"$(uname -r)"/kernel/%[7]s/nvidia.ko* >/dev/null 2>&1; then
	printf 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  %[8]s  Tue Sep 24 08:07:36 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n' >%[3]s/proc/driver/nvidia/version
	for d in 0000:05:00.0 0000:06:00.0 0000:07:00.0 0000:08:00.0; do mkdir -p %[3]s/nvswitch/devices/$d; done
	touch %[3]s/driver-loaded
	echo "lab-gpu: NVIDIA driver %[8]s loaded on $(uname -r)"
else
	echo "lab-gpu: no nvidia.ko for $(uname -r): the driver is not loaded"
fi
EOF
chmod 755 /usr/local/sbin/lab-gpu-driver
cat >/usr/local/bin/nvidia-smi <<'EOF'
#!/bin/sh
# mcp-patch lab: nvidia-smi of the VM canary's 8 played GPUs.
if [ ! -e %[3]s/driver-loaded ]; then
	printf "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"
	exit 9
fi
case "$*" in
"-q -x" | "-x -q") cat %[2]s/nvidia-smi.xml ;;
*--query-gpu=driver_version*) printf '%[9]s' ;;
*) echo "lab nvidia-smi: '$*' is not played in the lab" >&2; exit 2 ;;
esac
EOF
chmod 755 /usr/local/bin/nvidia-smi
cat >/etc/systemd/system/lab-gpu.service <<'EOF'
[Unit]
Description=mcp-patch lab: the NVIDIA driver's files, when the running kernel has nvidia.ko
Before=nvidia-fabricmanager.service ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
StandardOutput=journal+console
ExecStart=/usr/local/sbin/lab-gpu-driver

[Install]
WantedBy=multi-user.target
EOF
cat >/etc/systemd/system/nvidia-fabricmanager.service <<'EOF'
[Unit]
Description=mcp-patch lab: NVIDIA Fabric Manager (played; starts when the driver loaded)
After=lab-gpu.service
Requires=lab-gpu.service
ConditionPathExists=%[3]s/driver-loaded

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
EOF
systemctl daemon-reload
systemctl enable --now lab-gpu.service nvidia-fabricmanager.service >/dev/null 2>&1
systemctl is-active nvidia-fabricmanager.service >/dev/null

# The host steps read the played surfaces (sshd sets the paths for every
# session, as the emulated hosts' sshd does).
printf 'SetEnv PROC_DRIVER_NVIDIA=%[3]s/proc/driver/nvidia PROC_NVSWITCH=%[3]s/nvswitch/devices SYS_INFINIBAND=%[2]s/infiniband\n' >>/etc/ssh/sshd_config.d/lab.conf
systemctl reload ssh.service

# bond0 over two dummy links: the real bonding driver.
cat >/etc/systemd/network/20-lab-bond0.netdev <<'EOF'
[NetDev]
Name=bond0
Kind=bond

[Bond]
Mode=active-backup
MIIMonitorSec=100ms
EOF
for i in 0 1; do
	printf '[NetDev]\nName=labnic%%s\nKind=dummy\n' $i >/etc/systemd/network/20-lab-nic$i.netdev
done
printf '[Match]\nName=labnic0 labnic1\n\n[Network]\nBond=bond0\n' >/etc/systemd/network/20-lab-nic.network
printf '[Match]\nName=bond0\n\n[Network]\nLinkLocalAddressing=no\nConfigureWithoutCarrier=yes\n' >/etc/systemd/network/20-lab-bond0.network
networkctl reload
i=0
until grep -q 'Slave Interface: labnic1' /proc/net/bonding/bond0 2>/dev/null; do
	i=$((i + 1)); [ $i -lt 120 ] || { echo 'bond0 did not come up with its two links' >&2; exit 1; }
	sleep 0.5
done

# The platform's sysctls.
printf 'br_netfilter\n' >/etc/modules-load.d/lab-platform.conf
modprobe br_netfilter
cat >/etc/sysctl.d/90-platform.conf <<'EOF'
%[10]sEOF
sysctl -q -p /etc/sysctl.d/90-platform.conf
`, name, vmGPUDir, vmGPURunDir, strings.TrimSpace(operatorPub), smi, ib.String(), vmNvidiaKo, driverVersion, query.String(), sysctls)
}

// vmWatch is the VM canary's kubelet as the World sees it: every 2 s it
// asks the VM for its kernel and boot id over SSH; the World's probe reads
// the last answer. A boot id that changed between two answers (a reboot
// quicker than two polls) is shown as one down before the new kernel, so
// the cluster always sees the reboot.
type vmWatch struct {
	c      *VMCanary
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	up       bool
	kernel   string
	bootID   string
	showDown bool
}

func newVMWatch(c *VMCanary) *vmWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &vmWatch{c: c, cancel: cancel, done: make(chan struct{})}
	w.poll(ctx)
	go func() {
		defer close(w.done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
			w.poll(ctx)
		}
	}()
	return w
}

func (w *vmWatch) poll(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := w.c.run(pctx, "cat /proc/sys/kernel/osrelease /proc/sys/kernel/random/boot_id")
	w.mu.Lock()
	defer w.mu.Unlock()
	f := strings.Fields(out)
	if err != nil || len(f) != 2 {
		w.up = false
		return
	}
	if w.bootID != "" && f[1] != w.bootID && w.up {
		w.showDown = true
	}
	w.up, w.kernel, w.bootID = true, f[0], f[1]
}

// probe is the World's HostProbe for the VM canary.
func (w *vmWatch) probe() (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.showDown {
		w.showDown = false
		return false, ""
	}
	return w.up, w.kernel
}

func (w *vmWatch) stop() {
	w.cancel()
	<-w.done
}

// worldHost is the VM canary as a World host.
func (c *VMCanary) worldHost() world.Host {
	return world.Host{Name: c.Name, Role: world.RoleGPU, Canary: true, Kernel: c.VM.Image.OldKernel}
}

// provisionVMCanary provisions the booted VM canary and writes the lab's
// inventory: the fleet's, with the VM's entry (the fleet's operator key is
// authorized on it, as on every lab host).
func (l *Lab) provisionVMCanary(ctx context.Context) error {
	pub, err := os.ReadFile(l.Fleet.OperatorKeyFile() + ".pub")
	if err != nil {
		return fmt.Errorf("lab: VM canary: %w", err)
	}
	sysctls, err := platformSysctls()
	if err != nil {
		return fmt.Errorf("lab: VM canary: %w", err)
	}
	if err := l.VMCanary.provision(ctx, string(pub), sysctls); err != nil {
		return err
	}
	inv, err := os.ReadFile(l.Fleet.InventoryFile())
	if err != nil {
		return fmt.Errorf("lab: VM canary: %w", err)
	}
	// The fleet's inventory ends with its nodes: map.
	entry := fmt.Sprintf("  %s:\n    address: 127.0.0.1\n    port: %d\n", l.VMCanary.Name, l.VMCanary.VM.Port)
	l.Inventory = filepath.Join(l.Dir, "inventory.yaml")
	if err := os.WriteFile(l.Inventory, append(inv, entry...), 0o644); err != nil {
		return fmt.Errorf("lab: VM canary: %w", err)
	}
	return nil
}

// SSHCommand is how a person reaches the VM canary as root.
func (c *VMCanary) SSHCommand() string {
	return fmt.Sprintf("ssh -i %s -p %d -o UserKnownHostsFile=%s root@127.0.0.1", c.VM.Image.KeyFile, c.VM.Port, c.VM.KnownHosts)
}
