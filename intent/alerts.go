package intent

import (
	"fmt"
	"regexp"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/kube/alerts"
)

// AlertSettings: which firing alerts keep the gate red (os-layer). The
// Prometheus or Alertmanager URL is in the server's config
// (kube.prometheus_url or kube.alertmanager_url); without one the alert
// check is not made.
type AlertSettings struct {
	// Selector is a label selector over alert labels ("severity in
	// (critical,warning)"); empty: every alert counts.
	Selector string `json:"selector,omitempty"`
	// Allow are alertname regexps that never block (Watchdog, InfoInhibitor).
	Allow []string `json:"allow,omitempty"`
	// Deny, when set, limits blocking alerts to names matching one of them.
	Deny []string `json:"deny,omitempty"`
	// Expected are the alerts a node window causes (its node down, an etcd
	// member down during a control-plane reboot); empty: the common
	// kube-prometheus ones.
	Expected []ExpectedAlert `json:"expected,omitempty"`
	// NodeLabels name the alert labels that carry a node name; empty: node,
	// instance, nodename, kubernetes_node, hostname.
	NodeLabels []string `json:"node_labels,omitempty"`
	// SilenceNode puts an Alertmanager silence on the window's node
	// (matcher NodeLabels[0] or "node") from drain until its window closes.
	SilenceNode bool `json:"silence_node,omitempty"`
}

// ExpectedAlert is one alert a window causes by design.
type ExpectedAlert struct {
	Alertname string `json:"alertname"`
	// AnyNode: the alert names no node; ControlPlaneOnly: only during the
	// window of a control-plane node.
	AnyNode          bool `json:"any_node,omitempty"`
	ControlPlaneOnly bool `json:"control_plane_only,omitempty"`
}

// Rules compiles the settings (validated when parsed). Nil settings are
// the defaults: every alert counts, the common expected ones excepted.
func (a *AlertSettings) Rules() (alerts.Rules, error) {
	r := alerts.Rules{Expected: alerts.DefaultExpected()}
	if a == nil {
		return r, nil
	}
	var err error
	if a.Selector != "" {
		if r.Selector, err = labels.Parse(a.Selector); err != nil {
			return r, fmt.Errorf("alerts.selector: %w", err)
		}
	}
	compile := func(field string, ps []string) ([]*regexp.Regexp, error) {
		var out []*regexp.Regexp
		for _, p := range ps {
			re, err := alerts.Anchored(p)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a regular expression: %w", field, p, err)
			}
			out = append(out, re)
		}
		return out, nil
	}
	if r.Allow, err = compile("alerts.allow", a.Allow); err != nil {
		return r, err
	}
	if r.Deny, err = compile("alerts.deny", a.Deny); err != nil {
		return r, err
	}
	if len(a.Expected) > 0 {
		r.Expected = nil
		for i, e := range a.Expected {
			re, err := alerts.Anchored(e.Alertname)
			if err != nil || e.Alertname == "" {
				return r, fmt.Errorf("alerts.expected[%d].alertname: %q is not a regular expression", i, e.Alertname)
			}
			r.Expected = append(r.Expected, alerts.Expected{Name: re, AnyNode: e.AnyNode, ControlPlaneOnly: e.ControlPlaneOnly})
		}
	}
	r.NodeLabels = a.NodeLabels
	return r, nil
}

// SilenceLabel is the label the node silence matches.
func (a *AlertSettings) SilenceLabel() string {
	if a != nil && len(a.NodeLabels) > 0 {
		return a.NodeLabels[0]
	}
	return "node"
}

func (a *AlertSettings) validate() []error {
	if _, err := a.Rules(); err != nil {
		return []error{err}
	}
	return nil
}
