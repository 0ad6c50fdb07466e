package metrics

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/round"
)

// A round with one closed window (gpu-a, 90m), one open (gpu-b, drain
// started 20m ago) and a failed verify on gpu-b that stopped the round.
func scriptedRound(t *testing.T) (*round.Journal, *time.Time) {
	t.Helper()
	now := time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-11"), round.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	o, err := round.PlanOrder([]round.NodeInfo{{Name: "gpu-a", GPU: true, Canary: true}, {Name: "gpu-b", GPU: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ round.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Plan(o, 48*time.Hour, round.Meta{}))
	must(j.StartStep(round.StepBaseline, "", round.Meta{}))
	must(j.FinishStep(round.StepBaseline, "", round.Meta{}))
	for _, n := range []string{"gpu-a", "gpu-b"} {
		for _, s := range round.PreflightSteps {
			must(j.StartStep(s, n, round.Meta{}))
			must(j.FinishStep(s, n, round.Meta{}))
		}
	}
	for _, s := range round.WindowSteps {
		must(j.StartStep(s, "gpu-a", round.Meta{}))
		if s == round.StepDrain {
			now = now.Add(90 * time.Minute)
		}
		must(j.FinishStep(s, "gpu-a", round.Meta{}))
	}
	must(j.StartStep(round.StepDrain, "gpu-b", round.Meta{}))
	must(j.FinishStep(round.StepDrain, "gpu-b", round.Meta{}))
	must(j.StartStep(round.StepInstall, "gpu-b", round.Meta{}))
	must(j.FinishStep(round.StepInstall, "gpu-b", round.Meta{}))
	must(j.StartStep(round.StepTrialBoot, "gpu-b", round.Meta{}))
	must(j.FinishStep(round.StepTrialBoot, "gpu-b", round.Meta{}))
	must(j.StartStep(round.StepVerify, "gpu-b", round.Meta{}))
	must(j.FailStep(round.StepVerify, "gpu-b", round.Meta{Detail: "bond0 has 1 active slave, want 2"}))
	now = now.Add(20 * time.Minute)
	return j, &now
}

func TestRoundMetrics(t *testing.T) {
	j, now := scriptedRound(t)
	m := New(func() (*round.State, error) { return j.State(), nil }, Options{
		Now: func() time.Time { return *now }, Expected: func(*round.State) time.Duration { return 90 * time.Minute }})
	m.Notified("chat", "round_stopped", true)
	m.Notified("chat", "approval_needed", false)
	if !m.ApprovalPending(Pending{Tool: "rollback_node", Node: "gpu-b", Round: "2026-11", Since: now.Add(-5 * time.Minute), Expires: now.Add(25 * time.Minute)}) {
		t.Fatal("first pending request not new")
	}
	if m.ApprovalPending(Pending{Tool: "rollback_node", Node: "gpu-b", Round: "2026-11", Since: *now, Expires: now.Add(30 * time.Minute)}) {
		t.Fatal("the same request again counted as new (would notify twice)")
	}
	want := `
# HELP mcp_patch_approval_pending_age_seconds How long each approval request has waited for a signature.
# TYPE mcp_patch_approval_pending_age_seconds gauge
mcp_patch_approval_pending_age_seconds{node="gpu-b",round="2026-11",tool="rollback_node"} 300
# HELP mcp_patch_approvals_pending Approval requests waiting for a person's signature.
# TYPE mcp_patch_approvals_pending gauge
mcp_patch_approvals_pending 1
# HELP mcp_patch_node_window 1 for each node's window state (pending, open, closed).
# TYPE mcp_patch_node_window gauge
mcp_patch_node_window{node="gpu-a",round="2026-11",state="closed"} 1
mcp_patch_node_window{node="gpu-b",round="2026-11",state="open"} 1
# HELP mcp_patch_node_step 1 for each node's current step and its state (pending, in_flight, done, failed).
# TYPE mcp_patch_node_step gauge
mcp_patch_node_step{node="gpu-a",round="2026-11",state="done",step="gate"} 1
mcp_patch_node_step{node="gpu-b",round="2026-11",state="failed",step="verify"} 1
# HELP mcp_patch_notifications_total Notification deliveries by hook, event kind and outcome (sent, failed).
# TYPE mcp_patch_notifications_total counter
mcp_patch_notifications_total{hook="chat",kind="approval_needed",outcome="failed"} 1
mcp_patch_notifications_total{hook="chat",kind="round_stopped",outcome="sent"} 1
# HELP mcp_patch_round_stopped 1 while the round is stopped for a person's decision.
# TYPE mcp_patch_round_stopped gauge
mcp_patch_round_stopped{node="gpu-b",round="2026-11",step="verify"} 1
# HELP mcp_patch_step_failures_total Failed attempts of each step in the open round.
# TYPE mcp_patch_step_failures_total counter
mcp_patch_step_failures_total{round="2026-11",step="verify"} 1
# HELP mcp_patch_window_expected_seconds The window length a node is expected to need (median of this round's windows, or the intent's estimate).
# TYPE mcp_patch_window_expected_seconds gauge
mcp_patch_window_expected_seconds{round="2026-11"} 5400
# HELP mcp_patch_window_open_seconds How long the open window has been open.
# TYPE mcp_patch_window_open_seconds gauge
mcp_patch_window_open_seconds{node="gpu-b",round="2026-11"} 1200
`
	names := []string{"mcp_patch_approval_pending_age_seconds", "mcp_patch_approvals_pending", "mcp_patch_node_window", "mcp_patch_node_step",
		"mcp_patch_notifications_total", "mcp_patch_round_stopped", "mcp_patch_step_failures_total", "mcp_patch_window_expected_seconds", "mcp_patch_window_open_seconds"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// The phase: stopped, and only stopped.
	if got := scraped(t, m, `mcp_patch_round_phase{phase="stopped",round="2026-11"}`); got != "1" {
		t.Fatalf("phase stopped = %v", got)
	}
	if got := scraped(t, m, `mcp_patch_round_phase{phase="windows",round="2026-11"}`); got != "0" {
		t.Fatalf("phase windows = %v", got)
	}
	// The window histogram holds the one closed window (90m).
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(histogram), "mcp_patch_window_duration_seconds"); err != nil {
		t.Fatal(err)
	}
	if lint, err := testutil.GatherAndLint(m.Registry()); err != nil || len(lint) > 0 {
		t.Fatalf("lint: %v %v", lint, err)
	}

	// Resolved or expired requests stop counting.
	m.ApprovalResolved("rollback_node", "gpu-b")
	m.ApprovalPending(Pending{Tool: "drain_node", Node: "gpu-c", Round: "2026-11", Since: *now, Expires: now.Add(time.Minute)})
	*now = now.Add(2 * time.Minute)
	if n := len(m.PendingApprovals()); n != 0 {
		t.Fatalf("%d pending after resolve and expiry", n)
	}
}

