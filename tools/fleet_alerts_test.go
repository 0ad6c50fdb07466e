package tools

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/alerts"
	"github.com/mcp-patch/mcp-patch/round/ops"
)

// alertmanager answers the calls of Alertmanager's v2 API the server
// makes (GET /api/v2/alerts, POST and GET /api/v2/silences, DELETE
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
		case r.Method == http.MethodGet && r.URL.Path == "/api/v2/silences":
			list := []map[string]any{}
			for i, s := range a.silences {
				id, state := "sil-"+string(rune('1'+i)), "active"
				if slices.Contains(a.expired, id) {
					state = "expired"
				}
				list = append(list, map[string]any{"id": id, "createdBy": s["createdBy"], "comment": s["comment"],
					"matchers": s["matchers"], "status": map[string]string{"state": state}})
			}
			_ = json.NewEncoder(w).Encode(list)
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

	// The gate stays red past its settle time; a person accepts it and
	// the window closes: its Lease is released at once and its silence
	// is expired, journaled, so the next node's drain is admitted.
	f.must(StatusInProgress, "close_window", map[string]any{"node": "cp-1"})
	f.advance(f.d.Config.Kube.GateSettle.D() + time.Second)
	f.must(StatusFailed, "close_window", map[string]any{"node": "cp-1"})
	if h := f.leaseHolder(); h == "" {
		t.Fatal("no window Lease held while the window of cp-1 is open")
	}
	res = f.decide(map[string]any{"decision": "residual_risk_accepted", "node": "cp-1", "step": "gate",
		"reason": "the volume alert is on gpu-2 and watched by hand", "review_trigger": "next-round:2026-12"})
	if res.Status != StatusOK || !strings.Contains(reasons(res), "window Lease released") || !strings.Contains(reasons(res), "Alertmanager silence of cp-1 expired (sil-1)") {
		t.Fatalf("accept the red gate: %s %v", res.Status, res.Reasons)
	}
	if h := f.leaseHolder(); h != "" {
		t.Fatalf("the window Lease is still held by %q after the window closed", h)
	}
	am.mu.Lock()
	expired := slices.Clone(am.expired)
	am.mu.Unlock()
	if len(expired) != 1 || expired[0] != "sil-1" {
		t.Fatalf("silences expired %v, want [sil-1]", expired)
	}
	st := f.state()
	if len(st.Releases) != 1 || st.Releases[0].Node != "cp-1" || !strings.Contains(st.Releases[0].Detail, "window Lease released") ||
		!strings.Contains(st.Releases[0].Detail, "sil-1") {
		t.Fatalf("journaled releases %+v", st.Releases)
	}
	if res := f.decide(map[string]any{"decision": "resume", "reason": "risk accepted"}); res.Status != StatusOK {
		t.Fatalf("resume: %s %v", res.Status, res.Reasons)
	}
	f.preflight("gpu-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "gpu-1"}); res.Status != StatusOK {
		t.Fatalf("the next node's drain after the accepted gate: %s %v", res.Status, res.Reasons)
	}
}

// A server that restarted mid-window no longer knows the id of the
// silence it set: the window's end finds it in Alertmanager by its
// comment and expires it, once; another node's or a person's is left.
func TestUnsilenceAfterARestartFindsTheWindowsSilence(t *testing.T) {
	am := newAlertmanager(t, "tok")
	src := alerts.Source{AlertmanagerURL: am.srv.URL, BearerToken: "tok"}
	now := time.Date(2026, 11, 3, 22, 0, 0, 0, time.UTC)
	for _, n := range []string{"gpu-2", "gpu-3"} {
		if _, err := src.SilenceNode(t.Context(), "node", n, ops.WindowComment(fRound, n), now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	o := ops.New(nil, nil, nil, slog.New(slog.DiscardHandler))
	o.Alerts = func() (alerts.Source, bool, error) { return src, true, nil }
	o.Settings = func(string) *intent.AlertSettings { return &intent.AlertSettings{SilenceNode: true} }
	ids, err := o.Unsilence(t.Context(), fRound, "gpu-2")
	if err != nil || !slices.Equal(ids, []string{"sil-1"}) {
		t.Fatalf("unsilence after a restart: %v %v", ids, err)
	}
	if ids, err := o.Unsilence(t.Context(), fRound, "gpu-2"); err != nil || len(ids) != 0 {
		t.Fatalf("a second unsilence expired %v (%v)", ids, err)
	}
	am.mu.Lock()
	defer am.mu.Unlock()
	if !slices.Equal(am.expired, []string{"sil-1"}) {
		t.Fatalf("expired %v, want only gpu-2's sil-1", am.expired)
	}
	// Without silence_node the window set none: nothing is asked.
	o.Settings = func(string) *intent.AlertSettings { return &intent.AlertSettings{} }
	srvDown := alerts.Source{AlertmanagerURL: "http://127.0.0.1:1"}
	o.Alerts = func() (alerts.Source, bool, error) { return srvDown, true, nil }
	if ids, err := o.Unsilence(t.Context(), fRound, "gpu-3"); err != nil || len(ids) != 0 {
		t.Fatalf("unsilence without silence_node: %v %v", ids, err)
	}
	// With it and Alertmanager down: a clear error, nothing claimed.
	o.Settings = func(string) *intent.AlertSettings { return &intent.AlertSettings{SilenceNode: true} }
	if ids, err := o.Unsilence(t.Context(), fRound, "gpu-3"); err == nil || len(ids) != 0 || !strings.Contains(err.Error(), "could not read alerts") {
		t.Fatalf("unsilence with Alertmanager down: %v %v", ids, err)
	}
}
