package steps

import (
	"context"
	"fmt"
	"strings"
)

// RollbackInput are the inputs of RollbackPrepare.
type RollbackInput struct {
	Round string `json:"round"`
	// OldEntry is the old kernel's GRUB id with its submenu path, OldKernel
	// the release it boots.
	OldEntry  string `json:"old_entry"`
	OldKernel string `json:"old_kernel"`
}

// Rollback is what rollback.sh reports for any action.
type Rollback struct {
	Node      string `json:"node"`
	Round     string `json:"round"`
	Action    string `json:"action"`
	BootID    string `json:"boot_id"`
	Kernel    string `json:"kernel"`
	StateFile string `json:"state_file"`
	OldEntry  string `json:"old_entry,omitempty"`
	OldKernel string `json:"old_kernel,omitempty"`
	// From is trial (the drop-in kept the old default) or promoted (the
	// default was set back to the old entry); DropinWritten says the latter.
	From          string `json:"from,omitempty"`
	DropinWritten bool   `json:"dropin_written"`
	DropinPresent bool   `json:"dropin_present"`
	NextEntry     string `json:"next_entry"`
	// Reboot details.
	RebootRequestedAt string `json:"reboot_requested_at,omitempty"`
	AlreadyRequested  bool   `json:"already_requested"`
	Method            string `json:"method,omitempty"`
	// Status details.
	RecordedBootID string `json:"recorded_boot_id,omitempty"`
	FromKernel     string `json:"from_kernel,omitempty"`
	Rebooted       bool   `json:"rebooted"`
	// Outcome is not_rebooted, rolled_back or other_kernel.
	Outcome string `json:"outcome,omitempty"`
}

// OutcomeRolledBack: a new boot id and the old kernel runs.
const OutcomeRolledBack = "rolled_back"

func (s *Steps) rollback(ctx context.Context, node, round, action string, extra map[string]string) (Rollback, error) {
	rb := Rollback{Node: node, Round: round, Action: action}
	if err := ValidateRound(round); err != nil {
		return rb, fmt.Errorf("rollback (%s) on node %s: %w", action, node, err)
	}
	env := map[string]string{"ACTION": action, "ROUND": round}
	for k, v := range extra {
		env[k] = v
	}
	var o struct {
		BootID    string `json:"boot_id"`
		Kernel    string `json:"kernel"`
		StateFile string `json:"state_file"`
		OldEntry  string `json:"old_entry"`
		OldKernel string `json:"old_kernel"`
		From      string `json:"from"`
		Written   bool   `json:"dropin_written"`
		Present   bool   `json:"dropin_present"`
		NextEntry string `json:"next_entry"`
		RebootAt  string `json:"reboot_requested_at"`
		Already   bool   `json:"already_requested"`
		Method    string `json:"method"`
		Recorded  string `json:"recorded_boot_id"`
		FromK     string `json:"from_kernel"`
		Rebooted  bool   `json:"rebooted"`
		Outcome   string `json:"outcome"`
	}
	_, err := s.run(ctx, "rollback", node, env, &o, false)
	rb.BootID, rb.Kernel, rb.StateFile = strings.TrimSpace(o.BootID), o.Kernel, o.StateFile
	rb.OldEntry, rb.OldKernel, rb.From, rb.DropinWritten, rb.DropinPresent, rb.NextEntry = o.OldEntry, o.OldKernel, o.From, o.Written, o.Present, o.NextEntry
	rb.RebootRequestedAt, rb.AlreadyRequested, rb.Method = o.RebootAt, o.Already, o.Method
	rb.RecordedBootID, rb.FromKernel, rb.Rebooted, rb.Outcome = strings.TrimSpace(o.Recorded), o.FromK, o.Rebooted, o.Outcome
	return rb, err
}

// RollbackPrepare makes the old kernel the next boot (rollback.sh
// ACTION=prepare): keeps the trial-boot drop-in, or writes it again on a
// promoted node, runs update-grub and clears a pending one-shot entry. It
// refuses (ErrRefused) when the entry does not boot the old kernel or the
// node already runs it.
func (s *Steps) RollbackPrepare(ctx context.Context, node string, in RollbackInput) (Rollback, error) {
	if err := ValidateEntryID("old entry", in.OldEntry); err != nil {
		return Rollback{Node: node}, fmt.Errorf("rollback on node %s: %w", node, err)
	}
	if err := ValidateKernel("old kernel", in.OldKernel); err != nil {
		return Rollback{Node: node}, fmt.Errorf("rollback on node %s: %w", node, err)
	}
	return s.rollback(ctx, node, in.Round, "prepare", map[string]string{"OLD_ENTRY": in.OldEntry, "OLD_KERNEL": in.OldKernel})
}

// RollbackReboot schedules the reboot into the old kernel and returns at
// once (ACTION=reboot).
func (s *Steps) RollbackReboot(ctx context.Context, node, round string) (Rollback, error) {
	return s.rollback(ctx, node, round, "reboot", nil)
}

// RollbackStatus says whether the node rebooted into the old kernel
// (ACTION=status).
func (s *Steps) RollbackStatus(ctx context.Context, node, round string) (Rollback, error) {
	return s.rollback(ctx, node, round, "status", nil)
}
