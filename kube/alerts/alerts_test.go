package alerts

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
)

// Bodies in the APIs' own shapes: Prometheus GET /api/v1/alerts (the HTTP
// API docs' example, extended) and Alertmanager's OpenAPI gettableAlerts.
const promAlerts = `{
  "status": "success",
  "data": {
    "alerts": [
      {"labels": {"alertname": "KubeNodeNotReady", "node": "gpu-03", "severity": "warning"},
       "annotations": {"summary": "gpu-03 is not ready"}, "state": "firing",
       "activeAt": "2026-11-03T22:10:00.123456789Z", "value": "1e+00"},
      {"labels": {"alertname": "HighErrorRate", "instance": "api.example:443", "severity": "critical"},
       "annotations": {}, "state": "firing", "activeAt": "2026-11-03T22:20:00Z", "value": "3.2e-01"},
      {"labels": {"alertname": "DiskFilling", "instance": "gpu-07:9100", "severity": "warning"},
       "annotations": {}, "state": "pending", "activeAt": "2026-11-03T22:25:00Z", "value": "9.1e-01"},
      {"labels": {"alertname": "Watchdog", "severity": "none"},
       "annotations": {}, "state": "firing", "activeAt": "2026-11-01T00:00:00Z", "value": "1e+00"}
    ]
  }
}`

const amAlerts = `[
  {"annotations": {"summary": "etcd cluster members are down"}, "endsAt": "2026-11-03T22:40:00.000Z",
   "fingerprint": "1a2b3c", "receivers": [{"name": "ops"}], "startsAt": "2026-11-03T22:12:00.000Z",
   "status": {"inhibitedBy": [], "silencedBy": [], "state": "active"}, "updatedAt": "2026-11-03T22:30:00.000Z",
   "generatorURL": "http://prometheus/graph", "labels": {"alertname": "etcdMembersDown", "job": "etcd", "severity": "critical"}},
  {"annotations": {}, "endsAt": "2026-11-03T22:40:00.000Z", "fingerprint": "4d5e6f", "receivers": [{"name": "ops"}],
   "startsAt": "2026-11-03T22:13:00.000Z", "status": {"inhibitedBy": [], "silencedBy": ["8c0f"], "state": "suppressed"},
   "updatedAt": "2026-11-03T22:30:00.000Z", "labels": {"alertname": "KubeNodeNotReady", "node": "cp-2", "severity": "warning"}},
  {"annotations": {}, "endsAt": "2026-11-03T22:40:00.000Z", "fingerprint": "7a8b9c", "receivers": [{"name": "ops"}],
   "startsAt": "2026-11-02T09:00:00.000Z", "status": {"inhibitedBy": [], "silencedBy": [], "state": "active"},
   "updatedAt": "2026-11-03T22:30:00.000Z", "labels": {"alertname": "PostgresReplicationLag", "namespace": "databases", "severity": "critical"}}
]`

// promRules is Prometheus GET /api/v1/rules?type=alert in the HTTP API
// docs' shape: an alerting rule with labels, one without, in two groups.
const promRules = `{
  "status": "success",
  "data": {
    "groups": [
      {"name": "node", "file": "/etc/prometheus/rules/node.yaml", "interval": 60, "rules": [
        {"name": "KubeNodeNotReady", "query": "kube_node_status_condition{condition=\"Ready\",status=\"true\"} == 0",
         "duration": 900, "labels": {"severity": "warning"}, "annotations": {"summary": "node not ready"},
         "alerts": [], "health": "ok", "type": "alerting", "state": "inactive"}]},
      {"name": "db", "file": "/etc/prometheus/rules/db.yaml", "interval": 60, "rules": [
        {"name": "PostgresReplicationLag", "query": "pg_replication_lag_seconds > 30", "duration": 300,
         "labels": {"severity": "critical", "team": "databases"}, "annotations": {}, "alerts": [], "health": "ok", "type": "alerting", "state": "inactive"},
        {"name": "Watchdog", "query": "vector(1)", "duration": 0, "annotations": {}, "alerts": [], "health": "ok", "type": "alerting", "state": "firing"}]}
    ]
  }
}`

