package tools

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
)

// alertmanager answers the three calls of Alertmanager's v2 API the
// server makes (GET /api/v2/alerts, POST /api/v2/silences, DELETE
// /api/v2/silence/{id}) and keeps what it was sent; a request without
// the bearer token is refused, as the real one behind its proxy does.
type alertmanager struct {
	srv      *httptest.Server
	mu       sync.Mutex
	firing   []map[string]any
	silences []map[string]any
	expired  []string
	silenced chan struct{}
}

func newAlertmanager(t *testing.T, token string) *alertmanager {
	a := &alertmanager{silenced: make(chan struct{}, 8)}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v2/alerts":
			if r.URL.Query().Get("silenced") != "false" {
				http.Error(w, "want silenced=false", http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode(append([]map[string]any{}, a.firing...))
		case r.Method == http.MethodPost && r.URL.Path == "/api/v2/silences":
			var s map[string]any
			if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			a.silences = append(a.silences, s)
			_ = json.NewEncoder(w).Encode(map[string]string{"silenceID": "sil-" + string(rune('0'+len(a.silences)))})
			a.silenced <- struct{}{}
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/api/v2/silence/"):
			a.expired = append(a.expired, strings.TrimPrefix(r.URL.Path, "/api/v2/silence/"))
		default:
			http.Error(w, "not found", http.StatusNotFound)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// With Alertmanager configured and the intent's alerts.silence_node set,
// the drain of a node puts a silence on it (matcher node=<node>, sent
// with the configured bearer token), and a firing alert that is not one
// a window causes keeps the node's gate red, named in the reasons.
func TestFleetAlertsSilenceTheWindowAndHoldTheGate(t *testing.T) {
	token := filepath.Join(t.TempDir(), "alerts-token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	am := newAlertmanager(t, "s3cret")
	f := newFleet(t, func(c *config.Config) {
		c.Kube.AlertmanagerURL, c.Kube.AlertsTokenFile = am.srv.URL, token
	})
	settings := filepath.Join(f.repo, "os-layer", "settings.yaml")
	b, err := os.ReadFile(settings)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, []byte("alerts:\n  silence_node: true\n  allow: [Watchdog]\n")...)
	if err := os.WriteFile(settings, b, 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, f.repo, "commit", "-qam", "alerts: silence the window's node")

	f.planned()
	f.preflight("cp-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, res.Reasons)
	}
	select {
	case <-am.silenced:
	case <-time.After(60 * time.Second):
		t.Fatal("no silence was put on cp-1 for its window")
	}
	am.mu.Lock()
	sil := am.silences[0]
	am.mu.Unlock()
	ms, _ := sil["matchers"].([]any)
	if len(ms) != 1 || ms[0].(map[string]any)["name"] != "node" || ms[0].(map[string]any)["value"] != "cp-1" {
		t.Fatalf("silence matchers %v, want node=cp-1", sil["matchers"])
	}
	if c, _ := sil["comment"].(string); !strings.Contains(c, "window of cp-1") {
		t.Fatalf("silence comment %q", c)
	}

	if _, res := f.approve("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("install_updates: %s %v", res.Status, res.Reasons)
	}
	f.host("cp-1").InstallState = "finished"
	f.must(StatusOK, "install_updates", map[string]any{"node": "cp-1"})
	if _, res := f.approve("trial_boot", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("trial_boot: %s %v", res.Status, res.Reasons)
	}
	f.host("cp-1").Boot(false)
	f.must(StatusOK, "trial_boot", map[string]any{"node": "cp-1"})
	f.must(StatusOK, "record_verification", map[string]any{"node": "cp-1"})
	f.must(StatusOK, "uncordon_node", map[string]any{"node": "cp-1"})
	if _, res := f.approve("promote_kernel", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("promote: %s %v", res.Status, res.Reasons)
	}

	am.mu.Lock()
	am.firing = []map[string]any{
		{"labels": map[string]string{"alertname": "KubePersistentVolumeFillingUp", "severity": "critical", "node": "gpu-2"},
			"startsAt": "2026-11-03T07:00:00Z", "status": map[string]any{"state": "active"}},
		{"labels": map[string]string{"alertname": "Watchdog", "severity": "none"}, "startsAt": "2026-11-03T07:00:00Z", "status": map[string]any{"state": "active"}},
	}
	am.mu.Unlock()
	journal, _ := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, "journal.jsonl"))
	_, res := f.call("check_gate", map[string]any{"node": "cp-1"})
	if res.Status == StatusOK || !strings.Contains(reasons(res), "KubePersistentVolumeFillingUp") || strings.Contains(reasons(res), "Watchdog") {
		t.Fatalf("check_gate with a firing alert: %s %v", res.Status, res.Reasons)
	}
	if now, _ := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, "journal.jsonl")); string(now) != string(journal) {
		t.Fatal("check_gate wrote the journal")
	}
}
