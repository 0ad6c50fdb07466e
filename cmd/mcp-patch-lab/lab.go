package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcp-patch/mcp-patch/cli"
	"github.com/mcp-patch/mcp-patch/lab"
)

func labDir(getenv func(string) string) string {
	if d := getenv("MCP_PATCH_LAB_DIR"); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "mcp-patch", "lab")
}

// labCommand is the lab's `lab`, in place of the production CLI's (which
// runs this binary).
func labCommand(env cli.Env) *cobra.Command {
	c := &cobra.Command{
		Use:   "lab COMMAND",
		Short: "The embedded lab: an emulated GPU fleet on a real control plane",
		Long: `The embedded lab: control-plane and GPU hosts emulated behind real SSH servers
on 127.0.0.1, a real kube-apiserver, controller-manager, scheduler and kwok on
a real 3-member etcd. "lab demo" runs a whole round on it; "lab up" keeps one
running for Claude Code; "lab fault" injects a fault into a running lab.`,
		Args: cli.NoArgs,
		RunE: cli.GroupRun,
	}
	var dir string
	addDir := func(cmd *cobra.Command) {
		cmd.Flags().StringVar(&dir, "dir", labDir(env.Stdio.Getenv), "where the lab keeps its files (env MCP_PATCH_LAB_DIR); up and demo start it afresh")
	}
	var shape lab.Options
	addShape := func(cmd *cobra.Command) {
		cmd.Flags().IntVar(&shape.ControlPlanes, "control-planes", 3, "control-plane hosts")
		cmd.Flags().IntVar(&shape.Canary, "canary", 1, "canary GPU servers")
		cmd.Flags().IntVar(&shape.GPUServers, "gpu-servers", 4, "other GPU servers")
		cmd.Flags().BoolVar(&shape.VMCanary, "vm-canary", false, "the canary GPU server is a real Debian VM under QEMU (real GRUB, kernels, reboots; README, \"real VM\")")
		cmd.Flags().StringVar((*string)(&shape.VMFirmware), "vm-firmware", "uefi", "what the VM canary boots with: uefi or bios")
		cmd.Flags().BoolVar(&shape.OtherActors, "other-actors", true, "the emulated GPU servers take their driver from the GPU Operator's driver container (precompiled images in a real OCI registry); the maintenance operator and kured run beside the round (README, \"other actors\")")
		cmd.Flags().BoolVar(&shape.DriverBuiltAtBoot, "driver-built-at-boot", false, "with --other-actors, the driver container builds the driver at boot from the kernel's headers instead of pulling a precompiled image")
	}
	// options are the lab's options once the flags are parsed; the lab
	// logs only warnings unless --log-level is given (the demo prints each
	// step itself).
	options := func() (lab.Options, *slog.Logger, error) {
		log, err := env.Logger("warn")
		if err != nil {
			return lab.Options{}, nil, err
		}
		say := func(s string) { fmt.Fprintln(env.Stdio.Stderr, "lab: "+s) }
		o := shape
		o.Dir, o.Logger, o.Progress = dir, log, say
		o.Alertmanager = lab.FindAlertmanager(env.Stdio.Getenv)
		return o, log, nil
	}

	var roundID string
	var environments bool
	demo := &cobra.Command{
		Use:   "demo",
		Short: "Start a fresh lab and run a whole patch round on it, a line per step as it ends",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, log, err := options()
			if err != nil {
				return err
			}
			if roundID == "" {
				roundID = time.Now().UTC().Format("2006-01")
			}
			if environments {
				return cli.ExitCode(labDemoEnvironments(cmd.Context(), o, roundID, env.Stdio, log))
			}
			return cli.ExitCode(labDemo(cmd.Context(), o, roundID, env.Stdio, log))
		},
	}
	addDir(demo)
	addShape(demo)
	demo.Flags().StringVar(&roundID, "round", "", "round id (default: this month, YYYY-MM in UTC); with --environments the month, each environment's round named <env>-<month>")
	demo.Flags().BoolVar(&environments, "environments", false, "staging before production: a staging lab (2 control-plane hosts, 1 GPU server, its own control plane) runs its round first, a person certifies its outcome, it soaks on the lab clock, then production (the lab shaped by the other flags) plans from staging's proof and runs its round (docs/lab.md)")

	var httpAddr string
	up := &cobra.Command{
		Use:   "up",
		Short: "Start a fresh lab and keep it running; prints how to connect Claude Code",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, log, err := options()
			if err != nil {
				return err
			}
			return cli.ExitCode(labUp(cmd.Context(), o, httpAddr, env.Stdio, log))
		},
	}
	addDir(up)
	addShape(up)
	up.Flags().StringVar(&httpAddr, "http", "127.0.0.1:8765", "also serve MCP over HTTP here (on the lab clock)")

	var node, arg string
	var clear bool
	fault := &cobra.Command{
		Use:   "fault NAME [--node HOST] [--arg ARG] [--clear]",
		Short: "Inject (or --clear) a fault in the running lab",
		Long:  "Inject (or --clear) one of the lab's faults in the running lab.\n\nFaults: " + strings.Join(lab.FaultNames(), ", "),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cli.Usagef("lab fault takes one fault name (one of %s), got %d arguments", strings.Join(lab.FaultNames(), ", "), len(args))
			}
			return nil
		},
		ValidArgs: lab.FaultNames(),
		RunE: func(_ *cobra.Command, args []string) error {
			return cli.ExitCode(labFault(args[0], dir, node, arg, clear, env.Stdio))
		},
	}
	addDir(fault)
	fault.Flags().StringVar(&node, "node", "", "the host the fault applies to")
	fault.Flags().StringVar(&arg, "arg", "", "the fault's argument")
	fault.Flags().BoolVar(&clear, "clear", false, "clear the fault instead of injecting it")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the running lab",
		Args:  cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return cli.ExitCode(labDown(dir, env.Stdio))
		},
	}
	addDir(down)
	c.AddCommand(demo, up, fault, down, labPreviewCommand(env, options, addDir))
	return c
}