// fakeAPI answers like Prometheus and Alertmanager and remembers silences.
type fakeAPI struct {
	mu       sync.Mutex
	queries  []string
	silences map[string]map[string]any
	expired  []string
}

func (f *fakeAPI) handler(t *testing.T) http.Handler {
	f.silences = map[string]map[string]any{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/alerts", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, promAlerts)
	})
	mux.HandleFunc("GET /api/v1/rules", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("type") != "alert" {
			http.Error(w, "want type=alert", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, promRules)
	})
	mux.HandleFunc("GET /api/v2/alerts", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.RawQuery)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, amAlerts)
	})
	mux.HandleFunc("POST /api/v2/silences", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		id := "5f0e-" + string(rune('a'+len(f.silences)))
		f.silences[id] = body
		f.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]string{"silenceID": id})
	})
	mux.HandleFunc("DELETE /api/v2/silence/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.silences[r.PathValue("id")]; !ok {
			http.Error(w, "silence not found", http.StatusNotFound)
			return
		}
		f.expired = append(f.expired, r.PathValue("id"))
	})
	return mux
}

func TestFiringFromPrometheus(t *testing.T) {
	f := &fakeAPI{}
	srv := httptest.NewServer(f.handler(t))
	defer srv.Close()
	got, err := Source{PrometheusURL: srv.URL + "/"}.Firing(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range got {
		names = append(names, a.Name())
	}
	// The pending DiskFilling is not an alert yet.
	if diff := cmp.Diff([]string{"KubeNodeNotReady", "HighErrorRate", "Watchdog"}, names); diff != "" {
		t.Errorf("firing (-want +got):\n%s", diff)
	}
	if want := time.Date(2026, 11, 3, 22, 10, 0, 123456789, time.UTC); !got[0].Since.Equal(want) {
		t.Errorf("since %s", got[0].Since)
	}
}

func TestFiringFromAlertmanager(t *testing.T) {
	f := &fakeAPI{}
	srv := httptest.NewServer(f.handler(t))
	defer srv.Close()
	got, err := Source{AlertmanagerURL: srv.URL}.Firing(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name() != "etcdMembersDown" || got[1].Name() != "PostgresReplicationLag" {
		t.Fatalf("firing %v (a silenced alert must not count)", got)
	}
	if q := f.queries[0]; !strings.Contains(q, "silenced=false") || !strings.Contains(q, "inhibited=false") || !strings.Contains(q, "active=true") {
		t.Errorf("query %q", q)
	}
}

func TestUnreachableIsCouldNotCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1") {
			io.WriteString(w, `{"status":"error","errorType":"internal","error":"rule manager not ready"}`)
			return
		}
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	defer broken.Close()
	for name, s := range map[string]Source{
		"alertmanager down":  {AlertmanagerURL: "http://" + addr},
		"prometheus error":   {PrometheusURL: broken.URL},
		"alertmanager 502":   {AlertmanagerURL: broken.URL},
		"not the API (html)": {PrometheusURL: "http://" + addr},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Firing(t.Context()); err == nil || !strings.Contains(err.Error(), "could not read alerts") {
				t.Fatalf("err = %v", err)
			}
		})
	}
	if _, err := (Source{}).Firing(t.Context()); err == nil {
		t.Fatal("no URL read alerts")
	}
}

