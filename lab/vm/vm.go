package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Firmware is what the VM boots the disk with.
type Firmware string

const (
	// BIOS is SeaBIOS, QEMU's default: GRUB's i386-pc core image in the
	// disk's BIOS boot partition.
	BIOS Firmware = "bios"
	// UEFI is OVMF with the image's UEFI variables (GRUB's boot entry):
	// GRUB's x86_64-efi image on the EFI system partition.
	UEFI Firmware = "uefi"
)

// Options configure Boot. Zero values take the defaults named per field.
type Options struct {
	// Firmware is BIOS or UEFI. "" means BIOS.
	Firmware Firmware
	// Dir receives the overlay disk, the serial log and known_hosts.
	// Required; it should be a fresh directory (a test's TempDir).
	Dir string
	// Name is the VM's node name in known_hosts and logs. "" means "canary".
	Name string
	// MemoryMB is the guest's memory. 0 means 768 (a VM takes 560-770 MB
	// RSS with it and tb-size=256 after a few reboots).
	MemoryMB int
	// Port is the loopback port forwarded to the guest's sshd. 0 picks a
	// free one.
	Port int
	// QEMU is the emulator binary. "" means qemu-system-x86_64 on PATH.
	QEMU string
	// Logger receives start/stop events. nil means none.
	Logger *slog.Logger
}

// VM is one running QEMU process booting an overlay of an Image.
type VM struct {
	Image Image
	Name  string
	// Port is the 127.0.0.1 port forwarded to the guest's port 22.
	Port int
	// Overlay is the qcow2 overlay the guest writes to.
	Overlay string
	// SerialLog is the file the guest's ttyS0 is written to (all boots).
	SerialLog string
	// KnownHosts is a known_hosts file naming the guest's host key at
	// [127.0.0.1]:Port.
	KnownHosts string

	log    *slog.Logger
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	err    error // qemu's exit, once exited is closed
	stderr bytes.Buffer
}

// Boot creates an overlay of img in opts.Dir and starts QEMU on it (TCG; no
// KVM is assumed). It returns once QEMU runs; WaitSSH waits for the guest.
// The caller must call Stop.
func Boot(ctx context.Context, img Image, opts Options) (*VM, error) {
	if opts.Dir == "" {
		return nil, errors.New("boot VM: Options.Dir is required")
	}
	if opts.Name == "" {
		opts.Name = "canary"
	}
	if opts.Firmware == "" {
		opts.Firmware = BIOS
	}
	if opts.MemoryMB == 0 {
		opts.MemoryMB = 768
	}
	if opts.QEMU == "" {
		opts.QEMU = "qemu-system-x86_64"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Port == 0 {
		p, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("boot VM %s: %w", opts.Name, err)
		}
		opts.Port = p
	}
	v := &VM{Image: img, Name: opts.Name, Port: opts.Port, log: opts.Logger, exited: make(chan struct{}),
		Overlay:    filepath.Join(opts.Dir, opts.Name+".qcow2"),
		SerialLog:  filepath.Join(opts.Dir, opts.Name+".serial.log"),
		KnownHosts: filepath.Join(opts.Dir, opts.Name+".known_hosts"),
	}
	var firmware []string
	switch opts.Firmware {
	case BIOS:
	case UEFI:
		if img.OVMFCode == "" {
			return nil, fmt.Errorf("boot VM %s under UEFI: image %s has no UEFI variables (built by an older build-vm-image.sh)", v.Name, img.Dir)
		}
		vars := filepath.Join(opts.Dir, opts.Name+".OVMF_VARS.fd")
		if err := copyFile(img.OVMFVars, vars); err != nil {
			return nil, fmt.Errorf("boot VM %s under UEFI: %w", v.Name, err)
		}
		firmware = []string{
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + img.OVMFCode,
			"-drive", "if=pflash,format=raw,unit=1,file=" + vars,
		}
	default:
		return nil, fmt.Errorf("boot VM %s: firmware %q is neither %q nor %q", v.Name, opts.Firmware, BIOS, UEFI)
	}
	kh := fmt.Sprintf("[127.0.0.1]:%d %s\n", v.Port, img.HostKey)
	if err := os.WriteFile(v.KnownHosts, []byte(kh), 0o600); err != nil {
		return nil, fmt.Errorf("boot VM %s: %w", v.Name, err)
	}
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", img.Disk, v.Overlay).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("boot VM %s: qemu-img create overlay: %w: %s", v.Name, err, bytes.TrimSpace(out))
	}
	args := []string{
		"-name", v.Name,
		"-m", strconv.Itoa(opts.MemoryMB),
		"-accel", "tcg,tb-size=256",
		"-smp", "1",
		"-display", "none",
		"-monitor", "none",
		"-serial", "file:" + v.SerialLog,
		"-drive", "file=" + v.Overlay + ",format=qcow2,if=virtio,cache=unsafe",
		// restrict=on: no way out of the guest but the forwarded port.
		"-netdev", fmt.Sprintf("user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:%d-:22", v.Port),
		"-device", "virtio-net-pci,netdev=n0",
	}
	args = append(args, firmware...)
	// Not CommandContext: the VM outlives the boot call's context; Stop ends it.
	v.cmd = exec.Command(opts.QEMU, args...)
	v.cmd.Stdout = io.Discard
	v.cmd.Stderr = &v.stderr
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("boot VM %s: start %s: %w", v.Name, opts.QEMU, err)
	}
	v.log.Info("VM started", "node", v.Name, "firmware", opts.Firmware, "pid", v.cmd.Process.Pid, "port", v.Port, "serial", v.SerialLog)
	go func() {
		err := v.cmd.Wait()
		v.mu.Lock()
		v.err = err
		v.mu.Unlock()
		close(v.exited)
	}()
	return v, nil
}

