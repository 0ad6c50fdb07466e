package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/tools"
)

// A Command is a command that a binary built on this package adds to
// mcp-patch's own, built with the program's Env: the lab's binary
// (cmd/mcp-patch-lab) adds `lab`, which replaces the built-in command of
// the same name (the one that runs the lab's binary).
type Command func(Env) *cobra.Command

// Env is what an added command gets from the program.
type Env struct {
	Stdio IO
	// Logger is the logger --log-level asks for; with the flag not given,
	// at level def ("debug", "info", "warn" or "error").
	Logger func(def string) (*slog.Logger, error)
}

// RunWith is Run with more commands: each replaces the built-in command of
// its name, or is added beside them.
func RunWith(ctx context.Context, args []string, stdio IO, more ...Command) int {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	a := &app{stdio: stdio, g: &globals{logLevel: "info"}}
	root := a.rootCommand()
	env := Env{Stdio: stdio, Logger: func(def string) (*slog.Logger, error) {
		if !a.g.set("log-level") {
			a.g.logLevel = def
		}
		return a.g.logger(stdio.Stderr)
	}}
	for _, m := range more {
		c := m(env)
		for _, old := range root.Commands() {
			if old.Name() == c.Name() {
				c.GroupID = old.GroupID
				root.RemoveCommand(old)
			}
		}
		root.AddCommand(c)
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	return a.exitCode(cmd, err)
}

// NoArgs is cobra's Args for a command that takes no positional argument
// (on a command with subcommands, an argument is an unknown command).
func NoArgs(cmd *cobra.Command, args []string) error { return noArgs(cmd, args) }

// GroupRun is the RunE of a command that only groups others.
func GroupRun(cmd *cobra.Command, args []string) error { return groupRun(cmd, args) }

// Usagef is a usage error: exit 2 with the command's usage.
func Usagef(format string, a ...any) error { return usagef(format, a...) }

// ExitCode is the error a command returns once it has said why it ends
// with code (nil for ExitOK).
func ExitCode(code int) error { return exit(code) }

// HTTPServer is mcp-patch's MCP server on streamable HTTP behind a fresh
// bearer token, as serve --http runs it (the lab's `lab up` serves its
// lab this way).
type HTTPServer struct {
	// URL is where the server answers, e.g. http://127.0.0.1:8765/; Token
	// is the bearer token, also written (mode 0600) to TokenFile.
	URL, Token, TokenFile string
	// Server is the MCP server behind URL (for a test to watch its
	// messages).
	Server  *mcp.Server
	srv     *http.Server
	cleanup func()
}

// ServeHTTP serves the tools built from cfg on addr (host:port; port 0
// picks a free one) with the clock now, behind a fresh token written to
// tokenFile. Close stops it.
func ServeHTTP(ctx context.Context, cfg config.Config, addr, tokenFile string, now func() time.Time, getenv func(string) string, log *slog.Logger) (*HTTPServer, error) {
	d, cleanup, err := tools.Build(ctx, &cfg, log, getenv, now)
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		cleanup()
		return nil, fmt.Errorf("make the HTTP token: %w", err)
	}
	h := &HTTPServer{Token: hex.EncodeToString(tok), TokenFile: filepath.Clean(tokenFile), cleanup: cleanup}
	if err := os.WriteFile(h.TokenFile, []byte(h.Token+"\n"), 0o600); err != nil {
		cleanup()
		return nil, fmt.Errorf("write the HTTP token: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cleanup()
		return nil, err
	}
	server := tools.NewServer(tools.Builtin(), d, Version)
	srv, ln := newHTTPServer(ln, bearerHandler(server, h.Token, sessionLimitsOf(d.Config.Serve), log))
	h.Server, h.srv, h.URL = server, srv, "http://"+ln.Addr().String()+"/"
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("MCP HTTP server stopped", "err", err)
		}
	}()
	return h, nil
}

// Close stops the server and releases what it built.
func (h *HTTPServer) Close() error {
	err := h.srv.Close()
	h.cleanup()
	return err
}
