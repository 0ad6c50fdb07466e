// Package cli is mcp-patch's command line: global flags, configuration
// loading, and the subcommands (serve, tool, init, doctor, config, approve,
// round, lab).
// It wires packages together; it holds no tool logic of its own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/tools"
)

// Version is set at build time with -ldflags "-X github.com/mcp-patch/mcp-patch/cli.Version=…";
// left at "dev", the module version from the build information is used.
var Version = "dev"

// Exit codes.
const (
	ExitOK         = 0
	ExitNotOK      = 1 // refused, failed or approval_required
	ExitUsage      = 2
	ExitInProgress = 3 // the step is still running: call again
)

// IO is where a command reads and writes.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// SetMemoryLimit sets the process's soft memory limit for serve
	// (runtime/debug.SetMemoryLimit in main); nil leaves it alone, as a
	// test that runs commands in its own process wants.
	SetMemoryLimit func(int64) int64
}

// globals are the flags every command takes, before or after its name.
type globals struct {
	configFile, intentRepo, kubeconfig, kubeContext, stateDir, logLevel string
	allowedSigners                                                      string
	readOnly, disableDestructive                                        bool
	// flags is the root's persistent flag set, to ask which were given.
	flags *pflag.FlagSet
}

func (g *globals) bind(fs *pflag.FlagSet) {
	fs.StringVar(&g.configFile, "config", g.configFile, "config `file` (YAML or JSON; env MCP_PATCH_CONFIG); mcp-patch init writes one, mcp-patch config schema describes it")
	fs.StringVar(&g.intentRepo, "intent-repo", g.intentRepo, "intent repository working copy, a `directory` (env MCP_PATCH_INTENT_REPO)")
	fs.StringVar(&g.kubeconfig, "kubeconfig", g.kubeconfig, "kubeconfig `file` (default: kubectl's rules)")
	fs.StringVar(&g.kubeContext, "context", g.kubeContext, "kubeconfig context `name` (default: its current context)")
	fs.StringVar(&g.stateDir, "state-dir", g.stateDir, "server state `directory` (env MCP_PATCH_STATE_DIR)")
	fs.StringVar(&g.allowedSigners, "allowed-signers", g.allowedSigners, "allowed_signers `file` of the people who may approve (env MCP_PATCH_ALLOWED_SIGNERS)")
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, "log `level`: debug, info, warn or error")
	fs.BoolVar(&g.readOnly, "read-only", g.readOnly, "offer only read-only tools")
	fs.BoolVar(&g.disableDestructive, "disable-destructive", g.disableDestructive, "refuse every destructive tool")
	g.flags = fs
}

// set reports whether the global flag was given on the command line.
func (g *globals) set(name string) bool {
	f := g.flags.Lookup(name)
	return f != nil && f.Changed
}

// load builds the effective configuration: defaults < file < env < flags.
func (g *globals) load(getenv func(string) string) (config.Config, error) {
	if g.configFile == "" {
		g.configFile = getenv("MCP_PATCH_CONFIG")
	}
	c, err := config.Load(g.configFile)
	if err != nil {
		return c, badConfig{err}
	}
	c.ApplyEnv(getenv)
	if g.set("intent-repo") {
		c.IntentRepo = g.intentRepo
	}
	if g.set("kubeconfig") {
		c.Kubeconfig = g.kubeconfig
	}
	if g.set("context") {
		c.Context = g.kubeContext
	}
	if g.set("state-dir") {
		c.StateDir = g.stateDir
	}
	if g.set("allowed-signers") {
		c.Approvals.AllowedSigners = g.allowedSigners
	}
	if g.readOnly {
		c.Mode = config.ModeReadOnly
	} else if g.disableDestructive {
		c.Mode = config.ModeDisableDestructive
	}
	if err := c.Validate(); err != nil {
		return c, badConfig{err}
	}
	return c, nil
}

// badConfig is a configuration that does not load or validate: a usage
// error (exit 2) that needs no command usage to explain it.
type badConfig struct{ error }

func (e badConfig) Unwrap() error { return e.error }

func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usagef("--log-level %q: %v", g.logLevel, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// app is what every command's constructor receives.
type app struct {
	stdio IO
	g     *globals
	// ran is set once a command's flags and arguments parsed: an error
	// before it is a usage error.
	ran bool
}

// Run is the whole program: it returns the exit code.
func Run(ctx context.Context, args []string, stdio IO) int {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	a := newApp(stdio)
	root := a.rootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	return a.exitCode(cmd, err)
}

// exitCode maps a command's error to the exit code and says why on stderr:
// a usage error (a bad flag, a missing or extra argument, an unknown
// command, all found before the command ran) comes with the command's usage.
func (a *app) exitCode(cmd *cobra.Command, err error) int {
	if err == nil {
		return ExitOK
	}
	var code exitError
	if errors.As(err, &code) {
		return int(code)
	}
	var bc badConfig
	if errors.As(err, &bc) {
		fmt.Fprintln(a.stdio.Stderr, "mcp-patch:", err)
		return ExitUsage
	}
	var ue usageError
	if errors.As(err, &ue) || !a.ran {
		fmt.Fprintf(a.stdio.Stderr, "mcp-patch: %v\n", err)
		if cmd != nil {
			fmt.Fprint(a.stdio.Stderr, shortUsage(cmd))
		}
		return ExitUsage
	}
	fmt.Fprintln(a.stdio.Stderr, "mcp-patch:", err)
	return ExitNotOK
}

// shortUsage is the usage shown with a usage error: the command line, its
// subcommands or own flags, and where the whole help is.
func shortUsage(cmd *cobra.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nUsage:\n  %s\n", cmd.UseLine())
	if cmd.HasAvailableSubCommands() {
		var names []string
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
			}
		}
		fmt.Fprintf(&b, "\nCommands: %s\n", strings.Join(names, ", "))
	}
	if cmd.HasAvailableLocalFlags() {
		fmt.Fprintf(&b, "\nFlags:\n%s", cmd.LocalFlags().FlagUsages())
	}
	fmt.Fprintf(&b, "\nSee \"%s --help\" for the whole help, global flags included.\n", cmd.CommandPath())
	return b.String()
}

