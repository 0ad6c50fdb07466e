package window

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
)

// Host is what the window needs of a node's host steps.
type Host interface {
	Inspect(ctx context.Context, node string, in steps.InspectInput) (steps.Inspection, error)
	Simulate(ctx context.Context, node string) (steps.Simulation, error)
	Install(ctx context.Context, node, action, round, expectedDigest string) (steps.InstallState, error)
	TrialBootPrepare(ctx context.Context, node string, in steps.TrialBootInput) (steps.TrialBoot, error)
	TrialBootReboot(ctx context.Context, node, round string) (steps.TrialBoot, error)
	TrialBootStatus(ctx context.Context, node, round string) (steps.TrialBoot, error)
	Promote(ctx context.Context, node string, in steps.PromoteInput) (steps.PromoteResult, error)
	FallbackDrill(ctx context.Context, node, action, round, kernel string) (steps.DrillState, error)
	Autoremove(ctx context.Context, node string, in steps.AutoremoveInput) (steps.AutoremoveResult, error)
	// Kernel reads the running kernel and boot id (ObserveBoot).
	Kernel(ctx context.Context, node string) (steps.KernelInfo, error)
}

var _ Host = (*steps.Steps)(nil)

// Cluster is what the window needs of the cluster: the drain, and the
// cordon and job list of a drain that waits for jobs.
type Cluster interface {
	PreviewDrain(ctx context.Context, node string, pol drain.Policy) (drain.Evictions, error)
	Drain(ctx context.Context, node string, o drain.Options, progress func(done, total int, msg string)) (drain.Result, error)
	CordonState(ctx context.Context, node string) (drain.State, error)
	Cordon(ctx context.Context, node, round, identity string) error
	HoldingPods(ctx context.Context, node string, sel labels.Selector) ([]drain.PodRef, error)
}

var _ Cluster = drain.Cluster{}

// Journal is what the recorder writes; *round.Journal satisfies it.
type Journal interface {
	StartStep(step round.Step, node string, m round.Meta) (round.Record, error)
	RestartStep(step round.Step, node string, m round.Meta) (round.Record, error)
	FinishStep(step round.Step, node string, m round.Meta) (round.Record, error)
	FailStep(step round.Step, node string, m round.Meta) (round.Record, error)
	InterruptStep(step round.Step, node string, m round.Meta) (round.Record, error)
	Lesson(text string) (round.Record, error)
	StartRollback(node string, m round.Meta) (round.Record, error)
	EndRollback(node string, outcome round.Outcome, m round.Meta) (round.Record, error)
	Released(node, detail string) (round.Record, error)
	// OtherActors records a wait for another party, or a claim on one
	// (round.KindOtherActors).
	OtherActors(rec round.Record) (round.Record, error)
	State() *round.State
	// Shared is the state itself, to read only (round.Journal.Shared).
	Shared() *round.State
	// StepRun is a copy of one run of the state (State copies all of it).
	StepRun(step round.Step, node string) *round.StepRun
	RoundID() string
}

var _ Journal = (*round.Journal)(nil)

// Lease is the window lock: one window at a time, across servers.
type Lease interface {
	// Hold takes the Lease for round and node, or renews it when this
	// identity already holds it for them. Held by anyone else: an error
	// that wraps ErrLeaseHeld.
	Hold(ctx context.Context, round, node string) error
	// Release lets it go, if this identity holds it.
	Release(ctx context.Context, round, node string) error
}

var _ Lease = (*windowlock.Lease)(nil)