const histogram = `
# HELP mcp_patch_window_duration_seconds Closed windows of the open round, drain start to green gate.
# TYPE mcp_patch_window_duration_seconds histogram
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="600"} 0
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="1200"} 0
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="1800"} 0
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="2700"} 0
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="3600"} 0
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="5400"} 1
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="7200"} 1
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="10800"} 1
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="14400"} 1
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="21600"} 1
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="28800"} 1
mcp_patch_window_duration_seconds_bucket{round="2026-11",le="+Inf"} 1
mcp_patch_window_duration_seconds_sum{round="2026-11"} 5400
mcp_patch_window_duration_seconds_count{round="2026-11"} 1
`

// scraped finds one sample's value by its text form in the /metrics output.
func scraped(t *testing.T, m *Metrics, series string) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	t.Fatalf("%s not in /metrics:\n%s", series, b)
	return ""
}

func TestUnreadableRoundIsAScrapeError(t *testing.T) {
	m := New(func() (*round.State, error) { return nil, errors.New("journal locked") }, Options{})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "mcp_patch_round_read_errors_total 1") && !strings.Contains(string(b), "journal locked") {
		t.Fatalf("scrape of an unreadable round: HTTP %d\n%s", resp.StatusCode, b)
	}
}

// The example alert rules use only metrics this package exports, with
// labels it sets.
func TestExampleAlertRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "examples", "alerts", "mcp-patch.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	j, _ := scriptedRound(t)
	m := New(func() (*round.State, error) { return j.State(), nil }, Options{Expected: func(*round.State) time.Duration { return time.Hour }})
	m.Notified("h", "round_stopped", false)
	m.ApprovalPending(Pending{Tool: "drain_node", Node: "n", Round: "2026-11", Since: time.Now()})
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range families {
		known[f.GetName()] = true
	}
	metric := regexp.MustCompile(`mcp_patch_[a-z_]+`)
	alerts := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			alerts++
			names := metric.FindAllString(r.Expr, -1)
			if len(names) == 0 {
				t.Errorf("alert %s uses no mcp_patch metric: %s", r.Alert, r.Expr)
			}
			for _, n := range names {
				if !known[n] {
					t.Errorf("alert %s uses %s, which is not exported", r.Alert, n)
				}
			}
		}
	}
	if alerts < 3 {
		t.Fatalf("%d alerts, want approval pending, window over expected and round stopped", alerts)
	}
}

