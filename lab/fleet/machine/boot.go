package machine

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BootResult is how a boot attempt ended.
type BootResult string

const (
	BootUp    BootResult = "up"
	BootPanic BootResult = "panic"
	BootHang  BootResult = "hang"
)

// BootOutcome describes one boot attempt.
type BootOutcome struct {
	Result   BootResult
	Decision BootDecision
	Kernel   string
	// PanicTimeout is the kernel's panic timeout in seconds (from panic=N
	// on the command line, else kernel.panic in /etc/sysctl.d); after a
	// panic the host reboots when it is not 0 and hangs when it is.
	PanicTimeout int
	Reason       string
}

func defaultSysctl() map[string]string {
	return map[string]string{
		"kernel.panic":                "0",
		"kernel.panic_on_oops":        "0",
		"vm.swappiness":               "60",
		"net.ipv4.ip_forward":         "0",
		"fs.inotify.max_user_watches": "8192",
	}
}

// PersistentSysctl reads /etc/sysctl.conf and /etc/sysctl.d/*.conf (in
// file-name order, later wins) as systemd-sysctl applies them at boot.
func PersistentSysctl(h *Host) map[string]string {
	out := map[string]string{}
	files := []string{h.Path("/etc/sysctl.conf")}
	d, _ := filepath.Glob(h.Path("/etc/sysctl.d/*.conf"))
	slices.SortFunc(d, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	files = append(files, d...)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || line[0] == '#' || line[0] == ';' {
				continue
			}
			line = strings.TrimPrefix(line, "-")
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			out[strings.ReplaceAll(strings.TrimSpace(k), "/", ".")] = strings.TrimSpace(v)
		}
		fh.Close()
	}
	return out
}