func labDemo(ctx context.Context, opts lab.Options, roundID string, stdio cli.IO, log *slog.Logger) int {
	start := time.Now()
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitUsage
	}
	if err := lab.Fresh(opts.Dir); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	l, err := lab.Up(ctx, opts)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	defer l.Close()
	fmt.Fprintf(stdio.Stdout, "Lab up in %s: %d hosts over SSH, a real control plane, intent repo %s\n",
		time.Since(start).Round(time.Second), l.Hosts(), l.IntentRepo)
	fmt.Fprintf(stdio.Stdout, "Running round %s as an agent would: following each next step, approvals signed with the lab-only key.\n", roundID)
	fmt.Fprintf(stdio.Stdout, "A line per step as it ends (time since the start, node, step, outcome, how long it took); every tool call: %s\n\n", l.CallsLog(roundID))
	res, err := l.RunRound(ctx, roundID, stdio.Stdout, log)
	fmt.Fprintln(stdio.Stdout)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcp-patch lab demo: the round did not finish: %v (every tool call: %s)\n", err, res.CallsLog)
		return cli.ExitNotOK
	}
	if !res.Outcome.Closed {
		fmt.Fprintf(stdio.Stderr, "mcp-patch lab demo: the round stopped at %s on %s: %s (every tool call: %s)\n",
			res.Outcome.Stopped.Step, res.Outcome.Stopped.Node, res.Outcome.Stopped.Reason, res.CallsLog)
		return cli.ExitNotOK
	}
	if err := l.WriteSummary(stdio.Stdout, roundID, res); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	return cli.ExitOK
}

