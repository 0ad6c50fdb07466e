package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/alerts"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
)

// alertSource is where the gate reads alerts; ok is false when neither
// URL is configured (the alert check is then not made).
func (d *Deps) alertSource() (alerts.Source, bool, error) {
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
func (d *Deps) alertsConfig(s *session) (*gate.AlertsConfig, error) {
	src, ok, err := d.alertSource()
	if err != nil || !ok {
		return nil, err
	}
	rules, err := s.settings.Alerts.Rules()
	if err != nil {
		return nil, Refuse("Fix the alerts section of os-layer/settings.yaml.", err.Error())
	}
	cfg := &gate.AlertsConfig{Source: src, Rules: rules}
	if s != nil {
		cfg.Window = openWindow(s.j.State())
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

// silenceWindow silences the node's alerts for its window when the intent
// asks for it; the silence ends by itself at twice the expected window (so
// a crashed server leaves none behind for long) and is expired when the
// window closes.
func (o *Ops) silenceWindow(ctx context.Context, st *round.State, node string) {
	if o.alerts == nil || o.settings == nil {
		return
	}
	src, ok, err := o.alerts()
	if err != nil || !ok || src.AlertmanagerURL == "" {
		return
	}
	set := o.settings(st.RoundID)
	if set == nil || !set.SilenceNode {
		return
	}
	length := 2 * expectedWindow(st)
	if length <= 0 {
		length = 4 * time.Hour
	}
	now := time.Now()
	sil, err := src.SilenceNode(ctx, set.SilenceLabel(), node, windowComment(st.RoundID, node), now, now.Add(length))
	if err != nil {
		o.log.Warn("no Alertmanager silence for the window", "node", node, "err", err)
		return
	}
	o.mu.Lock()
	o.silenced[node] = sil.ID
	o.mu.Unlock()
	o.log.Info("Alertmanager silence for the window", "node", node, "silence", sil.ID, "ends", now.Add(length))
}

// Unsilence expires the Alertmanager silences the window of node put
// there (window.Silencer): the one this process set, and any other
// active one with the window's comment (set before a restart). Without
// Alertmanager or the intent's alerts.silence_node it does nothing.
func (o *Ops) Unsilence(ctx context.Context, roundID, node string) ([]string, error) {
	o.mu.Lock()
	id, known := o.silenced[node]
	delete(o.silenced, node)
	o.mu.Unlock()
	if o.alerts == nil {
		return nil, nil
	}
	src, ok, err := o.alerts()
	if err != nil {
		return nil, err
	}
	if !ok || src.AlertmanagerURL == "" {
		return nil, nil
	}
	ids := []string{id}
	var errs []error
	if !known {
		if o.settings == nil {
			return nil, nil
		}
		if set := o.settings(roundID); set == nil || !set.SilenceNode {
			return nil, nil
		}
		list, err := src.Silences(ctx)
		if err != nil {
			return nil, err
		}
		ids = alerts.Ours(list, windowComment(roundID, node))
	}
	var expired []string
	for _, s := range ids {
		if err := src.Expire(ctx, s); err != nil {
			errs = append(errs, err)
			continue
		}
		expired = append(expired, s)
	}
	return expired, errors.Join(errs...)
}

// windowComment is the comment of the silence on a window's node; it finds
// the silence again after a restart.
func windowComment(roundID, node string) string {
	return fmt.Sprintf("mcp-patch round %s: window of %s", roundID, node)
}
