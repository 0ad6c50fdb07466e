package service

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/alerts"
	"github.com/mcp-patch/mcp-patch/kube/drain"
)

// selectorRisks are the plan's fleet-wide risks from the intent's
// selectors (pure wording in kube/drain and kube/alerts): a
// drain.wait_for_jobs.selector that picks no pod anywhere in the cluster,
// an alerts.selector that no alerting rule of Prometheus can match, or
// one that cannot be checked (Alertmanager has no rules). Read-only.
func (d *Service) selectorRisks(ctx context.Context, kc *kube.Clients, st intent.Settings, jobs labels.Selector) []string {
	var out []string
	if jobs != nil && !jobs.Empty() {
		ok, err := drain.AnyPodMatches(ctx, kc.Kube, jobs)
		if r := drain.SelectorRisk(jobs, ok, err); r != "" {
			out = append(out, r)
		}
	}
	rules, err := st.Alerts.Rules()
	if err != nil || rules.Selector == nil || rules.Selector.Empty() {
		return out // a malformed selector is refused where the settings are read
	}
	src, ok, err := d.alertSource()
	switch {
	case err != nil:
		out = append(out, "alerts.selector "+rules.Selector.String()+" could not be checked: "+err.Error())
	case ok:
		var rs []alerts.Rule
		var rerr error
		if src.PrometheusURL != "" {
			rs, rerr = src.AlertingRules(ctx)
		}
		if r := alerts.SelectorRisk(rules.Selector, src, rs, rerr); r != "" {
			out = append(out, r)
		}
	}
	return out
}