func labUp(ctx context.Context, opts lab.Options, httpAddr string, stdio cli.IO, log *slog.Logger) int {
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab up:", err)
		return cli.ExitUsage
	}
	// A lab starts fresh: state left by an earlier one (etcd data, host
	// roots) would not match the new certificates and keys.
	if _, err := os.Stat(filepath.Join(opts.Dir, "lab.sock")); err == nil {
		if _, err := control(opts.Dir, "ping"); err == nil {
			fmt.Fprintln(stdio.Stderr, "mcp-patch lab up: a lab is already running in", opts.Dir, "(mcp-patch lab down first)")
			return cli.ExitNotOK
		}
	}
	if err := lab.Fresh(opts.Dir); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab up:", err)
		return cli.ExitNotOK
	}
	l, err := lab.Up(ctx, opts)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab up:", err)
		return cli.ExitNotOK
	}
	defer l.Close()
	h, err := cli.ServeHTTP(ctx, l.Config, httpAddr, filepath.Join(l.Dir, "http.token"), l.Clock.Now, stdio.Getenv, log)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab up:", err)
		return cli.ExitNotOK
	}
	defer h.Close()
	ctl, down, err := listenControl(ctx, opts.Dir, l)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab up:", err)
		return cli.ExitNotOK
	}
	defer ctl.Close()
	self, err := os.Executable()
	if err != nil {
		self = "mcp-patch-lab" // the name on PATH: what the lines below ask a person to run
	}
	fmt.Fprintf(stdio.Stdout, `The lab is up (%d hosts). Connect Claude Code:

  stdio:  claude mcp add mcp-patch-lab -- %s serve --config %s
  HTTP:   claude mcp add --transport http mcp-patch-lab %s --header "Authorization: Bearer $(cat %s)"

Sign approvals as the lab's person:   %s approve --key %s request.txt
Inject a fault:                      %s lab fault NAME --node HOST   (names: %s)
Stop it:                             Ctrl-C, or %s lab down
`, l.Hosts(), self, l.ConfigFile, h.URL, h.TokenFile, self, l.ApproverKey, self, strings.Join(lab.FaultNames(), ", "), self)
	if c := l.VMCanary; c != nil {
		fmt.Fprintf(stdio.Stdout, `
The canary %s is a real Debian VM (%s, kernels %s -> %s):
  its shell:           %s
  its serial console:  %s
`, c.Name, strings.ToUpper(string(c.Firmware)), c.VM.Image.OldKernel, c.VM.Image.NewKernel, c.SSHCommand(), c.VM.SerialLog)
	}
	select {
	case <-ctx.Done():
	case <-down:
	}
	fmt.Fprintln(stdio.Stderr, "lab: stopping")
	return cli.ExitOK
}

// listenControl opens the control socket that lets `lab fault` and `lab
// down` reach a running lab; the channel closes when `lab down` asks it to
// stop.
func listenControl(ctx context.Context, dir string, l *lab.Lab) (net.Listener, <-chan struct{}, error) {
	path := filepath.Join(dir, "lab.sock")
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("remove the control socket left by an earlier lab: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, nil, err
	}
	down := make(chan struct{})
	var stopOnce sync.Once
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					fmt.Fprintln(c, "error: read the request: "+err.Error())
					return
				}
				f := strings.Split(strings.TrimRight(line, "\r\n"), "\t")
				switch {
				case len(f) == 4 && f[0] == "inject":
					err = l.Inject(ctx, f[1], f[2], f[3])
				case len(f) == 4 && f[0] == "clear":
					err = l.Clear(ctx, f[1], f[2])
				case len(f) == 1 && f[0] == "ping":
				case len(f) == 1 && f[0] == "down":
					fmt.Fprintln(c, "ok")
					stopOnce.Do(func() { close(down) })
					return
				default:
					err = errors.New("bad control request")
				}
				if err != nil {
					fmt.Fprintln(c, "error: "+err.Error())
					return
				}
				fmt.Fprintln(c, "ok")
			}(c)
		}
	}()
	return ln, down, nil
}

