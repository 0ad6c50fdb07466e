// Package alerts reads the alerts firing in Prometheus (GET /api/v1/alerts)
// or Alertmanager (GET /api/v2/alerts) and judges them for the gate: red
// while an alert matching the intent's selector fires, except the alerts
// the window itself causes (its node down, an etcd member down while a
// control-plane node reboots), which are expected when they name the
// window's node and started inside the window. It can also put a silence on
// the window's node in Alertmanager and expire it after. Unreachable means
// "could not check", never green. It must not know about rounds, approvals
// or SSH; the judge is a pure function.
package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Alert is one alert as either API returns it.
type Alert struct {
	Labels map[string]string `json:"labels"`
	// State: Prometheus "firing" or "pending"; Alertmanager "active",
	// "suppressed" or "unprocessed".
	State string    `json:"state"`
	Since time.Time `json:"since"`
}

// Name is the alertname label.
func (a Alert) Name() string { return a.Labels["alertname"] }

func (a Alert) String() string {
	keys := make([]string, 0, len(a.Labels))
	for k := range a.Labels {
		if k != "alertname" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var kv []string
	for _, k := range keys {
		kv = append(kv, k+"="+a.Labels[k])
	}
	return fmt.Sprintf("%s{%s} since %s", a.Name(), strings.Join(kv, ","), a.Since.UTC().Format(time.RFC3339))
}

// Source is where alerts are read.
type Source struct {
	// PrometheusURL or AlertmanagerURL: the base URL (no /api path); one
	// of them.
	PrometheusURL   string
	AlertmanagerURL string
	// BearerToken, when set, is sent as Authorization: Bearer.
	BearerToken string
	Client      *http.Client
}

// ErrUnreachable marks a failure to read alerts at all.
var ErrUnreachable = errors.New("could not read alerts")

// Firing returns the alerts that fire now: Prometheus alerts in state
// firing (pending ones are not yet alerts), Alertmanager alerts that are
// active and neither silenced nor inhibited.
func (s Source) Firing(ctx context.Context) ([]Alert, error) {
	switch {
	case s.PrometheusURL != "" && s.AlertmanagerURL != "":
		return nil, errors.New("alerts: set a Prometheus or an Alertmanager URL, not both")
	case s.PrometheusURL != "":
		return s.prometheus(ctx)
	case s.AlertmanagerURL != "":
		return s.alertmanager(ctx)
	}
	return nil, errors.New("alerts: no Prometheus or Alertmanager URL configured")
}

func (s Source) get(ctx context.Context, base, path string, q url.Values, into any) error {
	u, err := url.Parse(strings.TrimRight(base, "/") + path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return s.do(req, http.StatusOK, into)
}

func (s Source) do(req *http.Request, want int, into any) error {
	req.Header.Set("Accept", "application/json")
	if s.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.BearerToken)
	}
	c := s.Client
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%w from %s: %v", ErrUnreachable, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%w from %s: %v", ErrUnreachable, req.URL.Redacted(), err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%w from %s: HTTP %d: %s", ErrUnreachable, req.URL.Redacted(), resp.StatusCode, oneLine(string(body), 200))
	}
	if into == nil {
		return nil
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("%w from %s: not the API's JSON: %v", ErrUnreachable, req.URL.Redacted(), err)
	}
	return nil
}

