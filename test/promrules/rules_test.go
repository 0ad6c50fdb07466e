package promrules

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// rulesDir holds the example alert rules people load into Prometheus.
const rulesDir = "../../examples/alerts"

// check is what `promtool check rules FILE` does with its default lint:
// parse and validate the file with Prometheus' rule-file parser (YAML
// shape, PromQL of every expr, label and annotation templates, for and
// keep_firing_for durations), then refuse duplicate rules.
func check(path string) (int, []error) {
	p := parser.NewParser(parser.Options{})
	rgs, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, p, promslog.NewNopLogger())
	if len(errs) > 0 {
		return 0, errs
	}
	n := 0
	seen := map[string]bool{}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			n++
			name := r.Alert + r.Record
			keys := make([]string, 0, len(r.Labels))
			for k, v := range r.Labels {
				keys = append(keys, k+"="+v)
			}
			sort.Strings(keys)
			key := g.Name + "/" + name + "{" + strings.Join(keys, ",") + "}"
			if seen[key] {
				errs = append(errs, fmt.Errorf("duplicate rule %s", key))
			}
			seen[key] = true
		}
	}
	return n, errs
}

// TestExampleRules checks every rule file under examples/alerts as promtool
// would, and that each alert names a severity, says what it means and
// reads only mcp-patch's metrics.
func TestExampleRules(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(rulesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in %s: %v", rulesDir, err)
	}
	metric := regexp.MustCompile(`^mcp_patch_[a-z_]+$`)
	exported := loadExported(t)
	for _, f := range files {
		n, errs := check(f)
		for _, e := range errs {
			t.Errorf("%s: %v", f, e)
		}
		if n == 0 && len(errs) == 0 {
			t.Errorf("%s: no rules", f)
		}
		t.Logf("%s: %d rules", f, n)
		rgs, _ := rulefmt.ParseFile(f, false, model.UTF8Validation, parser.NewParser(parser.Options{}), promslog.NewNopLogger())
		if rgs == nil {
			continue
		}
		for _, g := range rgs.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: alert %s lacks a severity label, a summary or a description", f, r.Alert)
				}
				expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
				if err != nil {
					t.Errorf("%s: %s: %v", f, r.Alert, err)
					continue
				}
				parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
					if vs, ok := node.(*parser.VectorSelector); ok && !metric.MatchString(vs.Name) {
						t.Errorf("%s: alert %s reads %q, not one of mcp-patch's metrics", f, r.Alert, vs.Name)
					}
					return nil
				})
				for _, e := range checkQuery("alert "+r.Alert, r.Expr, exported) {
					t.Errorf("%s: %v", f, e)
				}
			}
		}
	}
}

// The check fails where promtool fails: bad PromQL, a bad duration, an
// unknown field, a duplicate rule.
func TestCheckRefusesBrokenRules(t *testing.T) {
	cases := map[string]string{
		"bad PromQL":     "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: max by (round (mcp_patch_round_stopped)\n",
		"bad duration":   "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: mcp_patch_round_stopped == 1\n    for: five minutes\n",
		"unknown field":  "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: mcp_patch_round_stopped == 1\n    severity: critical\n",
		"duplicate rule": "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: mcp_patch_round_stopped == 1\n  - alert: A\n    expr: mcp_patch_round_stopped == 1\n",
		"bad template":   "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: mcp_patch_round_stopped == 1\n    annotations:\n      summary: \"{{ $labels.node \"\n",
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, errs := check(f); len(errs) == 0 {
				t.Errorf("accepted:\n%s", text)
			}
		})
	}
}