// exitError is a command's exit code when it has already said why.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// exit turns an exit code into the error a command returns.
func exit(code int) error {
	if code == ExitOK {
		return nil
	}
	return exitError(code)
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

const rootLong = `mcp-patch runs the OS and kernel patch round of a Kubernetes GPU cluster, one
node at a time, as an MCP server and as a CLI with the same tools. Destructive
steps run only behind a person's SSH signature bound to the exact plan.

Start with "mcp-patch init" (a starter configuration with every field
explained), or try everything on the embedded lab with "mcp-patch lab demo".

Exit codes: 0 ok, 1 refused / failed / approval_required, 2 usage error,
3 in progress (call again).`

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "mcp-patch COMMAND",
		Short:         "The OS and kernel patch round of a Kubernetes GPU cluster, one node at a time",
		Long:          rootLong,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE:          groupRun,
		// Set once flags and arguments are parsed: an error after this
		// comes from the command itself, not from its usage.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			a.ran = true
			return nil
		},
	}
	root.SetIn(a.stdio.Stdin)
	root.SetOut(a.stdio.Stdout)
	root.SetErr(a.stdio.Stderr)
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	a.g.bind(root.PersistentFlags())
	root.AddGroup(&cobra.Group{ID: "run", Title: "Running a round:"}, &cobra.Group{ID: "setup", Title: "Setting up:"}, &cobra.Group{ID: "lab", Title: "Trying it out:"})
	root.SetHelpCommandGroupID("setup")
	root.SetCompletionCommandGroupID("setup")
	for _, c := range []*cobra.Command{a.serveCommand(), a.toolCommand(), a.approvalsCommand(), a.approveCommand(), a.roundCommand()} {
		c.GroupID = "run"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.initCommand(), a.doctorCommand(), a.rbacCommand(), a.configCommand(), a.versionCommand()} {
		c.GroupID = "setup"
		root.AddCommand(c)
	}
	lc := a.labCommand()
	lc.GroupID = "lab"
	root.AddCommand(lc)
	return root
}

// noArgs refuses positional arguments: on a command with subcommands, an
// argument is a subcommand nobody knows.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasSubCommands() {
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, ", "))
		}
		return usageError{errors.New(msg)}
	}
	return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
}

// groupRun runs a command that only groups others: named alone it is a
// usage error (its usage lists the subcommands); --help is not.
func groupRun(cmd *cobra.Command, args []string) error {
	if err := noArgs(cmd, args); err != nil {
		return err
	}
	return usagef("%s needs a command", cmd.CommandPath())
}

func (a *app) configCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "config COMMAND",
		Short: "Print the configuration's JSON Schema or its effective values",
		Args:  noArgs,
		RunE:  groupRun,
	}
	c.AddCommand(&cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the config file",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			b, err := config.Schema()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdio.Stdout, "%s\n", b)
			return err
		},
	}, &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration (defaults < file < environment < flags)",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			c, err := a.g.load(a.stdio.Getenv)
			if err != nil {
				return err
			}
			return writeJSON(a.stdio.Stdout, c)
		},
	})
	return c
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version, the VCS revision it was built from and the Go version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(a.stdio.Stdout, "mcp-patch", versionString())
			return err
		},
	}
}

// versionString is the module version (or Version when set at link time),
// the VCS revision and time, and the Go version, from the build information.
func versionString() string {
	v := Version
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if v == "dev" && info.Main.Version != "" {
		v = info.Main.Version
	}
	var rev, when, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" {
		v += fmt.Sprintf(" (revision %s, %s%s)", rev, when, dirty)
	}
	return v + " " + info.GoVersion
}

// depsFor loads the effective configuration and builds the tool
// dependencies; on failure it says why on stderr and returns the exit code.
func (g *globals) depsFor(ctx context.Context, stdio IO) (*tools.Deps, func(), int) {
	c, err := g.load(stdio.Getenv)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch:", err)
		return nil, nil, ExitUsage
	}
	log, err := g.logger(stdio.Stderr)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch:", err)
		return nil, nil, ExitUsage
	}
	d, cleanup, err := buildDeps(ctx, &c, log, stdio.Getenv)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch:", err)
		return nil, nil, ExitNotOK
	}
	return d, cleanup, ExitOK
}

// deps builds the tool dependencies from the effective configuration.
func buildDeps(ctx context.Context, c *config.Config, log *slog.Logger, getenv func(string) string) (*tools.Deps, func(), error) {
	return tools.Build(ctx, c, log, getenv, nil)
}

func trimLines(s string) string { return strings.TrimSpace(s) }