func (s Source) prometheus(ctx context.Context) ([]Alert, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Alerts []struct {
				Labels   map[string]string `json:"labels"`
				State    string            `json:"state"`
				ActiveAt *time.Time        `json:"activeAt"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := s.get(ctx, s.PrometheusURL, "/api/v1/alerts", nil, &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%w: Prometheus answered status %q: %s", ErrUnreachable, r.Status, r.Error)
	}
	var out []Alert
	for _, a := range r.Data.Alerts {
		if a.State != "firing" {
			continue
		}
		al := Alert{Labels: a.Labels, State: a.State}
		if a.ActiveAt != nil {
			al.Since = *a.ActiveAt
		}
		out = append(out, al)
	}
	return out, nil
}

func (s Source) alertmanager(ctx context.Context) ([]Alert, error) {
	var r []struct {
		Labels   map[string]string `json:"labels"`
		StartsAt time.Time         `json:"startsAt"`
		Status   struct {
			State       string   `json:"state"`
			SilencedBy  []string `json:"silencedBy"`
			InhibitedBy []string `json:"inhibitedBy"`
		} `json:"status"`
	}
	q := url.Values{"active": {"true"}, "silenced": {"false"}, "inhibited": {"false"}, "unprocessed": {"false"}}
	if err := s.get(ctx, s.AlertmanagerURL, "/api/v2/alerts", q, &r); err != nil {
		return nil, err
	}
	var out []Alert
	for _, a := range r {
		if a.Status.State != "active" || len(a.Status.SilencedBy) > 0 || len(a.Status.InhibitedBy) > 0 {
			continue
		}
		out = append(out, Alert{Labels: a.Labels, State: a.Status.State, Since: a.StartsAt})
	}
	return out, nil
}

// Expected is an alert a window causes by design.
type Expected struct {
	// Name matches the alertname (anchored).
	Name *regexp.Regexp
	// AnyNode: the alert names no node (etcdMembersDown); it is expected
	// during any window of a node with ControlPlaneOnly, or any window.
	AnyNode          bool
	ControlPlaneOnly bool
}

// Rules say which alerts count.
type Rules struct {
	// Selector picks the alerts that matter by their labels; nil or empty
	// means all.
	Selector labels.Selector
	// Allow: alert names that never block (anchored regexps).
	Allow []*regexp.Regexp
	// Deny: when set, only alert names matching one of these block.
	Deny []*regexp.Regexp
	// Expected are the alerts a window causes.
	Expected []Expected
	// NodeLabels are the labels that may name a node (node, instance,
	// ...); an instance "host:port" names host. Default: node, instance,
	// nodename, kubernetes_node, hostname.
	NodeLabels []string
}

// Window is the node window the gate runs in; zero when none is open.
type Window struct {
	Node         string
	ControlPlane bool
	Opened       time.Time
}

// Verdict is the judge's answer.
type Verdict struct {
	OK       bool
	Blocking []string // alerts that keep the gate red
	Expected []string // alerts the window caused, not blocking
	Ignored  []string // allowed by the rules or outside the selector
}

// DefaultNodeLabels name a node in common exporters' alerts.
var DefaultNodeLabels = []string{"node", "instance", "nodename", "kubernetes_node", "hostname"}

// Judge decides from the firing alerts (pure).
func Judge(firing []Alert, r Rules, w Window) Verdict {
	v := Verdict{OK: true}
	nodeLabels := r.NodeLabels
	if len(nodeLabels) == 0 {
		nodeLabels = DefaultNodeLabels
	}
	for _, a := range firing {
		switch {
		case r.Selector != nil && !r.Selector.Empty() && !r.Selector.Matches(labels.Set(a.Labels)):
			v.Ignored = append(v.Ignored, a.String()+" (outside the selector)")
		case anyMatch(r.Allow, a.Name()):
			v.Ignored = append(v.Ignored, a.String()+" (allowed)")
		case len(r.Deny) > 0 && !anyMatch(r.Deny, a.Name()):
			v.Ignored = append(v.Ignored, a.String()+" (not in deny)")
		case expected(a, r.Expected, w, nodeLabels):
			v.Expected = append(v.Expected, a.String()+" (caused by the window of "+w.Node+")")
		default:
			v.OK = false
			v.Blocking = append(v.Blocking, a.String())
		}
	}
	return v
}

func expected(a Alert, exp []Expected, w Window, nodeLabels []string) bool {
	if w.Node == "" || a.Since.Before(w.Opened) {
		return false // no window, or the alert fired before it: not ours
	}
	for _, e := range exp {
		if e.Name == nil || !e.Name.MatchString(a.Name()) {
			continue
		}
		if e.ControlPlaneOnly && !w.ControlPlane {
			continue
		}
		if e.AnyNode || namesNode(a, w.Node, nodeLabels) {
			return true
		}
	}
	return false
}

func namesNode(a Alert, node string, nodeLabels []string) bool {
	for _, l := range nodeLabels {
		v := a.Labels[l]
		if v == "" {
			continue
		}
		if i := strings.LastIndexByte(v, ':'); i > 0 && !strings.Contains(v[i+1:], "]") {
			v = v[:i] // instance host:port
		}
		v = strings.Trim(v, "[]")
		if v == node || strings.HasPrefix(v, node+".") {
			return true
		}
	}
	return false
}

func anyMatch(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// Anchored compiles an alertname pattern matching the whole name.
func Anchored(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + pattern + `)$`)
}

// DefaultExpected are the alerts a node window causes with the common
// kube-prometheus rules: the node and its kubelet down while it reboots,
// an etcd member down while a control-plane node reboots.
func DefaultExpected() []Expected {
	must := func(p string) *regexp.Regexp { return regexp.MustCompile(`^(?:` + p + `)$`) }
	return []Expected{
		{Name: must(`KubeNodeNotReady|KubeNodeUnreachable|KubeletDown|NodeDown|TargetDown|KubeNodeReadinessFlapping`)},
		{Name: must(`etcdMembersDown|etcdInsufficientMembers`), AnyNode: true, ControlPlaneOnly: true},
	}
}

// Silence is a silence this window put in Alertmanager.
type Silence struct {
	ID string `json:"silenceID"`
}

// SilenceNode silences the alerts naming node (label nodeLabel) from now
// until ends, in Alertmanager (POST /api/v2/silences).
func (s Source) SilenceNode(ctx context.Context, nodeLabel, node, comment string, now, ends time.Time) (Silence, error) {
	if s.AlertmanagerURL == "" {
		return Silence{}, errors.New("silence: no Alertmanager URL configured")
	}
	body, err := json.Marshal(map[string]any{
		"matchers":  []map[string]any{{"name": nodeLabel, "value": node, "isRegex": false, "isEqual": true}},
		"startsAt":  now.UTC().Format(time.RFC3339Nano),
		"endsAt":    ends.UTC().Format(time.RFC3339Nano),
		"createdBy": createdBy,
		"comment":   comment,
	})
	if err != nil {
		return Silence{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(s.AlertmanagerURL, "/")+"/api/v2/silences", bytes.NewReader(body))
	if err != nil {
		return Silence{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	var out Silence
	if err := s.do(req, http.StatusOK, &out); err != nil {
		return Silence{}, fmt.Errorf("silence alerts of node %s: %w", node, err)
	}
	if out.ID == "" {
		return Silence{}, fmt.Errorf("silence alerts of node %s: Alertmanager returned no silence id", node)
	}
	return out, nil
}

// SilenceEntry is a silence as Alertmanager lists it.
type SilenceEntry struct {
	ID        string `json:"id"`
	CreatedBy string `json:"createdBy"`
	Comment   string `json:"comment"`
	Status    struct {
		State string `json:"state"` // active, pending, expired
	} `json:"status"`
}

// Silences lists Alertmanager's silences (GET /api/v2/silences).
func (s Source) Silences(ctx context.Context) ([]SilenceEntry, error) {
	if s.AlertmanagerURL == "" {
		return nil, errors.New("list silences: no Alertmanager URL configured")
	}
	var out []SilenceEntry
	if err := s.get(ctx, s.AlertmanagerURL, "/api/v2/silences", nil, &out); err != nil {
		return nil, fmt.Errorf("list silences: %w", err)
	}
	return out, nil
}

// Ours picks the ids of the silences mcp-patch put with comment that
// have not ended (active or pending). Pure.
func Ours(list []SilenceEntry, comment string) []string {
	var ids []string
	for _, e := range list {
		if e.CreatedBy == createdBy && e.Comment == comment && (e.Status.State == "active" || e.Status.State == "pending") && e.ID != "" {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// createdBy names mcp-patch in the silences it puts.
const createdBy = "mcp-patch"

// Expire ends a silence (DELETE /api/v2/silence/{id}).
func (s Source) Expire(ctx context.Context, id string) error {
	if s.AlertmanagerURL == "" {
		return errors.New("expire silence: no Alertmanager URL configured")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, strings.TrimRight(s.AlertmanagerURL, "/")+"/api/v2/silence/"+url.PathEscape(id), nil)
	if err != nil {
		return err
	}
	if err := s.do(req, http.StatusOK, nil); err != nil {
		return fmt.Errorf("expire silence %s: %w", id, err)
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Rule is one alerting rule as Prometheus lists it: its alertname and the
// labels it sets on every alert (the series may add more).
type Rule struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// AlertingRules lists Prometheus' alerting rules (GET
// /api/v1/rules?type=alert). Alertmanager has no rules: asked of an
// Alertmanager source it is an error.
func (s Source) AlertingRules(ctx context.Context) ([]Rule, error) {
	if s.PrometheusURL == "" {
		return nil, errors.New("alerting rules: only Prometheus has them (no kube.prometheus_url)")
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Groups []struct {
				Rules []struct {
					Name   string            `json:"name"`
					Type   string            `json:"type"`
					Labels map[string]string `json:"labels"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := s.get(ctx, s.PrometheusURL, "/api/v1/rules", url.Values{"type": {"alert"}}, &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%w: Prometheus answered status %q: %s", ErrUnreachable, r.Status, r.Error)
	}
	var out []Rule
	for _, g := range r.Data.Groups {
		for _, rl := range g.Rules {
			if rl.Type == "alerting" || rl.Type == "" {
				out = append(out, Rule{Name: rl.Name, Labels: rl.Labels})
			}
		}
	}
	return out, nil
}