// PID is the QEMU process id.
func (v *VM) PID() int { return v.cmd.Process.Pid }

// Exited is closed when QEMU has exited.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// Stop ends QEMU (SIGTERM, then SIGKILL after 10s) and waits for it.
func (v *VM) Stop() error {
	select {
	case <-v.exited:
		return nil
	default:
	}
	if err := v.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop VM %s: %w", v.Name, err)
	}
	select {
	case <-v.exited:
	case <-time.After(10 * time.Second):
		if err := v.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("stop VM %s: %w", v.Name, err)
		}
		<-v.exited
	}
	v.log.Info("VM stopped", "node", v.Name)
	return nil
}

// SerialTail returns the last n lines of the serial log (every boot).
func (v *VM) SerialTail(n int) string {
	b, err := os.ReadFile(v.SerialLog)
	if err != nil {
		return fmt.Sprintf("(serial log unreadable: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(string(b), "\r", ""), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Serial returns the whole serial log so far.
func (v *VM) Serial() (string, error) {
	b, err := os.ReadFile(v.SerialLog)
	return strings.ReplaceAll(string(b), "\r", ""), err
}

// exitError describes QEMU's exit with its stderr and the serial tail.
func (v *VM) exitError() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return fmt.Errorf("VM %s: qemu exited (%v): %s\nserial log tail:\n%s", v.Name, v.err, strings.TrimSpace(v.stderr.String()), v.SerialTail(40))
}

// WaitSSH waits until the guest's sshd sends its banner on the forwarded
// port (hostfwd accepts the TCP connection even while the guest is down, so
// only the banner counts), QEMU exits, or ctx ends. A failure carries the
// serial log's tail.
func (v *VM) WaitSSH(ctx context.Context) error {
	return v.WaitFor(ctx, "sshd to answer", func(ctx context.Context) error { return v.probeSSH(ctx) })
}

// permanent marks a probe's error that no later call can cure.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps a probe's error so that WaitFor stops at once with it
// (what is waited for can no longer happen).
func Permanent(err error) error { return permanent{err} }

// WaitFor polls probe (each call bounded by 20s) until it returns nil, an
// error wrapped by Permanent, QEMU exits or ctx ends; what is waited for
// names the failure, which carries the probe's last error and the serial
// log's tail.
func (v *VM) WaitFor(ctx context.Context, what string, probe func(context.Context) error) error {
	delay := 500 * time.Millisecond
	var last error
	for {
		select {
		case <-v.exited:
			return fmt.Errorf("waiting for %s: %w", what, v.exitError())
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		last = probe(pctx)
		cancel()
		if last == nil {
			return nil
		}
		if p := (permanent{}); errors.As(last, &p) {
			return fmt.Errorf("VM %s: waiting for %s: %w\nserial log tail:\n%s", v.Name, what, p.err, v.SerialTail(40))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("VM %s: waiting for %s: %w (last: %v)\nserial log tail:\n%s", v.Name, what, ctx.Err(), last, v.SerialTail(40))
		case <-v.exited:
			return fmt.Errorf("waiting for %s: %w", what, v.exitError())
		case <-time.After(delay):
		}
		if delay < 3*time.Second {
			delay += 500 * time.Millisecond
		}
	}
}

func (v *VM) probeSSH(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(v.Port)))
	if err != nil {
		return err
	}
	defer c.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(c, buf, 8)
	if err != nil {
		return fmt.Errorf("no SSH banner: %w", err)
	}
	if !bytes.HasPrefix(buf[:n], []byte("SSH-2.0")) {
		return fmt.Errorf("not an SSH banner: %q", buf[:n])
	}
	return nil
}

// copyFile copies src to dst (created 0600): a VM's own UEFI variables.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	return port, nil
}
