package gate

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/kube/alerts"
)

// AlertsConfig is the alert check: where alerts are read, which count, and
// the window whose own alerts are expected.
type AlertsConfig struct {
	Source alerts.Source
	Rules  alerts.Rules
	Window alerts.Window
}

// CheckAlerts is red while an alert that counts fires, and "could not
// check" (red) when the alerts cannot be read. Green with a selector that
// no alerting rule of Prometheus can match warns so (it can never be red).
func CheckAlerts(ctx context.Context, cfg AlertsConfig) Check {
	return timed(func() Check {
		c := Check{Name: NameAlerts}
		firing, err := cfg.Source.Firing(ctx)
		if err != nil {
			c.Reason = "could not check: " + err.Error()
			return c
		}
		v := alerts.Judge(firing, cfg.Rules, cfg.Window)
		c.Evidence = append(c.Evidence, fmt.Sprintf("%d alerts firing", len(firing)))
		for _, e := range v.Expected {
			c.Evidence = append(c.Evidence, "expected: "+e)
		}
		for _, i := range v.Ignored {
			c.Evidence = append(c.Evidence, "ignored: "+i)
		}
		if !v.OK {
			c.Reason = fmt.Sprintf("%d alerts fire that the window does not explain: %s", len(v.Blocking), strings.Join(v.Blocking, "; "))
			return c
		}
		if len(v.Expected) > 0 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%d alerts fire that the window of %s caused; they should clear", len(v.Expected), cfg.Window.Node))
		}
		// Green says little when the selector can select nothing.
		if sel := cfg.Rules.Selector; sel != nil && !sel.Empty() && cfg.Source.PrometheusURL != "" {
			rules, err := cfg.Source.AlertingRules(ctx)
			if w := alerts.SelectorRisk(sel, cfg.Source, rules, err); w != "" {
				c.Warnings = append(c.Warnings, w)
			}
		}
		c.OK = true
		return c
	})
}