// MayMatch says whether alerts of rule r can match sel. A requirement on
// alertname or on a label the rule sets is decided by the rule (the rule's
// labels win over the series'); one on any other label may be met by the
// series, so it does not rule r out. Pure.
func MayMatch(r Rule, sel labels.Selector) bool {
	if sel == nil || sel.Empty() {
		return true
	}
	reqs, _ := sel.Requirements()
	for _, q := range reqs {
		k := q.Key()
		v, known := r.Labels[k]
		if k == "alertname" {
			v, known = r.Name, true
		}
		if known && !q.Matches(labels.Set{k: v}) {
			return false
		}
	}
	return true
}

// SelectorRisk is what a plan or a gate says of alerts.selector when it
// can select nothing, or when that cannot be known: "" when some alerting
// rule may match it (or no selector is set). rules and err are
// AlertingRules' answer (unused for Alertmanager). Pure.
func SelectorRisk(sel labels.Selector, src Source, rules []Rule, err error) string {
	if sel == nil || sel.Empty() {
		return ""
	}
	text := sel.String()
	switch {
	case src.PrometheusURL == "":
		return fmt.Sprintf("alerts.selector %s cannot be checked against alerting rules: Alertmanager knows only the alerts firing now (set kube.prometheus_url to check it)", text)
	case err != nil:
		return fmt.Sprintf("alerts.selector %s could not be checked against Prometheus' alerting rules: %v", text, err)
	}
	for _, r := range rules {
		if MayMatch(r, sel) {
			return ""
		}
	}
	return fmt.Sprintf("alerts.selector %s matches no alerting rule in Prometheus (%d rules): the alert check can never turn red", text, len(rules))
}
