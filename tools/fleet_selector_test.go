package tools

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
)

// prometheus answers GET /api/v1/alerts (nothing fires) and GET
// /api/v1/rules?type=alert (one alerting rule, severity=warning) in the
// HTTP API's shapes.
func newPrometheus(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/alerts":
			io.WriteString(w, `{"status":"success","data":{"alerts":[]}}`)
		case r.URL.Path == "/api/v1/rules" && r.URL.Query().Get("type") == "alert":
			io.WriteString(w, `{"status":"success","data":{"groups":[{"name":"node","file":"node.yaml","interval":60,"rules":[`+
				`{"name":"KubeNodeNotReady","query":"up == 0","duration":900,"labels":{"severity":"warning"},"annotations":{},"alerts":[],"health":"ok","type":"alerting","state":"inactive"}]}]}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// editSettings rewrites os-layer/settings.yaml and commits it.
func (f *fleet) editSettings(edit func(string) string) {
	f.t.Helper()
	p := filepath.Join(f.repo, "os-layer", "settings.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(edit(string(b))), 0o644); err != nil {
		f.t.Fatal(err)
	}
	gitRun(f.t, f.repo, "commit", "-qam", "settings")
}

// Selectors that pick nothing: a malformed one is refused before anything
// is written; a well-formed one that matches no pod in the cluster, or no
// alerting rule in Prometheus, is named in plan_round's reasons and in
// plan.md's risks. Other bad input of the intent (an unknown time zone,
// an empty or overlapping maintenance window) is refused the same way.
func TestFleetSelectorsThatMatchNothing(t *testing.T) {
	prom := newPrometheus(t)
	f := newFleet(t, func(c *config.Config) { c.Kube.PrometheusURL = prom.URL })
	journal := filepath.Join(f.repo, "rounds", fRound, "journal.jsonl")
	good, err := os.ReadFile(filepath.Join(f.repo, "os-layer", "settings.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, add, want string
	}{
		{"malformed jobs selector", "drain:\n  wait_for_jobs:\n    selector: app in (train\n    max_wait_minutes: 30\n", "drain.wait_for_jobs.selector"},
		{"malformed alerts selector", "alerts:\n  selector: 'severity in (critical'\n", "alerts.selector"},
		{"unknown time zone", "maintenance:\n  estimated_window_minutes: 60\n  windows:\n    - {days: [sat], start: \"22:00\", end: \"04:00\", time_zone: Mars/Olympus}\n",
			`"Mars/Olympus" is not an IANA time zone`},
		{"empty window", "maintenance:\n  estimated_window_minutes: 60\n  windows:\n    - {days: [sat], start: \"22:00\", end: \"22:00\", time_zone: UTC}\n",
			"the window is empty"},
		{"overlapping windows", "maintenance:\n  estimated_window_minutes: 60\n  windows:\n    - {days: [sat], start: \"20:00\", end: \"23:00\", time_zone: UTC}\n" +
			"    - {days: [sat], start: \"22:00\", end: \"02:00\", time_zone: UTC}\n", "overlap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.editSettings(func(s string) string {
				s = string(good)
				if strings.HasPrefix(c.add, "drain:\n") {
					return strings.Replace(s, "\ndrain:\n", "\n"+c.add, 1)
				}
				return s + c.add
			})
			_, res := f.call("plan_round", map[string]any{"round": fRound})
			if res.Status != StatusRefused || !strings.Contains(reasons(res), c.want) || !strings.Contains(reasons(res), "nothing was changed") {
				t.Fatalf("plan_round: %s %v, want refused naming %q", res.Status, res.Reasons, c.want)
			}
			if _, err := os.Stat(journal); !os.IsNotExist(err) {
				t.Fatalf("a refused plan_round wrote the journal (%v)", err)
			}
		})
	}

	f.editSettings(func(string) string {
		return strings.Replace(string(good), "\ndrain:\n", "\ndrain:\n  wait_for_jobs:\n    selector: app=train\n    max_wait_minutes: 30\n", 1) +
			"alerts:\n  selector: severity=critical\n"
	})
	_, res := f.call("plan_round", map[string]any{"round": fRound})
	jobs := "drain.wait_for_jobs.selector app=train matches no pod in the cluster: the drain will wait for nothing"
	rules := "alerts.selector severity=critical matches no alerting rule in Prometheus (1 rules): the alert check can never turn red"
	if res.Status != StatusOK || !strings.Contains(reasons(res), jobs) || !strings.Contains(reasons(res), rules) {
		t.Fatalf("plan_round: %s %v", res.Status, res.Reasons)
	}
	md, err := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, "plan.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Risks\n\n- "+jobs+"\n- "+rules+"\n") {
		t.Fatalf("plan.md does not list the selectors' risks:\n%s", md)
	}
	// round_status names them while the round is open; the statement a
	// person signs for the plan counts them.
	_, res = f.call("round_status", nil)
	if res.Status != StatusOK || !strings.Contains(reasons(res), jobs) || !strings.Contains(reasons(res), rules) {
		t.Fatalf("round_status: %s %v", res.Status, res.Reasons)
	}
	_, res = f.call("sign_plan", nil)
	if res.Status != StatusApprovalRequired || res.Approval == nil || !strings.Contains(res.Approval.Request, "2 fleet-wide risk(s): read Risks in plan.md") {
		t.Fatalf("sign_plan: %s %+v", res.Status, res.Approval)
	}
}
