// Package vm is the lab's real host: a Debian 12 virtual machine under QEMU
// (TCG) with one disk that boots under BIOS (SeaBIOS) and UEFI (OVMF), real
// GRUB for both, two real Debian kernels, systemd as PID 1, apt with a local
// repository holding the upgrade, and sshd reached on 127.0.0.1 through
// QEMU's user-mode hostfwd. The image is built once into
// the cache by scripts/build-vm-image.sh; every VM boots a qcow2 overlay of
// it, so the base image never changes.
//
// It owns the image and the QEMU process; it knows nothing of mcp-patch's
// steps. Production packages never import it.
package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Environment variables that steer FindImage.
const (
	// EnvImageDir names a directory that already holds a built image; no
	// build is run.
	EnvImageDir = "MCP_PATCH_VM_IMAGE"
	// EnvRepo names the repository root holding scripts/build-vm-image.sh,
	// for callers whose working directory is outside the repository.
	EnvRepo = "MCP_PATCH_REPO"
)

const buildScript = "scripts/build-vm-image.sh"

// buildTimeout bounds an image build from nothing on a slow, shared machine
// (debootstrap, two kernels, a first boot under TCG).
const buildTimeout = 45 * time.Minute

// Image is a built VM image directory.
type Image struct {
	// Dir is the image directory in the cache.
	Dir string
	// Disk is the base qcow2 image (never written: VMs boot overlays).
	Disk string
	// KeyFile is the lab's private key, authorized for root in the image.
	KeyFile string
	// HostKey is the image's sshd host key (authorized_keys format).
	HostKey string
	// OldKernel is the release installed and running after the first boot
	// (e.g. 6.1.0-50-amd64); NewKernel the one the local repository offers.
	OldKernel, NewKernel string
	// OldKernelVersion and NewKernelVersion are their linux-image-amd64
	// package versions.
	OldKernelVersion, NewKernelVersion string
	// RootUUID is the root filesystem's UUID (GRUB's entry ids carry it).
	RootUUID string
	// BuildSeconds is how long the image build took.
	BuildSeconds string
	// OVMFCode is the UEFI firmware the image was first booted with, and
	// OVMFVars the UEFI variables it left (GRUB's boot entry); UEFI VMs
	// boot a copy of them.
	OVMFCode, OVMFVars string
}

// LoadImage reads a built image directory (image.env and the key files).
func LoadImage(dir string) (Image, error) {
	img := Image{Dir: dir, Disk: filepath.Join(dir, "disk.qcow2"), KeyFile: filepath.Join(dir, "id_ed25519")}
	env, err := os.ReadFile(filepath.Join(dir, "image.env"))
	if err != nil {
		return Image{}, fmt.Errorf("load VM image %s: %w", dir, err)
	}
	vals := parseEnvFile(string(env))
	img.OldKernel, img.NewKernel = vals["OLD_KERNEL"], vals["NEW_KERNEL"]
	img.OldKernelVersion, img.NewKernelVersion = vals["OLD_KERNEL_VERSION"], vals["NEW_KERNEL_VERSION"]
	img.RootUUID, img.BuildSeconds = vals["ROOT_UUID"], vals["SECONDS"]
	if img.OldKernel == "" || img.NewKernel == "" || img.RootUUID == "" {
		return Image{}, fmt.Errorf("load VM image %s: image.env lacks OLD_KERNEL, NEW_KERNEL or ROOT_UUID", dir)
	}
	if code := vals["OVMF_CODE"]; code != "" {
		img.OVMFCode, img.OVMFVars = code, filepath.Join(dir, "OVMF_VARS.fd")
	}
	hk, err := os.ReadFile(filepath.Join(dir, "ssh_host_ed25519_key.pub"))
	if err != nil {
		return Image{}, fmt.Errorf("load VM image %s: %w", dir, err)
	}
	f := strings.Fields(string(hk))
	if len(f) < 2 {
		return Image{}, fmt.Errorf("load VM image %s: host key file is not 'type base64 [comment]'", dir)
	}
	img.HostKey = f[0] + " " + f[1]
	paths := []string{img.Disk, img.KeyFile}
	if img.OVMFCode != "" {
		paths = append(paths, img.OVMFCode, img.OVMFVars)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return Image{}, fmt.Errorf("load VM image %s: %w", dir, err)
		}
	}
	return img, nil
}

// parseEnvFile reads KEY=value lines; anything else is ignored.
func parseEnvFile(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && k != "" && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// FindImage returns the image, building it when the cache lacks it (root
// and minutes on first use; the build script holds a lock so parallel
// callers wait for one build). $MCP_PATCH_VM_IMAGE short-circuits the
// search. The build's progress lines go to logger.
func FindImage(ctx context.Context, logger *slog.Logger) (Image, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if dir := os.Getenv(EnvImageDir); dir != "" {
		return LoadImage(dir)
	}
	repo, err := findRepo()
	if err != nil {
		return Image{}, err
	}
	dir, err := runBuildScript(ctx, logger, repo)
	if err != nil {
		return Image{}, err
	}
	return LoadImage(dir)
}

func findRepo() (string, error) {
	if repo := os.Getenv(EnvRepo); repo != "" {
		if _, err := os.Stat(filepath.Join(repo, buildScript)); err != nil {
			return "", fmt.Errorf("find VM image build script via $%s: %w", EnvRepo, err)
		}
		return repo, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find VM image build script: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find VM image build script: no %s above %s; set $%s or $%s", buildScript, wd, EnvRepo, EnvImageDir)
		}
	}
}

// runBuildScript runs the build script and returns the directory it prints
// last; its stderr lines are logged as they come.
func runBuildScript(ctx context.Context, logger *slog.Logger, repo string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", filepath.Join(repo, buildScript))
	cmd.Dir = repo
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", fmt.Errorf("build VM image: %w", err)
	}
	// The script's whole process group goes on cancel (debootstrap, qemu).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("build VM image: %w", err)
	}
	var last []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		logger.Info("build VM image", "progress", line)
		last = append(last, line)
		if len(last) > 40 {
			last = last[1:]
		}
	}
	_, _ = io.Copy(io.Discard, stderr) // a line longer than the scanner's buffer: keep the pipe drained
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("build VM image: %w\n%s", err, strings.Join(last, "\n"))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" {
		return "", errors.New("build VM image: the script printed no directory")
	}
	return dir, nil
}
