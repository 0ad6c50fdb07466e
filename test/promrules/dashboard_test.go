package promrules

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// dashboardDir holds the Grafana dashboards people import.
const dashboardDir = "../../deploy/grafana"

// exportedFile lists what mcp-patch's /metrics exports; the metrics package
// writes it (go test ./metrics -run TestExportedIsGathered -update) and
// holds it to a real scrape.
const exportedFile = "../../metrics/testdata/exported.txt"

// series is what a query may name: every series name and its labels (a
// histogram's _bucket, _sum and _count; _bucket adds le).
func loadExported(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(exportedFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("%s: bad line %q", exportedFile, line)
		}
		ls := []string{}
		if f[2] != "-" {
			ls = strings.Split(f[2], ",")
		}
		if f[1] == "histogram" {
			out[f[0]+"_bucket"] = append(slices.Clone(ls), "le")
			out[f[0]+"_sum"], out[f[0]+"_count"] = ls, ls
			continue
		}
		out[f[0]] = ls
	}
	if len(out) < 10 {
		t.Fatalf("%s: %d series names", exportedFile, len(out))
	}
	return out
}

// grafanaVars stand in for what Grafana substitutes before it sends a
// query, so the query parses as Prometheus will receive it.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1d", "${round}", "2026-11", "$round", "2026-11")

// panel is the part of a Grafana panel the check reads.
type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

// checkDashboard returns what is wrong with one dashboard: a panel
// without a query, a query that does not parse as PromQL, a metric the
// server does not export, a label it does not set, a datasource other
// than the dashboard's variable, a panel id used twice.
func checkDashboard(b []byte, exported map[string][]string) (queries int, errs []error) {
	var d struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return 0, []error{err}
	}
	if d.UID == "" || d.Title == "" {
		errs = append(errs, fmt.Errorf("dashboard without uid or title"))
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	if !vars["datasource"] || !vars["round"] {
		errs = append(errs, fmt.Errorf("templating lacks the datasource or round variable"))
	}
	ids := map[int]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, ok := ids[p.ID]; ok {
				errs = append(errs, fmt.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title))
			}
			ids[p.ID] = p.Title
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Errorf("panel %q has no query", p.Title))
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				errs = append(errs, fmt.Errorf("panel %q does not read the ${datasource} variable", p.Title))
			}
			for _, q := range p.Targets {
				queries++
				errs = append(errs, checkQuery(p.Title+"/"+q.RefID, q.Expr, exported)...)
			}
		}
	}
	walk(d.Panels)
	return queries, errs
}

func checkQuery(where, expr string, exported map[string][]string) []error {
	if strings.TrimSpace(expr) == "" {
		return []error{fmt.Errorf("%s: empty query", where)}
	}
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return []error{fmt.Errorf("%s: %q: %w", where, expr, err)}
	}
	var errs []error
	selectors := 0
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		selectors++
		known, ok := exported[vs.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %q reads %q, which mcp-patch does not export", where, expr, vs.Name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName && !slices.Contains(known, m.Name) {
				errs = append(errs, fmt.Errorf("%s: %q matches label %q, which %s does not carry", where, expr, m.Name, vs.Name))
			}
		}
		return nil
	})
	if selectors == 0 {
		errs = append(errs, fmt.Errorf("%s: %q reads no metric", where, expr))
	}
	return errs
}

// TestDashboards: every panel of every dashboard under deploy/grafana has
// queries that parse as PromQL and read only what mcp-patch exports.
func TestDashboards(t *testing.T) {
	exported := loadExported(t)
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", dashboardDir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n, errs := checkDashboard(b, exported)
		for _, e := range errs {
			t.Errorf("%s: %v", f, e)
		}
		if n < 10 {
			t.Errorf("%s: %d queries", f, n)
		}
		t.Logf("%s: %d queries", f, n)
	}
}

// The check fails on each kind of mistake.
func TestCheckRefusesBrokenDashboards(t *testing.T) {
	exported := loadExported(t)
	wrap := func(expr string) string {
		b, _ := json.Marshal(expr)
		return `{"uid":"u","title":"t","templating":{"list":[{"name":"datasource"},{"name":"round"}]},"panels":[` +
			`{"id":1,"type":"stat","title":"p","datasource":{"uid":"${datasource}"},"targets":[{"refId":"A","expr":` + string(b) + `}]}]}`
	}
	cases := map[string]string{
		"bad PromQL":       wrap(`sum by (step (mcp_patch_step_failures_total)`),
		"unknown metric":   wrap(`sum(mcp_patch_nodes_total)`),
		"unknown label":    wrap(`sum(mcp_patch_node_window{phase="x"})`),
		"le on a counter":  wrap(`sum(mcp_patch_step_failures_total{le="1"})`),
		"no metric":        wrap(`vector(1)`),
		"no query":         `{"uid":"u","title":"t","templating":{"list":[{"name":"datasource"},{"name":"round"}]},"panels":[{"id":1,"type":"stat","title":"p","datasource":{"uid":"${datasource}"}}]}`,
		"fixed datasource": strings.Replace(wrap(`max(mcp_patch_approvals_pending)`), "${datasource}", "prom-1", 1),
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			if _, errs := checkDashboard([]byte(text), exported); len(errs) == 0 {
				t.Errorf("accepted:\n%s", text)
			}
		})
	}
	if _, errs := checkDashboard([]byte(wrap(`histogram_quantile(0.9, sum by (le, step) (mcp_patch_step_duration_seconds_bucket{round=~"$round"}))`)), exported); len(errs) != 0 {
		t.Errorf("refused a good query: %v", errs)
	}
}
