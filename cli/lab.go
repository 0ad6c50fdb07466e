package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// The production binary links no lab code: `mcp-patch lab ...` runs the
// lab's own binary, mcp-patch-lab (cmd/mcp-patch-lab: this CLI with the
// real `lab` command and the lab hosts' emulated commands), with the same
// arguments.
const (
	// EnvLabBinary names the lab's binary; unset, it is mcp-patch-lab
	// beside this executable, else on PATH.
	EnvLabBinary  = "MCP_PATCH_LAB_BINARY"
	labBinaryName = "mcp-patch-lab"
)

// labEnv are the variables of this CLI's environment the lab's binary reads
// as this one would, passed on as this process sees them.
var labEnv = []string{"MCP_PATCH_LAB_DIR", "MCP_PATCH_CONFIG", "MCP_PATCH_INTENT_REPO", "MCP_PATCH_ENVIRONMENT", "MCP_PATCH_STATE_DIR", "MCP_PATCH_ALLOWED_SIGNERS", "MCP_PATCH_LAB_HOST"}

func (a *app) labCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "lab COMMAND",
		Short: "The embedded lab: an emulated GPU fleet on a real control plane",
		Long: `The embedded lab: control-plane and GPU hosts emulated behind real SSH servers
on 127.0.0.1, a real kube-apiserver, controller-manager, scheduler and kwok on
a real 3-member etcd. "lab demo" runs a whole round on it; "lab up" keeps one
running for Claude Code; "lab fault" injects a fault into a running lab.

The lab is its own binary, mcp-patch-lab (this CLI links no lab code): mcp-patch
lab runs it with the same arguments, from $MCP_PATCH_LAB_BINARY, beside this
executable or on PATH. Build it with
  go build -o DIR/mcp-patch-lab ./cmd/mcp-patch-lab     (in a checkout)
  go install github.com/mcp-patch/mcp-patch/cmd/mcp-patch-lab@VERSION`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			bin, err := findLabBinary(a.stdio.Getenv, os.Executable, os.Stat)
			if err != nil {
				return err
			}
			return exit(a.runLab(cmd, bin, args))
		},
	}
}

// runLab runs the lab's binary as `lab ARGS` on this process's stdio and
// says its exit code; a stop of this process interrupts it (lab up and
// demo stop their lab on an interrupt).
func (a *app) runLab(cmd *cobra.Command, bin string, args []string) int {
	c := exec.CommandContext(cmd.Context(), bin, append([]string{"lab"}, args...)...)
	c.Stdin, c.Stdout, c.Stderr = a.stdio.Stdin, a.stdio.Stdout, a.stdio.Stderr
	c.Env = os.Environ()
	for _, k := range labEnv {
		if v := a.stdio.Getenv(k); v != "" {
			c.Env = append(c.Env, k+"="+v)
		}
	}
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGINT) }
	c.WaitDelay = time.Minute
	err := c.Run()
	// Interrupted, Run says the context's error however the lab's binary
	// ended: its own exit says how the lab stopped.
	if c.ProcessState != nil && c.ProcessState.Exited() {
		return c.ProcessState.ExitCode()
	}
	if err == nil {
		err = errors.New("ended without an exit status")
	}
	fmt.Fprintf(a.stdio.Stderr, "mcp-patch lab: %s: %v\n", bin, err)
	return ExitNotOK
}

// findLabBinary is the lab's binary: $MCP_PATCH_LAB_BINARY when set (it
// must exist), else mcp-patch-lab beside this executable, else on PATH;
// none is an error that says how to build it.
func findLabBinary(getenv func(string) string, executable func() (string, error), stat func(string) (os.FileInfo, error)) (string, error) {
	runnable := func(p string) bool {
		fi, err := stat(p)
		return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
	}
	if p := getenv(EnvLabBinary); p != "" {
		if !runnable(p) {
			return "", fmt.Errorf("$%s is %s, which is not an executable file", EnvLabBinary, p)
		}
		return p, nil
	}
	var tried []string
	if self, err := executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), labBinaryName)
		if runnable(p) {
			return p, nil
		}
		tried = append(tried, filepath.Dir(self))
	}
	for _, dir := range filepath.SplitList(getenv("PATH")) {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, labBinaryName); runnable(p) {
			return p, nil
		}
	}
	tried = append(tried, "PATH")
	return "", fmt.Errorf("the lab is its own binary, %s, and it is in none of %v ($%s unset): build it beside mcp-patch with `go build -o %s ./cmd/mcp-patch-lab` in a checkout of mcp-patch, or install it with `go install github.com/mcp-patch/mcp-patch/cmd/mcp-patch-lab@VERSION`",
		labBinaryName, tried, EnvLabBinary, filepath.Join(firstOr(tried, "DIR"), labBinaryName))
}

func firstOr(s []string, def string) string {
	if len(s) == 0 || s[0] == "PATH" {
		return def
	}
	return s[0]
}
