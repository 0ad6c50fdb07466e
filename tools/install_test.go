package tools

import (
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
)

// An install that ends with a non-zero exit fails the step, stops the
// round and says what a person does; a live plan that drifted from the
// signed plan is refused before an approval is even asked for.
func TestInstallOutcomes(t *testing.T) {
	t.Run("exit code", func(t *testing.T) {
		r := newWRig(t)
		r.drained(t)
		r.approve(t, "install_updates", map[string]any{"node": wNode})
		r.host.InstallState, r.host.ExitCode = "finished", 100
		out, res := r.call(t, "install_updates", map[string]any{"node": wNode})
		if res.Status != StatusFailed || res.NextAction == "" || out["status"] != string(StatusFailed) {
			t.Fatalf("install that exited 100: %s %v", res.Status, res.Reasons)
		}
		run := r.journal(t).State().Node(wNode).Steps[round.StepInstall]
		if run.State == round.InFlight || run.Green() {
			t.Fatalf("a failed install journaled as %s", run.State)
		}
		if _, res := r.call(t, "trial_boot", map[string]any{"node": wNode}); res.Status != StatusRefused {
			t.Fatalf("trial boot after a failed install: %s %v", res.Status, res.Reasons)
		}
	})
	t.Run("host drifted", func(t *testing.T) {
		r := newWRig(t)
		r.drained(t)
		r.host.Digest = "sha256:" + "c0ffee"
		_, res := r.call(t, "install_updates", map[string]any{"node": wNode})
		// The signed plan is asked first: the drift is shown against what
		// people reviewed, and re-planned there.
		if res.Status != StatusRefused || !strings.Contains(strings.Join(res.Reasons, " "), "differs from its reviewed plan") ||
			!strings.Contains(strings.Join(res.Reasons, " "), "+ sha256:c0ffee") || !strings.Contains(res.NextAction, "replan_node") || r.host.Count("install") != 0 {
			t.Fatalf("install on a host whose plan drifted: %s %v (installs %d)", res.Status, res.Reasons, r.host.Count("install"))
		}
	})
}
