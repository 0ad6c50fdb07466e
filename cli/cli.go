// Package cli is mcp-patch's command line: global flags, configuration
// loading, and the subcommands (serve, tool, config, approve, round, lab).
// It wires packages together; it holds no tool logic of its own.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/tools"
)

// Version is set at build time with -ldflags "-X mcp-patch/cli.Version=…".
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
}

// globals are the flags every subcommand takes, before or after its name.
type globals struct {
	configFile, intentRepo, kubeconfig, kubeContext, stateDir, logLevel string
	allowedSigners                                                      string
	readOnly, disableDestructive                                        bool
	set                                                                 map[string]bool
}

func (g *globals) bind(fs *flag.FlagSet) {
	fs.StringVar(&g.configFile, "config", g.configFile, "config file (YAML or JSON); see `mcp-patch config schema`")
	fs.StringVar(&g.intentRepo, "intent-repo", g.intentRepo, "intent repository working copy (env MCP_PATCH_INTENT_REPO)")
	fs.StringVar(&g.kubeconfig, "kubeconfig", g.kubeconfig, "kubeconfig file (default: kubectl's rules)")
	fs.StringVar(&g.kubeContext, "context", g.kubeContext, "kubeconfig context")
	fs.StringVar(&g.stateDir, "state-dir", g.stateDir, "server state directory (env MCP_PATCH_STATE_DIR)")
	fs.StringVar(&g.allowedSigners, "allowed-signers", g.allowedSigners, "allowed_signers file of people who may approve (env MCP_PATCH_ALLOWED_SIGNERS)")
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, "debug, info, warn or error")
	fs.BoolVar(&g.readOnly, "read-only", g.readOnly, "offer only read-only tools")
	fs.BoolVar(&g.disableDestructive, "disable-destructive", g.disableDestructive, "refuse every destructive tool")
}

func (g *globals) record(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) { g.set[f.Name] = true })
}

// load builds the effective configuration: defaults < file < env < flags.
func (g *globals) load(getenv func(string) string) (config.Config, error) {
	if g.configFile == "" {
		g.configFile = getenv("MCP_PATCH_CONFIG")
	}
	c, err := config.Load(g.configFile)
	if err != nil {
		return c, err
	}
	c.ApplyEnv(getenv)
	if g.set["intent-repo"] {
		c.IntentRepo = g.intentRepo
	}
	if g.set["kubeconfig"] {
		c.Kubeconfig = g.kubeconfig
	}
	if g.set["context"] {
		c.Context = g.kubeContext
	}
	if g.set["state-dir"] {
		c.StateDir = g.stateDir
	}
	if g.set["allowed-signers"] {
		c.Approvals.AllowedSigners = g.allowedSigners
	}
	if g.readOnly {
		c.Mode = config.ModeReadOnly
	} else if g.disableDestructive {
		c.Mode = config.ModeDisableDestructive
	}
	return c, c.Validate()
}

func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", g.logLevel, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

const usage = `mcp-patch runs the OS and kernel patch round of a Kubernetes GPU cluster, one node at a time.

Usage:
  mcp-patch [global flags] COMMAND [flags]

Commands:
  serve            serve MCP over stdio (default) or streamable HTTP (--http 127.0.0.1:PORT)
  tool NAME        run one tool as a CLI command (--json '<input>' or per-field flags); tool --list lists them
  approve FILE|-   show an approval request in plain words and sign it with your SSH key
  round status     where the current round stands
  config schema    print the JSON Schema of the config file
  config show      print the effective configuration
  lab up|demo|fault|down   the embedded lab: an emulated GPU fleet on a real control plane
  version          print the version

Global flags (accepted before or after COMMAND):
`

// Run is the whole program: it returns the exit code.
func Run(ctx context.Context, args []string, stdio IO) int {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	g := &globals{logLevel: "info", set: map[string]bool{}}
	top := flag.NewFlagSet("mcp-patch", flag.ContinueOnError)
	top.SetOutput(stdio.Stderr)
	g.bind(top)
	top.Usage = func() {
		fmt.Fprint(stdio.Stderr, usage)
		top.PrintDefaults()
	}
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	g.record(top)
	rest := top.Args()
	if len(rest) == 0 {
		top.Usage()
		return ExitUsage
	}
	cmd, rest := rest[0], rest[1:]
	var err error
	switch cmd {
	case "serve":
		err = runServe(ctx, g, rest, stdio)
	case "tool":
		return runTool(ctx, g, rest, stdio)
	case "config":
		err = runConfig(g, rest, stdio)
	case "version":
		fmt.Fprintln(stdio.Stdout, "mcp-patch", Version)
	case "help", "-h", "--help":
		top.Usage()
	default:
		if ext, ok := extraCommands[cmd]; ok {
			return ext(ctx, g, rest, stdio)
		}
		fmt.Fprintf(stdio.Stderr, "mcp-patch: unknown command %q (see mcp-patch help)\n", cmd)
		return ExitUsage
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(stdio.Stderr, "mcp-patch:", err)
			return ExitUsage
		}
		fmt.Fprintln(stdio.Stderr, "mcp-patch:", err)
		return ExitNotOK
	}
	return ExitOK
}

// extraCommands are registered by other files of this package (approve,
// round, lab) so Run stays one switch.
var extraCommands = map[string]func(ctx context.Context, g *globals, args []string, stdio IO) int{}

type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// subFlags makes a subcommand flag set that also takes the global flags.
func subFlags(name string, g *globals, stdio IO) *flag.FlagSet {
	fs := flag.NewFlagSet("mcp-patch "+name, flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	g.bind(fs)
	return fs
}

func parseSub(fs *flag.FlagSet, g *globals, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	g.record(fs)
	return nil
}

func runConfig(g *globals, args []string, stdio IO) error {
	if len(args) == 0 {
		return usagef("config: want schema or show")
	}
	switch args[0] {
	case "schema":
		b, err := config.Schema()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdio.Stdout, "%s\n", b)
		return err
	case "show":
		fs := subFlags("config show", g, stdio)
		if err := parseSub(fs, g, args[1:]); err != nil {
			return err
		}
		c, err := g.load(stdio.Getenv)
		if err != nil {
			return err
		}
		return writeJSON(stdio.Stdout, c)
	}
	return usagef("config: unknown subcommand %q (want schema or show)", args[0])
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
