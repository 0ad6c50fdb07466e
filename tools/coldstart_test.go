package tools

import (
	"context"
	"github.com/mcp-patch/mcp-patch/round/service"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
)

// TestColdStartOpensNothing: building the server, initialize and tools/list
// open neither the intent repository nor the cluster nor the hosts; the
// first resources/list opens the repository once and lists its documents,
// a second one does not open it again.
func TestColdStartOpensNothing(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "intent")
	intentRepo(t, repo, "http://127.0.0.1:1")
	c := config.DefaultConfig()
	c.IntentRepo, c.StateDir = repo, t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	d, cleanup, err := Build(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cleanup() })
	var intents, clusters, hosts atomic.Int32
	openIntent, openCluster, openHosts := d.Intent, d.Cluster, d.Hosts
	d.Intent = func(round string) (*intent.Repo, error) { intents.Add(1); return openIntent(round) }
	d.Cluster = func(ctx context.Context) (*kube.Clients, error) { clusters.Add(1); return openCluster(ctx) }
	d.Hosts = func(ctx context.Context) (*service.HostAccess, error) { hosts.Add(1); return openHosts(ctx) }

	cs := connect(t, Builtin(), d, nil)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n, k, h := intents.Load(), clusters.Load(), hosts.Load(); n+k+h != 0 {
		t.Fatalf("initialize and tools/list opened the intent repository %d times, the cluster %d, the hosts %d", n, k, h)
	}
	lr, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lr.Resources) == 0 || intents.Load() != 1 {
		t.Fatalf("resources/list: %d resources after %d opens of the repository", len(lr.Resources), intents.Load())
	}
	again, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Resources) != len(lr.Resources) || intents.Load() != 1 {
		t.Fatalf("a second resources/list: %d resources (first %d), %d opens", len(again.Resources), len(lr.Resources), intents.Load())
	}
	if k, h := clusters.Load(), hosts.Load(); k+h != 0 {
		t.Fatalf("resources/list opened the cluster %d times, the hosts %d", k, h)
	}
}
