package fleet

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/lab/fleet/emul"
	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

// Power is where a host stands in its boot cycle.
type Power string

const (
	PowerUp           Power = "up"            // booted, SSH answering
	PowerShuttingDown Power = "shutting-down" // reboot requested; SSH still up
	PowerBooting      Power = "booting"       // down: firmware, GRUB, kernel start
	PowerPanicked     Power = "panicked"      // the kernel panicked; reboots after its panic timeout if it has one
	PowerHung         Power = "hung"          // down until a power cycle
	PowerOff          Power = "off"           // powered off
)

// BootRecord is one boot attempt of a host, as the lab played it.
type BootRecord struct {
	At       time.Time
	Entry    string // GRUB id path of the entry booted
	Kernel   string
	Result   machine.BootResult
	FromNext bool // chosen by a one-shot next_entry
	Fallback bool // the default named no entry; GRUB took entry 0
	Reason   string
	BootID   string
	// PanicTimeout is the kernel's panic timeout for this boot (seconds;
	// 0: a panic hangs the host).
	PanicTimeout int
}

// Host is one emulated server.
type Host struct {
	// Name is the node name (cp-1, gpu-canary-1, gpu-3, ...).
	Name string
	Role machine.Role
	// Canary marks the GPU server(s) patched first.
	Canary bool

	fleet *Fleet
	m     *machine.Host
	port  int
	env   []string

	mu       sync.Mutex
	power    Power
	listener net.Listener
	conns    map[*ssh.ServerConn]struct{}
	sessions map[*session]struct{}
	hostKey  ssh.Signer
	origKey  ssh.Signer
	forwards map[string]string
	seq      int // bumps on every power request; stale boot goroutines stop
	changed  chan struct{}
	history  []BootRecord
	faults   []Fault
	drops    []time.Time
	// lockHolder holds the host's dpkg lock (fault dpkg-locked).
	lockHolder *exec.Cmd
}

// Addr is "127.0.0.1:port" of the host's SSH server.
func (h *Host) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(h.port)) }

// Port is the host's SSH port on 127.0.0.1 (the same across reboots).
func (h *Host) Port() int { return h.port }

// Dir is the host's directory (state, env, bin, root).
func (h *Host) Dir() string { return h.m.Dir }

// Root is the directory laid out like the host's filesystem.
func (h *Host) Root() string { return h.m.Root() }

// Path returns the host-root path of an absolute path on the host.
func (h *Host) Path(abs string) string { return h.m.Path(abs) }

// Machine gives direct access to the host's persisted state.
func (h *Host) Machine() *machine.Host { return h.m }

// State reads the host's current state.
func (h *Host) State() (*machine.State, error) { return h.m.View() }

// Env is the environment every process on the host starts with.
func (h *Host) Env() []string { return slices.Clone(h.env) }

// HostKey is the public host key the SSH server offers now.
func (h *Host) HostKey() ssh.PublicKey {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hostKey.PublicKey()
}

// Power reports where the host stands.
func (h *Host) Power() Power {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.power
}

// BootHistory returns the boot attempts since the fleet started, the
// first boot included.
func (h *Host) BootHistory() []BootRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.history)
}

// WaitPower waits until the host is in one of the given states.
func (h *Host) WaitPower(ctx context.Context, want ...Power) error {
	for {
		h.mu.Lock()
		p, ch := h.power, h.changed
		h.mu.Unlock()
		if slices.Contains(want, p) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("host %s: waiting for %v, still %s: %w", h.Name, want, p, ctx.Err())
		}
	}
}

func (h *Host) setPowerLocked(p Power) {
	if h.power == p {
		return
	}
	h.power = p
	close(h.changed)
	h.changed = make(chan struct{})
}

// SetForward makes a direct-tcpip request for from ("127.0.0.1:2379" as
// the host sees it) connect to to (a loopback address of this machine,
// e.g. the lab's etcd member for this host). An empty to removes it.
func (h *Host) SetForward(from, to string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if to == "" {
		delete(h.forwards, from)
		return
	}
	h.forwards[from] = to
}

func (h *Host) pathEnv() string {
	return filepath.Join(h.m.Dir, "bin") + ":" + h.fleet.safe
}

