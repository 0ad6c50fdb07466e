package emul

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

func init() {
	register(func(c *ctx) int { return updateGrub(c, c.stderr) }, "update-grub", "update-grub2")
	register(grubMkconfig, "grub-mkconfig")
	register(grubReboot, "grub-reboot")
	register(grubEditenv, "grub-editenv")
}

// Where the real GRUB tools are (Debian's grub2-common). The lab runs them
// on the host's boot directory; they must not see any other.
var (
	realGrubReboot  = "/usr/sbin/grub-reboot"
	realGrubEditenv = "/usr/bin/grub-editenv"
)

// updateGrub regenerates grub.cfg as update-grub does and prints
// grub-mkconfig's messages to w.
func updateGrub(c *ctx, w io.Writer) int {
	var res machine.UpdateGrubResult
	err := c.host.Update(func(s *machine.State) error {
		var err error
		res, err = machine.UpdateGrub(c.host, s, pathEnv())
		return err
	})
	if err != nil {
		fmt.Fprintf(w, "/usr/sbin/grub-mkconfig: %v\n", err)
		return 1
	}
	for _, f := range res.Settings.Sourced {
		fmt.Fprintf(w, "Sourcing file `%s'\n", f)
	}
	fmt.Fprintf(w, "Generating grub configuration file ...\n")
	for _, k := range res.Kernels {
		fmt.Fprintf(w, "Found linux image: /boot/vmlinuz-%s\nFound initrd image: /boot/initrd.img-%s\n", k, k)
	}
	fmt.Fprintf(w, "Warning: os-prober will not be executed to detect other bootable partitions.\nSystems on them will not be added to the GRUB boot configuration.\nCheck GRUB_DISABLE_OS_PROBER documentation entry.\n")
	fmt.Fprintf(w, "Adding boot menu entry for UEFI Firmware Settings ...\ndone\n")
	return 0
}

func grubMkconfig(c *ctx) int {
	f, err := parseFlags(c.args, []string{"-o", "--output"}, false)
	if err != nil {
		c.errf("grub-mkconfig: %v\n", err)
		return 1
	}
	out, ok := f.get("-o", "--output")
	if !ok {
		c.errf("grub-mkconfig: writing the configuration to stdout is not emulated; use -o /boot/grub/grub.cfg\n")
		return 1
	}
	if c.logicalPath(c.hostPath(out)) != "/boot/grub/grub.cfg" {
		c.errf("grub-mkconfig: the lab only writes /boot/grub/grub.cfg, not %s\n", out)
		return 1
	}
	return updateGrub(c, c.stderr)
}

// grubReboot runs the real grub-reboot on the host's boot directory. It
// adds --boot-directory when the caller gave none, refuses one outside the
// host root, drops grub-probe's complaint about the lab's disk, and prints
// grub-reboot's own warning when /boot is on md RAID (which grub-probe
// cannot see here).
func grubReboot(c *ctx) int {
	args := slices.Clone(c.args)
	bootDir := ""
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--boot-directory="):
			bootDir = strings.TrimPrefix(a, "--boot-directory=")
		case a == "--boot-directory" && i+1 < len(args):
			bootDir = args[i+1]
		case a == "--root-directory" || strings.HasPrefix(a, "--root-directory="):
			c.errf("grub-reboot: --root-directory is not emulated on this lab host\n")
			return 1
		}
	}
	if bootDir == "" {
		bootDir = c.host.Path("/boot")
		args = append([]string{"--boot-directory=" + bootDir}, args...)
	} else if !c.inRoot(bootDir) {
		c.errf("grub-reboot: lab host: refusing --boot-directory=%s outside the emulated host root %s\n", bootDir, c.host.Root())
		return 1
	}
	cmd := exec.Command(realGrubReboot, args...)
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	var stderr bytes.Buffer
	cmd.Stdout = c.stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	for _, line := range strings.SplitAfter(stderr.String(), "\n") {
		if line == "" || strings.Contains(line, "grub-probe: error:") {
			continue
		}
		io.WriteString(c.stderr, line)
	}
	if st, verr := c.host.View(); verr == nil && st.Faults.BootOnMDRaid && err == nil {
		entry := ""
		if n := len(c.args); n > 0 {
			entry = c.args[n-1]
		}
		c.outf("\nWARNING: Detected GRUB environment block on diskfilter device\n%s will remain the default boot entry until manually cleared with:\n    grub-editenv %s/grub/grubenv unset next_entry\n\n", entry, c.logicalPath(bootDir))
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		c.errf("grub-reboot: %v\n", err)
		return 1
	}
	return 0
}

// grubEditenv runs the real grub-editenv on a file inside the host root;
// "-" or no file means the host's /boot/grub/grubenv.
func grubEditenv(c *ctx) int {
	args := slices.Clone(c.args)
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" {
		i++
	}
	cmds := []string{"create", "list", "set", "unset"}
	switch {
	case i >= len(args):
	case args[i] == "-" || slices.Contains(cmds, args[i]) && !fileExists(args[i]):
		if args[i] == "-" {
			args[i] = c.host.Path("/boot/grub/grubenv")
		} else {
			args = slices.Insert(args, i, c.host.Path("/boot/grub/grubenv"))
		}
	default:
		if !c.inRoot(args[i]) {
			c.errf("grub-editenv: lab host: refusing %s outside the emulated host root %s\n", args[i], c.host.Root())
			return 1
		}
	}
	cmd := exec.Command(realGrubEditenv, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		c.errf("grub-editenv: %v\n", err)
		return 1
	}
	return 0
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