func control(dir, req string) (string, error) {
	c, err := net.DialTimeout("unix", filepath.Join(dir, "lab.sock"), 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("no running lab in %s (start one with mcp-patch lab up): %w", dir, err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil {
		return "", fmt.Errorf("lab control socket in %s: %w", dir, err)
	}
	fmt.Fprintln(c, req)
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// controlError is what a failed control request says: the connection's
// error, else the running lab's answer (sent as "error: ...").
func controlError(resp string, err error) string {
	if err != nil {
		return strings.TrimSpace(err.Error() + " " + resp)
	}
	return strings.TrimPrefix(resp, "error: ")
}

func labFault(name, dir, node, arg string, clear bool, stdio cli.IO) int {
	verb := "inject"
	if clear {
		verb = "clear"
	}
	resp, err := control(dir, strings.Join([]string{verb, name, node, arg}, "\t"))
	if err != nil || resp != "ok" {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab fault:", controlError(resp, err))
		return cli.ExitNotOK
	}
	fmt.Fprintf(stdio.Stdout, "%s %s: ok\n", verb, name)
	return cli.ExitOK
}

func labDown(dir string, stdio cli.IO) int {
	resp, err := control(dir, "down")
	if err != nil || resp != "ok" {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab down:", controlError(resp, err))
		return cli.ExitNotOK
	}
	fmt.Fprintln(stdio.Stdout, "lab stopping")
	return cli.ExitOK
}

// labDemoEnvironments is lab demo --environments: a staging lab and a
// production lab (shaped by opts), each on its own control plane, started
// side by side under opts.Dir, sharing the intent repository's remote and
// the lab clock; then the round through both (lab.RunEnvironments).
func labDemoEnvironments(ctx context.Context, opts lab.Options, month string, stdio cli.IO, log *slog.Logger) int {
	start := time.Now()
	prodOpts := opts
	prodOpts.Environment = lab.ProductionEnvironment
	stagingOpts := lab.StagingOptions(opts)
	if _, err := time.Parse("2006-01", month); err != nil {
		fmt.Fprintf(stdio.Stderr, "mcp-patch lab demo: with --environments, --round is the month (YYYY-MM), each environment's round named <env>-<month>; not %q\n", month)
		return cli.ExitUsage
	}
	for _, o := range []lab.Options{stagingOpts, prodOpts} {
		if err := o.Validate(); err != nil {
			fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
			return cli.ExitUsage
		}
	}
	if err := lab.Fresh(opts.Dir); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	if err := os.WriteFile(filepath.Join(opts.Dir, lab.MarkerFile), []byte("mcp-patch lab demo --environments\n"), 0o644); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	remote, err := lab.SeedIntentRemote(opts.Dir)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	person, err := lab.NewApproverKey(opts.Dir)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	clock := &lab.Clock{}
	labs := make([]*lab.Lab, 2)
	took := make([]time.Duration, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, o := range []lab.Options{stagingOpts, prodOpts} {
		o.Dir = filepath.Join(opts.Dir, o.Environment)
		o.IntentRemote, o.Clock, o.ApproverKey = remote, clock, person
		say := o.Progress
		name := o.Environment
		o.Progress = func(s string) { say(name + ": " + s) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			labs[i], errs[i] = lab.Up(ctx, o)
			took[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	defer func() {
		for _, l := range labs {
			if l != nil {
				if err := l.Close(); err != nil {
					fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo: close the lab:", err)
				}
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	staging, production := labs[0], labs[1]
	fmt.Fprintf(stdio.Stdout, "Labs up in %s, side by side, each on its own control plane, sharing the intent remote %s and the lab clock:\n",
		time.Since(start).Round(time.Second), remote)
	for i, l := range labs {
		fmt.Fprintf(stdio.Stdout, "  %-10s  %d hosts over SSH, up in %s, intent working copy %s\n", l.Environment, l.Hosts(), took[i].Round(time.Second), l.IntentRepo)
	}
	fmt.Fprintf(stdio.Stdout, "Running round %s-%s, then %s-%s, as an agent would; approvals and statements signed with the lab-only key.\n\n",
		staging.Environment, month, production.Environment, month)
	res, err := lab.RunEnvironments(ctx, staging, production, month, stdio.Stdout, log)
	fmt.Fprintln(stdio.Stdout)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcp-patch lab demo: %v (tool calls: %s, %s)\n", err, staging.CallsLog(res.StagingRound), production.CallsLog(res.ProductionRound))
		return cli.ExitNotOK
	}
	if err := lab.WriteEnvironmentsSummary(stdio.Stdout, staging, production, res); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch lab demo:", err)
		return cli.ExitNotOK
	}
	fmt.Fprintf(stdio.Stdout, "Both environments in %s.\n", time.Since(start).Round(time.Second))
	return cli.ExitOK
}