// create lays out the host directory, its commands and keys, and boots it.
func (h *Host) create(ctx context.Context) error {
	f := h.fleet
	dir := filepath.Join(f.dir, "hosts", h.Name)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("create host %s: %w", h.Name, err)
	}
	spec := machine.Spec{Hostname: h.Name, Role: h.Role, GPUModel: f.opts.GPUModel, GPUs: f.opts.GPUsPerServer}
	st := machine.NewState(spec)
	if f.opts.KernelPanic > 0 {
		st.Sysctl["kernel.panic"] = strconv.Itoa(f.opts.KernelPanic)
	}
	m, err := machine.Create(dir, st)
	if err != nil {
		return fmt.Errorf("create host %s: %w", h.Name, err)
	}
	h.m = m
	h.conns = map[*ssh.ServerConn]struct{}{}
	h.sessions = map[*session]struct{}{}
	h.forwards = map[string]string{}
	h.changed = make(chan struct{})
	h.power = PowerBooting
	if err := h.linkCommands(); err != nil {
		return fmt.Errorf("create host %s: %w", h.Name, err)
	}
	h.env = h.baseEnv()
	if err := os.WriteFile(filepath.Join(dir, "env"), []byte(strings.Join(h.env, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("create host %s: %w", h.Name, err)
	}
	if err := machine.Populate(m, h.pathEnv()); err != nil {
		return fmt.Errorf("create host %s: %w", h.Name, err)
	}
	if err := h.makeHostKey(); err != nil {
		return fmt.Errorf("create host %s: %w", h.Name, err)
	}
	if err := os.MkdirAll(h.Path("/run/systemd/system"), 0o755); err != nil {
		return err
	}
	rec, err := h.bootOnce(time.Now().Add(-19 * 24 * time.Hour))
	if err != nil {
		return fmt.Errorf("create host %s: first boot: %w", h.Name, err)
	}
	if rec.Result != machine.BootUp {
		return fmt.Errorf("create host %s: first boot: %s", h.Name, rec.Reason)
	}
	return ctx.Err()
}

func (h *Host) linkCommands() error {
	bin := filepath.Join(h.m.Dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	for _, c := range emul.Commands() {
		if h.Role != machine.RoleGPU && slices.Contains(emul.GPUOnly, c) {
			continue
		}
		if h.Role != machine.RoleControlPlane && slices.Contains(emul.ControlPlaneOnly, c) {
			continue
		}
		if err := os.Symlink(h.fleet.tool, filepath.Join(bin, c)); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// baseEnv is the environment of every process on the host: the PATH of
// emulated and harmless real tools only, the lab's own variables, and the
// host scripts' path overrides pointing into the host root.
func (h *Host) baseEnv() []string {
	root := h.m.Root()
	f := h.fleet
	env := []string{
		"PATH=" + h.pathEnv(),
		"HOME=" + filepath.Join(root, "root"),
		"USER=root", "LOGNAME=root", "SHELL=/bin/sh", "LANG=C.UTF-8",
		"TMPDIR=" + filepath.Join(root, "tmp"),
		emul.EnvHost + "=" + h.Name,
		emul.EnvHostDir + "=" + h.m.Dir,
		emul.EnvControl + "=" + f.controlPath,
		emul.EnvTimerScale + "=" + strconv.FormatFloat(f.opts.TimerScale, 'g', -1, 64),
		emul.EnvStepDelay + "=" + f.opts.InstallStep.String(),
		"LAB_ROOT=" + root,
	}
	for name, p := range PathOverrides {
		env = append(env, name+"="+filepath.Join(root, p))
	}
	slices.Sort(env)
	return env
}

// PathOverrides are the variables of scripts/host/*.sh that name a path on
// the host, and the host path each points to. The lab sets each to that
// path inside the host root.
var PathOverrides = map[string]string{
	"GRUB_CFG":           "/boot/grub/grub.cfg",
	"GRUB_DIR":           "/boot/grub",
	"GRUB_DEFAULTS":      "/etc/default/grub",
	"GRUB_DROPIN":        "/etc/default/grub.d/99-trial-boot.cfg",
	"BOOT_ID_FILE":       "/proc/sys/kernel/random/boot_id",
	"PROC_UPTIME":        "/proc/uptime",
	"PROC_SYS":           "/proc/sys",
	"PROC_MDSTAT":        "/proc/mdstat",
	"PROC_BONDING":       "/proc/net/bonding",
	"PROC_DRIVER_NVIDIA": "/proc/driver/nvidia",
	"PROC_NVSWITCH":      "/proc/driver/nvidia-nvswitch/devices",
	"SYS_INFINIBAND":     "/sys/class/infiniband",
	"REBOOT_REQUIRED":    "/var/run/reboot-required",
	"BOOT_DIR":           "/boot",
	// Not read by the scripts' code but by dpkg and apt, and by the
	// scripts to find dpkg's journal (an interrupted dpkg).
	"DPKG_ADMINDIR":  "/var/lib/dpkg",
	"MODULES_DIR":    "/lib/modules",
	"STATE_DIR":      "/var/lib/mcp-patch",
	"BACKUP_DIR":     "/var/backups/mcp-patch",
	"SYSTEMD_DIR":    "/run/systemd/system",
	"ETC_DIR":        "/etc",
	"ETC_KUBERNETES": "/etc/kubernetes",
	"ETCD_DATA_DIR":  "/var/lib/etcd",
}

func generateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

func (h *Host) makeHostKey() error {
	_, priv, err := generateKey()
	if err != nil {
		return fmt.Errorf("generate host key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(priv, "root@"+h.Name)
	if err != nil {
		return err
	}
	keyPath := h.Path("/etc/ssh/ssh_host_ed25519_key")
	if err := os.MkdirAll(filepath.Dir(keyPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(block), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyPath+".pub", ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o644); err != nil {
		return err
	}
	h.hostKey, h.origKey = signer, signer
	return nil
}

// bootOnce plays one boot attempt: GRUB's choice and the kernel's start.
func (h *Host) bootOnce(at time.Time) (BootRecord, error) {
	bootID := newUUID()
	out, err := machine.Boot(h.m, at, bootID)
	if err != nil {
		return BootRecord{}, err
	}
	if out.Result == machine.BootUp {
		if err := h.afterBoot(); err != nil {
			return BootRecord{}, err
		}
	}
	rec := BootRecord{At: time.Now(), Entry: out.Decision.Path, Kernel: out.Kernel, Result: out.Result,
		FromNext: out.Decision.FromNextEntry, Fallback: out.Decision.Fallback, Reason: out.Reason, PanicTimeout: out.PanicTimeout}
	if out.Result == machine.BootUp {
		rec.BootID = bootID
	}
	h.mu.Lock()
	h.history = append(h.history, rec)
	h.mu.Unlock()
	h.fleet.log.Info("lab host boot", "node", h.Name, "entry", rec.Entry, "kernel", rec.Kernel, "result", rec.Result, "reason", rec.Reason, "next_entry", rec.FromNext)
	return rec, nil
}

// afterBoot recreates what systemd and the drivers create at boot.
func (h *Host) afterBoot() error {
	if err := os.MkdirAll(h.Path("/run/systemd/system"), 0o755); err != nil {
		return err
	}
	st, err := h.m.View()
	if err != nil {
		return err
	}
	nvs := h.Path("/proc/driver/nvidia-nvswitch/devices")
	os.RemoveAll(nvs)
	if st.DriverLoaded {
		if err := os.MkdirAll(nvs, 0o755); err != nil {
			return err
		}
		for _, bus := range []string{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"} {
			if err := os.WriteFile(filepath.Join(nvs, bus), []byte("Fabric State: Configured\n"), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func newUUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Reboot reboots the host the way `reboot` on it does (a clean shutdown,
// then GRUB's choice). It returns once the reboot has started; use
// WaitPower to wait for the outcome.
func (h *Host) Reboot() { h.requestPower("reboot") }

// PowerCycle resets the host (IPMI power cycle): it goes down at once and
// boots again, whatever state it was in (a hung host included).
func (h *Host) PowerCycle() { h.requestPower("cycle") }

// PowerOff powers the host off; PowerCycle brings it back.
func (h *Host) PowerOff() { h.requestPower("poweroff") }

func (h *Host) requestPower(kind string) {
	f := h.fleet
	if f.isClosed() {
		return
	}
	h.mu.Lock()
	h.seq++
	seq := h.seq
	graceful := kind != "cycle" && h.power == PowerUp
	if graceful {
		h.setPowerLocked(PowerShuttingDown)
	}
	h.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if graceful && !f.sleep(f.opts.ShutdownDelay) {
			return
		}
		if !h.current(seq) {
			return
		}
		h.takeDown()
		if kind == "poweroff" {
			h.setPower(seq, PowerOff)
			return
		}
		h.bootLoop(seq)
	}()
}

func (h *Host) current(seq int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq == seq
}

func (h *Host) setPower(seq int, p Power) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seq != seq {
		return false
	}
	h.setPowerLocked(p)
	return true
}

// bootLoop boots until the host is up, hangs, or a newer power request
// takes over: a panic with a panic timeout reboots (GRUB chooses again,
// now without the consumed one-shot entry).
func (h *Host) bootLoop(seq int) {
	f := h.fleet
	for {
		if !h.setPower(seq, PowerBooting) || !f.sleep(f.opts.RebootDowntime) || !h.current(seq) {
			return
		}
		rec, err := h.bootOnce(time.Now())
		if err != nil {
			f.log.Error("lab host boot failed", "node", h.Name, "err", err)
			h.setPower(seq, PowerHung)
			return
		}
		switch rec.Result {
		case machine.BootUp:
			if err := h.listen(); err != nil {
				f.log.Error("lab host cannot listen again", "node", h.Name, "err", err)
				h.setPower(seq, PowerHung)
				return
			}
			h.setPower(seq, PowerUp)
			return
		case machine.BootPanic:
			h.setPower(seq, PowerPanicked)
			if rec.PanicTimeout == 0 {
				return
			}
			if !f.sleep(f.opts.PanicDelay) || !h.current(seq) {
				return
			}
		default:
			h.setPower(seq, PowerHung)
			return
		}
	}
}

// takeDown is what the host's shutdown (or a reset) does to the outside:
// the SSH listener closes, connections drop, every process on the host is
// killed.
func (h *Host) takeDown() {
	h.mu.Lock()
	l := h.listener
	h.listener = nil
	conns := make([]*ssh.ServerConn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	sessions := make([]*session, 0, len(h.sessions))
	for s := range h.sessions {
		sessions = append(sessions, s)
	}
	h.mu.Unlock()
	if l != nil {
		l.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	for _, s := range sessions {
		s.kill(syscall.SIGKILL)
	}
	h.killHostProcesses()
}

// DropConnections cuts every SSH connection to the host (the processes of
// the cut sessions get SIGHUP, as when sshd loses its client); the
// listener stays up.
func (h *Host) DropConnections() {
	h.mu.Lock()
	conns := make([]*ssh.ServerConn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.drops = append(h.drops, time.Now())
	h.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	h.fleet.log.Info("lab host dropped ssh connections", "node", h.Name, "count", len(conns))
}

// Drops returns when DropConnections cut the host's connections (the
// ssh-drop-mid-install fault included).
func (h *Host) Drops() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.drops)
}

// killHostProcesses ends every process whose environment names this host
// (sessions' children, detached units, setsid'd jobs): a reboot ends them.
func (h *Host) killHostProcesses() {
	marker := []byte(emul.EnvHostDir + "=" + h.m.Dir + "\x00")
	self := os.Getpid()
	for round := 0; round < 3; round++ {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := false
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil || !bytes.Contains(append(env, 0), marker) {
				continue
			}
			found = true
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if !found {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shutdown stops the host for good (fleet Close).
func (h *Host) shutdown() {
	if err := h.releaseDpkgLock(); err != nil {
		h.fleet.log.Warn("release the dpkg lock holder", "node", h.Name, "err", err)
	}
	h.mu.Lock()
	h.seq++
	h.mu.Unlock()
	if h.m != nil {
		h.takeDown()
	} else if h.listener != nil {
		h.listener.Close()
	}
}
