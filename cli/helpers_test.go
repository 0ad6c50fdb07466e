package cli

import (
	"io"
	"log/slog"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
)

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func mustConfig(t testing.TB, repo string) config.Config {
	t.Helper()
	c := config.DefaultConfig()
	c.IntentRepo = repo
	c.StateDir = t.TempDir()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}