func TestJudge(t *testing.T) {
	opened := time.Date(2026, 11, 3, 22, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return opened.Add(time.Duration(m) * time.Minute) }
	nodeDown := Alert{Labels: map[string]string{"alertname": "KubeNodeNotReady", "node": "gpu-03", "severity": "warning"}, Since: at(10)}
	otherNode := Alert{Labels: map[string]string{"alertname": "KubeNodeNotReady", "node": "gpu-04", "severity": "warning"}, Since: at(10)}
	before := Alert{Labels: map[string]string{"alertname": "KubeNodeNotReady", "node": "gpu-03", "severity": "warning"}, Since: at(-30)}
	byInstance := Alert{Labels: map[string]string{"alertname": "TargetDown", "instance": "gpu-03.dc1.example:9100", "severity": "warning"}, Since: at(5)}
	etcd := Alert{Labels: map[string]string{"alertname": "etcdMembersDown", "job": "etcd", "severity": "critical"}, Since: at(3)}
	lag := Alert{Labels: map[string]string{"alertname": "PostgresReplicationLag", "severity": "critical"}, Since: at(1)}
	watchdog := Alert{Labels: map[string]string{"alertname": "Watchdog", "severity": "none"}, Since: at(-9000)}
	sel, err := labels.Parse("severity in (critical,warning)")
	if err != nil {
		t.Fatal(err)
	}
	rules := Rules{Selector: sel, Expected: DefaultExpected()}
	gpu := Window{Node: "gpu-03", Opened: opened}
	cp := Window{Node: "cp-2", ControlPlane: true, Opened: opened}
	for _, tc := range []struct {
		name     string
		firing   []Alert
		rules    Rules
		w        Window
		ok       bool
		blocking int
		expected int
	}{
		{"nothing fires", nil, rules, gpu, true, 0, 0},
		{"the window's own node down is expected", []Alert{nodeDown, byInstance}, rules, gpu, true, 0, 2},
		{"another node down blocks", []Alert{otherNode}, rules, gpu, false, 1, 0},
		{"fired before the window: not ours", []Alert{before}, rules, gpu, false, 1, 0},
		{"no window open: node down blocks", []Alert{nodeDown}, rules, Window{}, false, 1, 0},
		{"etcd member down during a control-plane window", []Alert{etcd}, rules, cp, true, 0, 1},
		{"etcd member down during a GPU window blocks", []Alert{etcd}, rules, gpu, false, 1, 0},
		{"an unrelated critical alert blocks", []Alert{lag, nodeDown}, rules, gpu, false, 1, 1},
		{"outside the selector", []Alert{watchdog}, rules, gpu, true, 0, 0},
		{"allowed by name", []Alert{lag}, Rules{Allow: []*regexp.Regexp{regexp.MustCompile(`^Postgres.*$`)}}, gpu, true, 0, 0},
		{"deny list: only named alerts block", []Alert{lag, otherNode}, Rules{Deny: []*regexp.Regexp{regexp.MustCompile(`^KubeNode.*$`)}}, gpu, false, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.firing, tc.rules, tc.w)
			if v.OK != tc.ok || len(v.Blocking) != tc.blocking || len(v.Expected) != tc.expected {
				t.Fatalf("verdict %+v", v)
			}
		})
	}
}

func TestSilenceAndExpire(t *testing.T) {
	f := &fakeAPI{}
	srv := httptest.NewServer(f.handler(t))
	defer srv.Close()
	s := Source{AlertmanagerURL: srv.URL}
	now := time.Date(2026, 11, 3, 22, 0, 0, 0, time.UTC)
	sil, err := s.SilenceNode(t.Context(), "node", "gpu-03", "mcp-patch round 2026-11: window of gpu-03", now, now.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	body := f.silences[sil.ID]
	want := map[string]any{"matchers": []any{map[string]any{"name": "node", "value": "gpu-03", "isRegex": false, "isEqual": true}},
		"startsAt": "2026-11-03T22:00:00Z", "endsAt": "2026-11-04T01:00:00Z", "createdBy": "mcp-patch",
		"comment": "mcp-patch round 2026-11: window of gpu-03"}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("silence body (-want +got):\n%s", diff)
	}
	if err := s.Expire(t.Context(), sil.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Expire(t.Context(), "nope"); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("expire unknown: %v", err)
	}
	if diff := cmp.Diff([]string{sil.ID}, f.expired); diff != "" {
		t.Error(diff)
	}
}

func TestOursPicksTheWindowsLiveSilences(t *testing.T) {
	entry := func(id, by, comment, state string) SilenceEntry {
		e := SilenceEntry{ID: id, CreatedBy: by, Comment: comment}
		e.Status.State = state
		return e
	}
	const c = "mcp-patch round 2026-11: window of gpu-03"
	list := []SilenceEntry{
		entry("a", "mcp-patch", c, "active"),
		entry("b", "mcp-patch", c, "pending"),
		entry("c", "mcp-patch", c, "expired"),
		entry("d", "alice", c, "active"),
		entry("e", "mcp-patch", "mcp-patch round 2026-11: window of gpu-04", "active"),
		entry("", "mcp-patch", c, "active"),
	}
	if got := Ours(list, c); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Ours = %v, want [a b]", got)
	}
	if got := Ours(nil, c); len(got) != 0 {
		t.Errorf("Ours of none = %v", got)
	}
}