func cmdlineInt(args, name string) (int, bool) {
	for _, f := range strings.Fields(args) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			n, err := strconv.Atoi(v)
			if err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

// Boot runs GRUB's choice and the kernel's start on the host, updating the
// state: a one-shot next_entry is consumed (unless /boot is on md RAID,
// where GRUB cannot write its environment block), and on a successful boot
// the running kernel, boot_id, boot time, command line, sysctls, NVIDIA
// driver, GPUs and services are set as they come up. A panic or hang
// leaves the running state untouched (the host is down).
func Boot(h *Host, now time.Time, bootID string) (BootOutcome, error) {
	var out BootOutcome
	err := h.Update(func(s *State) error {
		cfgData, err := os.ReadFile(h.Path("/boot/grub/grub.cfg"))
		if err != nil {
			out.Result, out.Reason = BootHang, "grub rescue: /boot/grub/grub.cfg unreadable"
			return nil
		}
		menu, err := ParseGrubCfg(cfgData)
		if err != nil {
			out.Result, out.Reason = BootHang, "grub: "+err.Error()
			return nil
		}
		envPath := h.Path("/boot/grub/grubenv")
		env, err := ReadGrubEnv(envPath)
		if err != nil {
			env = &GrubEnv{}
		}
		d, err := ChooseBoot(menu, env)
		if err != nil {
			out.Result, out.Reason = BootHang, "grub: "+err.Error()
			return nil
		}
		out.Decision = d
		if d.FromNextEntry && !s.Faults.BootOnMDRaid {
			env.Set("next_entry", "")
			if err := WriteGrubEnv(envPath, env); err != nil {
				return fmt.Errorf("grub save_env: %w", err)
			}
		}
		release, image := d.Entry.Kernel()
		out.Kernel = release
		imagePath := image
		if s.Faults.BootOnMDRaid && !strings.HasPrefix(image, "/boot/") {
			imagePath = "/boot" + image
		}
		if release == "" {
			out.Result, out.Reason = BootHang, fmt.Sprintf("grub: entry %q has no linux line", d.Entry.Title)
			return nil
		}
		if _, err := os.Stat(h.Path(imagePath)); err != nil {
			out.Result, out.Reason = BootHang, fmt.Sprintf("error: file `%s' not found.", image)
			return nil
		}
		args := d.Entry.Args()
		persistent := PersistentSysctl(h)
		if n, ok := cmdlineInt(args, "panic"); ok {
			out.PanicTimeout = n
		} else if v, ok := persistent["kernel.panic"]; ok {
			out.PanicTimeout, _ = strconv.Atoi(v)
		}
		if s.Faults.HangOnBoot {
			out.Result, out.Reason = BootHang, "hang on boot (fault): no login prompt, no sshd"
			return nil
		}
		if slices.Contains(s.Faults.PanicKernels, release) {
			out.Result = BootPanic
			out.Reason = "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0) (fault)"
			return nil
		}
		out.Result = BootUp
		abi := strings.TrimSuffix(release, "-generic")
		s.Kernel = release
		s.KernelBuild = kernelBuild(abi)
		s.BootID = bootID
		s.BootTime = now
		s.BootEntry = d.Path
		s.Boots++
		s.Cmdline = "BOOT_IMAGE=" + image + " " + args
		s.Sysctl = defaultSysctl()
		if n, ok := cmdlineInt(args, "panic"); ok {
			s.Sysctl["kernel.panic"] = strconv.Itoa(n)
		}
		for k, v := range persistent {
			s.Sysctl[k] = v
		}
		if drillFires(h, release, now) {
			// The fallback drill's unit runs after systemd-sysctl and
			// crashes the kernel through sysrq (fallback_drill.sh).
			out.Result = BootPanic
			out.Reason = "sysrq: Trigger a crash; Kernel panic - not syncing: sysrq triggered crash (mcp-patch fallback drill)"
			return nil
		}
		_, statErr := os.Stat(h.Path("/lib/modules/" + release + "/" + nvidiaModuleDir + "/nvidia.ko"))
		s.DriverLoaded = s.Role == RoleGPU && statErr == nil
		s.GPUsVisible = 0
		if s.DriverLoaded {
			s.GPUsVisible = max(0, len(s.GPUs)-s.Faults.GPUsMissing)
		}
		for name, svc := range s.Services {
			if svc.Transient {
				delete(s.Services, name)
				continue
			}
			if svc.UnitFileState == "enabled" {
				svc.ActiveState, svc.SubState, svc.Result, svc.ExecMainStatus = "active", "running", "success", 0
				svc.Started = now
			}
		}
		if s.Role == RoleGPU {
			SetGPUServices(s, now)
		}
		if err := clearRun(h); err != nil {
			return err
		}
		return WriteRuntimeFiles(h, s, now)
	})
	return out, err
}

// SetGPUServices sets Fabric Manager and the persistence daemon from the
// driver state and the faults: Fabric Manager fails to start without the
// driver or when the fault holds it down.
func SetGPUServices(s *State, now time.Time) {
	for _, name := range []string{"nvidia-fabricmanager.service", "nvidia-persistenced.service"} {
		svc := s.Services[name]
		if svc == nil {
			continue
		}
		up := s.DriverLoaded
		if name == "nvidia-fabricmanager.service" && s.Faults.FabricManagerDown {
			up = false
		}
		if up {
			svc.ActiveState, svc.SubState, svc.Result, svc.ExecMainStatus, svc.ExecMainCode = "active", "running", "success", 0, ""
			svc.Started = now
		} else {
			svc.ActiveState, svc.SubState, svc.Result, svc.ExecMainStatus, svc.ExecMainCode = "failed", "failed", "exit-code", 1, "exited"
			svc.MainPID = 0
		}
	}
}

// clearRun empties /run, a tmpfs on a real host.
func clearRun(h *Host) error {
	entries, err := os.ReadDir(h.Path("/run"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return os.MkdirAll(h.Path("/run"), 0o755)
		}
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(h.Path("/run"), e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// drillFires plays the fallback drill's one-shot unit: enabled, armed for
// this kernel → it removes the armed file, notes that it fired, and the
// kernel crashes.
func drillFires(h *Host, release string, now time.Time) bool {
	armed := h.Path("/var/lib/mcp-patch/fallback-drill.armed")
	if _, err := os.Lstat(h.Path("/etc/systemd/system/multi-user.target.wants/mcp-patch-fallback-drill.service")); err != nil {
		return false
	}
	b, err := os.ReadFile(armed)
	if err != nil || strings.TrimSpace(string(b)) != release {
		return false
	}
	_ = os.Remove(armed)
	_ = os.WriteFile(h.Path("/var/lib/mcp-patch/fallback-drill.fired"), []byte(now.UTC().Format(time.RFC3339)+"\n"), 0o644)
	return true
}
