package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// Deps is what handlers reach the world through: the open round's owner
// (round/service), which the tools only translate into and out of.
type Deps = service.Service

// AuditRecord is what every tool call leaves behind (service.AuditRecord).
type AuditRecord = service.AuditRecord

// Mode limits what the server offers (see config.Mode).
type Mode = config.Mode

// Modes, re-exported for handlers.
const (
	ModeNormal             = config.ModeNormal
	ModeReadOnly           = config.ModeReadOnly
	ModeDisableDestructive = config.ModeDisableDestructive
)

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

// audit hands d's audit the record of one call. Arguments are kept as a
// digest only, never verbatim (they may carry approvals).
func audit(ctx context.Context, d *Deps, spec Spec, in any, res *Result) {
	if d.Audit == nil {
		return
	}
	b, _ := json.Marshal(in)
	digest, err := round.ArgsDigest(in)
	if err != nil {
		sum := sha256.Sum256(b)
		digest = "sha256:" + hex.EncodeToString(sum[:])
	}
	rec := AuditRecord{Time: d.Clock(), Tool: spec.Name, Kind: spec.Kind.String(),
		ArgsDigest: digest, Status: string(res.Status), Reasons: res.Reasons, ApprovalID: res.ApprovalID, Args: in,
		Follower: d.Following()}
	var n struct {
		Node string `json:"node"`
	}
	_ = json.Unmarshal(b, &n)
	rec.Node = n.Node
	d.Audit(ctx, rec)
}

// commitAfterCall commits, at the end of a call of a tool that is not
// read-only, the record of every round d holds for writing
// (Service.CommitAfterCall); a commit that fails is said in the reasons.
func commitAfterCall(ctx context.Context, d *Deps, spec Spec, res *Result) {
	if spec.Kind == ReadOnly {
		return
	}
	if res.Status == StatusRefused && d.Following() {
		return // a follower's refusal changed nothing: the leader commits the round
	}
	for _, r := range d.CommitAfterCall(ctx, fmt.Sprintf("%s (%s)", spec.Name, res.Status)) {
		if !slices.Contains(res.Reasons, r) {
			res.Reasons = append(res.Reasons, r)
		}
	}
}
