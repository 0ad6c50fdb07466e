package tools

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/alerts"
	"github.com/mcp-patch/mcp-patch/kube/drain"
)

// jobWaitOf is the intent's drain.wait_for_jobs: the pods (batch training
// jobs) a drain waits for after it cordons, and the wait's bound. A nil
// selector: the drain waits for nothing.
func jobWaitOf(st intent.Settings) (labels.Selector, time.Duration, error) {
	ds := st.Drain
	if ds == nil || ds.WaitForJobs == nil {
		return nil, 0, nil
	}
	sel, err := labels.Parse(ds.WaitForJobs.Selector)
	if err != nil {
		return nil, 0, Refuse("Fix drain.wait_for_jobs.selector in os-layer/settings.yaml.", "drain.wait_for_jobs.selector: "+err.Error(), "nothing was cordoned")
	}
	return sel, time.Duration(ds.WaitForJobs.MaxWaitMinutes) * time.Minute, nil
}

// selectorRisks are the plan's fleet-wide risks from the intent's
// selectors (pure wording in kube/drain and kube/alerts): a
// drain.wait_for_jobs.selector that picks no pod anywhere in the cluster,
// an alerts.selector that no alerting rule of Prometheus can match, or
// one that cannot be checked (Alertmanager has no rules). Read-only.
func (d *Deps) selectorRisks(ctx context.Context, kc *kube.Clients, st intent.Settings, jobs labels.Selector) []string {
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
