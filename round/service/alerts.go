package service

import (
	"fmt"
	"os"
	"strings"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/kube/alerts"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// alertSource is where the gate reads alerts; ok is false when neither
// URL is configured (the alert check is then not made).
func (d *Service) alertSource() (alerts.Source, bool, error) {
	k := d.Config.Kube
	if k.PrometheusURL == "" && k.AlertmanagerURL == "" {
		return alerts.Source{}, false, nil
	}
	src := alerts.Source{PrometheusURL: k.PrometheusURL, AlertmanagerURL: k.AlertmanagerURL}
	if k.AlertsTokenFile != "" {
		b, err := os.ReadFile(k.AlertsTokenFile)
		if err != nil {
			return src, false, fmt.Errorf("kube.alerts_token_file: %w", err)
		}
		src.BearerToken = strings.TrimSpace(string(b))
	}
	return src, true, nil
}

// alertsConfig is the gate's alert check for the open round: the intent's
// rules and the open window (whose own alerts are expected).
func (d *Service) alertsConfig(s *window.Round) (*gate.AlertsConfig, error) {
	src, ok, err := d.alertSource()
	if err != nil || !ok {
		return nil, err
	}
	rules, err := s.Settings.Alerts.Rules()
	if err != nil {
		return nil, answer.Refuse("Fix the alerts section of os-layer/settings.yaml.", err.Error())
	}
	cfg := &gate.AlertsConfig{Source: src, Rules: rules}
	if s != nil {
		cfg.Window = openWindow(s.Journal.State())
	}
	return cfg, nil
}

// openWindow is the node window now open (or the one the gate is closing).
func openWindow(st *round.State) alerts.Window {
	for _, n := range st.Nodes {
		if n.Window == round.WindowOpen {
			return alerts.Window{Node: n.Node, ControlPlane: n.Role == round.RoleControlPlane, Opened: n.Opened}
		}
	}
	return alerts.Window{}
}
