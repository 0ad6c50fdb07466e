package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// alertmanagerBin is the real Alertmanager scripts/setup.sh builds.
func alertmanagerBin(t *testing.T) string {
	if p := os.Getenv("MCP_PATCH_ALERTMANAGER"); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(cache, "mcp-patch", "alertmanager-v0.28.1", "alertmanager")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no Alertmanager at %s: run scripts/setup.sh (the fake-API tests above cover the same shapes)", p)
	}
	return p
}

// TestAgainstRealAlertmanager runs the reader, the silence and its expiry
// against a real Alertmanager on loopback.
func TestAgainstRealAlertmanager(t *testing.T) {
	bin := alertmanagerBin(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "am.yml")
	if err := os.WriteFile(cfg, []byte("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	waitFor(t, &logs, "Alertmanager ready", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	now := time.Now().UTC()
	post, _ := json.Marshal([]map[string]any{
		{"labels": map[string]string{"alertname": "KubeNodeNotReady", "node": "gpu-03", "severity": "warning"}, "startsAt": now.Add(-time.Minute)},
		{"labels": map[string]string{"alertname": "PostgresReplicationLag", "namespace": "databases", "severity": "critical"}, "startsAt": now.Add(-time.Minute)},
	})
	resp, err := http.Post(base+"/api/v2/alerts", "application/json", bytes.NewReader(post))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("post alerts: %v %v", err, resp)
	}
	resp.Body.Close()
	src := Source{AlertmanagerURL: base}
	ctx := context.Background()
	names := func() map[string]bool {
		got, err := src.Firing(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, a := range got {
			m[a.Name()] = true
		}
		return m
	}
	waitFor(t, &logs, "both alerts active", func() bool { n := names(); return n["KubeNodeNotReady"] && n["PostgresReplicationLag"] })

	sil, err := src.SilenceNode(ctx, "node", "gpu-03", "mcp-patch contract test", now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, &logs, "the node's alert silenced, the other still firing", func() bool {
		n := names()
		return !n["KubeNodeNotReady"] && n["PostgresReplicationLag"]
	})
	list, err := src.Silences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := Ours(list, "mcp-patch contract test"); len(got) != 1 || got[0] != sil.ID {
		t.Fatalf("Ours of %+v = %v, want [%s]", list, got, sil.ID)
	}
	if err := src.Expire(ctx, sil.ID); err != nil {
		t.Fatal(err)
	}
	if list, err = src.Silences(ctx); err != nil {
		t.Fatal(err)
	}
	if got := Ours(list, "mcp-patch contract test"); len(got) != 0 {
		t.Fatalf("an expired silence is still ours to expire: %v", got)
	}
	waitFor(t, &logs, "the node's alert back after the silence expired", func() bool { return names()["KubeNodeNotReady"] })
	if err := src.Expire(ctx, "00000000-0000-0000-0000-000000000000"); err == nil {
		t.Fatal("expiring an unknown silence succeeded")
	}
}

func waitFor(t *testing.T, logs *bytes.Buffer, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 2 minutes\n%s", what, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