func TestAlertingRulesFromPrometheus(t *testing.T) {
	srv := httptest.NewServer((&fakeAPI{}).handler(t))
	defer srv.Close()
	got, err := Source{PrometheusURL: srv.URL}.AlertingRules(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{{Name: "KubeNodeNotReady", Labels: map[string]string{"severity": "warning"}},
		{Name: "PostgresReplicationLag", Labels: map[string]string{"severity": "critical", "team": "databases"}}, {Name: "Watchdog"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if _, err := (Source{AlertmanagerURL: srv.URL}).AlertingRules(t.Context()); err == nil || !strings.Contains(err.Error(), "only Prometheus") {
		t.Errorf("rules of an Alertmanager: %v", err)
	}
	if _, err := (Source{PrometheusURL: "http://127.0.0.1:1"}).AlertingRules(t.Context()); err == nil || !strings.Contains(err.Error(), "could not read alerts") {
		t.Errorf("rules of an unreachable Prometheus: %v", err)
	}
}

func TestMayMatch(t *testing.T) {
	lag := Rule{Name: "PostgresReplicationLag", Labels: map[string]string{"severity": "critical", "team": "databases"}}
	for _, c := range []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"severity=critical", true},
		{"severity=warning", false},
		{"severity in (critical,warning)", true},
		{"severity notin (critical)", false},
		{"severity!=critical", false},
		{"alertname=PostgresReplicationLag", true},
		{"alertname=KubeNodeNotReady", false},
		{"alertname!=PostgresReplicationLag", false},
		{"namespace=databases", true}, // the series may carry it
		{"namespace", true},           // the series may carry it
		{"!severity", false},          // the rule sets it
		{"!namespace", true},          // absent unless the series has it
		{"team=databases,severity=critical", true},
		{"team=databases,severity=warning", false},
	} {
		sel, err := labels.Parse(c.sel)
		if err != nil {
			t.Fatal(err)
		}
		if got := MayMatch(lag, sel); got != c.want {
			t.Errorf("MayMatch(%q) = %v, want %v", c.sel, got, c.want)
		}
	}
}

func TestSelectorRisk(t *testing.T) {
	prom := Source{PrometheusURL: "http://prometheus:9090"}
	rules := []Rule{{Name: "KubeNodeNotReady", Labels: map[string]string{"severity": "warning"}}, {Name: "Watchdog"}}
	for _, c := range []struct {
		name, sel string
		src       Source
		rules     []Rule
		err       error
		want      string
	}{
		{"no selector", "", prom, nil, nil, ""},
		{"a rule may match", "severity=warning", prom, rules, nil, ""},
		{"no rule matches", "severity=critical,alertname!=Watchdog", prom, rules, nil,
			"alerts.selector alertname!=Watchdog,severity=critical matches no alerting rule in Prometheus (2 rules): the alert check can never turn red"},
		{"no rules at all", "severity=critical", prom, nil, nil,
			"alerts.selector severity=critical matches no alerting rule in Prometheus (0 rules): the alert check can never turn red"},
		{"rules unreadable", "severity=critical", prom, nil, errors.New("could not read alerts from http://prometheus:9090: connection refused"),
			"alerts.selector severity=critical could not be checked against Prometheus' alerting rules: could not read alerts from http://prometheus:9090: connection refused"},
		{"Alertmanager", "severity=critical", Source{AlertmanagerURL: "http://am:9093"}, nil, nil,
			"alerts.selector severity=critical cannot be checked against alerting rules: Alertmanager knows only the alerts firing now (set kube.prometheus_url to check it)"},
		{"Alertmanager, no selector", "", Source{AlertmanagerURL: "http://am:9093"}, nil, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sel, err := labels.Parse(c.sel)
			if err != nil {
				t.Fatal(err)
			}
			if got := SelectorRisk(sel, c.src, c.rules, c.err); got != c.want {
				t.Errorf("SelectorRisk = %q\nwant %q", got, c.want)
			}
		})
	}
}
