package tools

import (
	"context"
	"log/slog"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// Build makes the tool dependencies from a configuration
// (service.Build), with the intent documents as MCP resources when an
// intent repository is configured. cleanup closes what Build opened.
func Build(ctx context.Context, c *config.Config, log *slog.Logger, getenv func(string) string, now func() time.Time) (*Deps, func(), error) {
	d, cleanup, err := service.Build(ctx, c, log, getenv, now)
	if err != nil {
		return nil, nil, err
	}
	if d.Intent != nil {
		d.Resources = IntentResources(d)
	}
	return d, cleanup, nil
}
