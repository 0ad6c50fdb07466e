package tools

import (
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/intent"
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
