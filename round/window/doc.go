// Package window owns one node's patch window: the typed plan of each
// destructive step (what a person approves, with its digest), the pure
// decisions from inspections and the journal to a plan or a refusal, the
// recorder that writes the journal and never drops an error, the rule for
// re-entering a step in flight, and the window Lease with its one keeper
// (LeaseKeeper: a step runs bound to it, and a lost Lease stops the step at
// its next safe point under the window_lease rule). It declares the small
// host, cluster and Lease interfaces it needs; host/steps, kube and the
// tools' adapters satisfy them, and unit tests run whole windows on fakes.
//
// It must not import tools/, the MCP SDK, x/crypto/ssh or go-git, and it
// imports no client-go package itself: it names the plain types of
// kube/drain, kube/gate, kube/gpucheck and kube/windowlock (which are built
// on client-go) and receives their work through its interfaces.
//
// # Transitions
//
// A node's window, as the journal records it (round.WindowSteps):
//
//	drain ─► install ─► trial_boot ─► verify ─► uncordon ─► [gpu_acceptance] ─► promote ─► gate (green: window closed)
//	            ▲
//	   fallback_drill (canary only, between install and trial_boot; a lesson, not a step)
//
// Each destructive step goes through the same states:
//
//	Decide (pure: inspection + journal → typed Plan, or a refusal)
//	  → approval verified against Plan.Digest, nonce consumed (tools' chokepoint)
//	  → Recorder.Start: step_started with approval id, plan digest and the plan itself
//	  → act on exactly that plan
//	  → Recorder.Finish (done) or Recorder.Stop (failed: the round stops)
//
// A call on a step in flight is re-entry (DecideReentry): it observes the
// host or cluster and completes what the journaled plan began; when the host
// shows that nothing began, only a fresh approval restarts it
// (round.Journal.RestartStep); past its Bound, the step fails.
//
// # Where to hook
//
// Recorder.Events receives every transition: Started, Finished, Failed and
// Stopped (a failure that stops the round), each with the step, node,
// round, approval id and plan digest. Notifications, metrics and Kubernetes
// Events hang there (set Events on the Recorder); they must not fail the
// step, so Events has no error return.
package window
