package gate

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/kube/alerts"
)

func TestCheckAlerts(t *testing.T) {
	body := `{"status":"success","data":{"alerts":[
 {"labels":{"alertname":"KubeNodeNotReady","node":"gpu-03","severity":"warning"},"annotations":{},"state":"firing","activeAt":"2026-11-03T22:10:00Z","value":"1e+00"},
 {"labels":{"alertname":"NodeFilesystemAlmostOutOfSpace","instance":"gpu-07:9100","severity":"critical"},"annotations":{},"state":"firing","activeAt":"2026-11-03T22:20:00Z","value":"1e+00"}]}}`
	var serve string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, serve) }))
	defer srv.Close()
	w := alerts.Window{Node: "gpu-03", Opened: time.Date(2026, 11, 3, 22, 0, 0, 0, time.UTC)}
	cfg := AlertsConfig{Source: alerts.Source{PrometheusURL: srv.URL}, Rules: alerts.Rules{Expected: alerts.DefaultExpected()}, Window: w}

	serve = body
	c := CheckAlerts(t.Context(), cfg)
	if c.OK || c.Name != NameAlerts || !strings.Contains(c.Reason, "NodeFilesystemAlmostOutOfSpace") || strings.Contains(c.Reason, "KubeNodeNotReady") {
		t.Fatalf("a disk alert on another node must keep the gate red, the window's own node-down must not: %+v", c)
	}
	serve = strings.Replace(body, `"state":"firing","activeAt":"2026-11-03T22:20:00Z"`, `"state":"pending","activeAt":"2026-11-03T22:20:00Z"`, 1)
	if c := CheckAlerts(t.Context(), cfg); !c.OK || len(c.Warnings) != 1 {
		t.Fatalf("only the expected alert fires: %+v", c)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg.Source = alerts.Source{AlertmanagerURL: "http://" + addr}
	if c := CheckAlerts(t.Context(), cfg); c.OK || !strings.HasPrefix(c.Reason, "could not check: could not read alerts") {
		t.Fatalf("Alertmanager unreachable: %+v", c)
	}
}

// A green alert check whose selector no alerting rule of Prometheus can
// match says so (it could never turn red); one that a rule may match, or
// no selector, says nothing more.
func TestCheckAlertsSelectorThatMatchesNoRule(t *testing.T) {
	rules := `{"status":"success","data":{"groups":[{"name":"node","rules":[
 {"name":"KubeNodeNotReady","labels":{"severity":"warning"},"type":"alerting","health":"ok","state":"inactive","alerts":[]}]}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/alerts":
			io.WriteString(w, `{"status":"success","data":{"alerts":[]}}`)
		case "/api/v1/rules":
			io.WriteString(w, rules)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, c := range []struct {
		sel, warn string
	}{
		{"", ""},
		{"severity=warning", ""},
		{"severity=critical", "alerts.selector severity=critical matches no alerting rule in Prometheus (1 rules): the alert check can never turn red"},
	} {
		sel, err := labels.Parse(c.sel)
		if err != nil {
			t.Fatal(err)
		}
		got := CheckAlerts(t.Context(), AlertsConfig{Source: alerts.Source{PrometheusURL: srv.URL}, Rules: alerts.Rules{Selector: sel}})
		if !got.OK || strings.Join(got.Warnings, "|") != c.warn {
			t.Errorf("selector %q: ok %v warnings %q, want %q", c.sel, got.OK, got.Warnings, c.warn)
		}
	}
}
