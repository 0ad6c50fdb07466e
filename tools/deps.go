package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/ops"
	"github.com/mcp-patch/mcp-patch/round/window"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Mode limits what the server offers (see config.Mode).
type Mode = config.Mode

// Modes, re-exported for handlers.
const (
	ModeNormal             = config.ModeNormal
	ModeReadOnly           = config.ModeReadOnly
	ModeDisableDestructive = config.ModeDisableDestructive
)

// Deps is what handlers reach the world through. Fields that need a live
// connection are constructed lazily by their owners, so read_intent works
// without a cluster.
type Deps struct {
	Config *config.Config
	Log    *slog.Logger
	Now    func() time.Time
	// Getenv reads the environment (SSH_AUTH_SOCK and the like).
	Getenv func(string) string
	Mode   Mode

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
	// serial lets one call at a time work on a node's window.
	serial window.Serial
	// Lease, when set, replaces the window Lease on the cluster (tests).
	Lease window.Lease
	// Drainer, when set, replaces the cluster's drain (tests).
	Drainer window.Cluster
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

// modeRefuses says whether a mode forbids a kind of tool.
func modeRefuses(m Mode, k Kind) bool {
	switch m {
	case ModeReadOnly:
		return k != ReadOnly
	case ModeDisableDestructive:
		return k == Destructive
	}
	return false
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
	Status     Status    `json:"status"`
	Reasons    []string  `json:"reasons,omitempty"`
	// Args are the call's arguments, never written: the audit log uses them
	// to keep argument text out of the reasons (round.AuditText).
	Args any `json:"-"`
}

func (d *Deps) audit(ctx context.Context, spec Spec, in any, res *Result) {
	if d.Audit == nil {
		return
	}
	b, _ := json.Marshal(in)
	digest, err := round.ArgsDigest(in)
	if err != nil {
		sum := sha256.Sum256(b)
		digest = "sha256:" + hex.EncodeToString(sum[:])
	}
	rec := AuditRecord{Time: d.now(), Tool: spec.Name, Kind: spec.Kind.String(),
		ArgsDigest: digest, Status: res.Status, Reasons: res.Reasons, ApprovalID: res.ApprovalID, Args: in}
	var n struct {
		Node string `json:"node"`
	}
	_ = json.Unmarshal(b, &n)
	rec.Node = n.Node
	d.Audit(ctx, rec)
}

func (d *Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}
