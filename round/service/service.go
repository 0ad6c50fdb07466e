// Package service is the open round's owner for one server: the
// configuration, the round book, the hosts, the cluster, the window Lease
// keeper and the approvals. It opens one window.Round per call and runs
// the rules that need the world: admission, the signed plan and the
// window approvals, the proofs kept of them, the gate's configuration,
// the fleet preflight and the commit after each call. The MCP tools
// (package tools) translate their input into calls here and the answers
// into their output; this package knows nothing of MCP results and never
// imports tools, cli or the lab.
package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/round/ops"
	"github.com/mcp-patch/mcp-patch/round/window"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Service is what the tools reach the world through. Fields that need a
// live connection are constructed lazily by their owners, so read_intent
// works without a cluster.
type Service struct {
	Config *config.Config
	Log    *slog.Logger
	Now    func() time.Time
	// Getenv reads the environment (SSH_AUTH_SOCK and the like).
	Getenv func(string) string
	Mode   config.Mode

	// Intent opens the intent repository for a round ("" when only reading).
	Intent func(round string) (*intent.Repo, error)
	// VerifyEnv is passed to every verify.sh (KUBECONFIG and the like).
	VerifyEnv map[string]string
	// CurrentRound returns the id of the open round, or "".
	CurrentRound func() string

	// Cluster returns the Kubernetes clients, connecting on first use.
	Cluster func(ctx context.Context) (*kube.Clients, error)
	// Hosts returns the host steps over the SSH pool, built on first use.
	Hosts func(ctx context.Context) (*HostAccess, error)
	// Book keeps the rounds' journals in the intent repository.
	Book *RoundBook
	// Identity names this server in the window Lease and cordon records.
	Identity string

	// keeper keeps the window Lease (leaseKeeper).
	keeper leaseKeeping
	// pushes remembers a push of the round's record that failed (push.go).
	pushes pushKeeping
	// takeover is the leader term this server took the round over in
	// (takeover.go).
	takeover takeoverKeeping
	// Serial lets one call at a time work on a node's window.
	Serial window.Serial
	// Lease, when set, replaces the window Lease on the cluster (tests).
	Lease window.Lease
	// Leader, when set, replaces the leader election on the cluster
	// (tests); else it runs when leader_election is on (leader.go).
	Leader Leadership
	leader leaderKeeping
	// Drainer, when set, replaces the cluster's drain (tests).
	Drainer window.Cluster
	// Others, when set, replaces who else maintains a node (tests); with a
	// cluster of its own the server reads kube/actors (others.go).
	Others window.Others
	// Claims, when set, replaces what the round claims from the others
	// (kured's lock, the driver-upgrade skip) (tests).
	Claims window.Claims
	others othersKeeping
	// WindowEvents, when set, receives every window transition once it is
	// journaled (notifications, metrics, Kubernetes Events hang here).
	WindowEvents func(window.Event)

	// Approvals verifies signed approvals; nil refuses every destructive step.
	Approvals Approvals

	// Resources, when set, adds MCP resources (the intent documents).
	Resources func(s *mcp.Server)

	// Ops sends notifications and keeps metrics and node Events; nil does
	// none of it.
	Ops *ops.Ops

	// Audit receives one record per tool call; nil discards.
	Audit func(ctx context.Context, rec AuditRecord)
}

// AuditRecord is what every tool call leaves behind. Arguments are kept as a
// digest only, never verbatim (they may carry approvals).
type AuditRecord struct {
	Time       time.Time `json:"time"`
	Tool       string    `json:"tool"`
	Kind       string    `json:"kind"`
	ArgsDigest string    `json:"args_digest"`
	Node       string    `json:"node,omitempty"`
	ApprovalID string    `json:"approval_id,omitempty"`
	// Status is the answer's status (ok, in_progress, approval_required,
	// refused, failed).
	Status  string   `json:"status"`
	Reasons []string `json:"reasons,omitempty"`
	// Follower: the call came to a server that does not lead; its
	// record goes to the state directory, never into the round the
	// leader writes.
	Follower bool `json:"follower,omitempty"`
	// Args are the call's arguments, never written: the audit log uses them
	// to keep argument text out of the reasons (round.AuditText).
	Args any `json:"-"`
}

// Clock is the service's time (Now; time.Now when unset).
func (d *Service) Clock() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Progress reports a step's progress to the caller (a tool's progress
// notifications).
type Progress = func(done, total float64, message string)