// fullRound adds a green gate, a red gate and a rollback to the scripted
// round, so every family of Exported has a series.
func fullRound(t *testing.T) *Metrics {
	t.Helper()
	j, _ := scriptedRound(t)
	st := j.State()
	st.Nodes[1].Steps[round.StepGate].Attempts = append(st.Nodes[1].Steps[round.StepGate].Attempts,
		round.Attempt{Outcome: round.OutcomeFailed})
	st.Rollbacks = append(st.Rollbacks, round.RollbackRun{Node: "gpu-b", State: round.Done})
	m := New(func() (*round.State, error) { return st, nil }, Options{Expected: func(*round.State) time.Duration { return time.Hour }})
	m.Notified("h", "round_stopped", false)
	m.ApprovalPending(Pending{Tool: "drain_node", Node: "n", Round: "2026-11", Since: time.Now()})
	return m
}

var updateExported = flag.Bool("update", false, "rewrite testdata/exported.txt")

// TestExportedIsGathered: Exported is exactly what a scrape of a round with
// every kind of record returns (names, types, label names), and
// testdata/exported.txt, which the dashboard's and the alert rules' checks
// in test/promrules read, is Exported written out (-update rewrites it).
func TestExportedIsGathered(t *testing.T) {
	families, err := fullRound(t).Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []Family
	for _, f := range families {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		var names []string
		for l := range labels {
			names = append(names, l)
		}
		sort.Strings(names)
		got = append(got, Family{Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Labels: names})
	}
	want := Exported()
	for i := range want {
		sort.Strings(want[i].Labels)
	}
	sort.Slice(want, func(a, b int) bool { return want[a].Name < want[b].Name })
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Exported() (-) against a scrape (+):\n%s", diff)
	}
	var b strings.Builder
	b.WriteString("# The metric families mcp-patch's /metrics exports: name, type, labels (- for none).\n# Written by go test ./metrics -run TestExportedIsGathered -update; read by test/promrules.\n")
	for _, f := range want {
		labels := strings.Join(f.Labels, ",")
		if labels == "" {
			labels = "-"
		}
		fmt.Fprintf(&b, "%s %s %s\n", f.Name, f.Type, labels)
	}
	file := filepath.Join("testdata", "exported.txt")
	if *updateExported {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(old) != b.String() {
		t.Errorf("%s is stale: go test ./metrics -run TestExportedIsGathered -update", file)
	}
}

// TestStepDurationsAndGates: time per step counts finished attempts only,
// gate checks count by result, rollbacks by state.
func TestStepDurationsAndGates(t *testing.T) {
	m := fullRound(t)
	if out := testutil.CollectAndCount(m.Registry(), "mcp_patch_step_duration_seconds"); out != len(round.WindowSteps) {
		t.Errorf("%d step histograms, want one per window step (%d)", out, len(round.WindowSteps))
	}
	want := `
# HELP mcp_patch_gate_checks_total Recorded gate checks of the open round by result (green, red, abandoned).
# TYPE mcp_patch_gate_checks_total counter
mcp_patch_gate_checks_total{result="green",round="2026-11"} 1
mcp_patch_gate_checks_total{result="red",round="2026-11"} 1
# HELP mcp_patch_rollbacks_total rollback_node runs of the open round by state (in_flight, done, failed).
# TYPE mcp_patch_rollbacks_total counter
mcp_patch_rollbacks_total{round="2026-11",state="done"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "mcp_patch_gate_checks_total", "mcp_patch_rollbacks_total"); err != nil {
		t.Error(err)
	}
	// gpu-a's drain took 90 minutes (the scripted clock), every other
	// finished step no time; verify on gpu-b failed and counts too.
	st := fullRoundState(t)
	var drain, verify *prometheusHistogram
	for _, mt := range stepDurations(st) {
		h := readHistogram(t, mt)
		switch h.step {
		case "drain":
			drain = &h
		case "verify":
			verify = &h
		}
	}
	if drain == nil || drain.count != 2 || drain.sum != 90*60 {
		t.Errorf("drain histogram %+v, want 2 attempts summing 5400 s", drain)
	}
	if verify == nil || verify.count != 2 {
		t.Errorf("verify histogram %+v, want 2 attempts (gpu-a done, gpu-b failed)", verify)
	}
}

func fullRoundState(t *testing.T) *round.State {
	j, _ := scriptedRound(t)
	return j.State()
}

type prometheusHistogram struct {
	step  string
	count uint64
	sum   float64
}

func readHistogram(t *testing.T, mt prometheus.Metric) prometheusHistogram {
	t.Helper()
	var pb dto.Metric
	if err := mt.Write(&pb); err != nil {
		t.Fatal(err)
	}
	h := prometheusHistogram{count: pb.GetHistogram().GetSampleCount(), sum: pb.GetHistogram().GetSampleSum()}
	for _, l := range pb.GetLabel() {
		if l.GetName() == "step" {
			h.step = l.GetValue()
		}
	}
	return h
}
