package steps

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// TrialBootInput are the inputs of TrialBootPrepare.
type TrialBootInput struct {
	Round string `json:"round"`
	// OldEntry is the GRUB id path of the running kernel's entry (the
	// fallback), NewEntry the new kernel's; both with the submenu path,
	// e.g. gnulinux-advanced-<uuid>>gnulinux-<ver>-advanced-<uuid>.
	OldEntry string `json:"old_entry"`
	NewEntry string `json:"new_entry"`
	// PanicSeconds is panic=N on the kernel command line; 0 means the
	// node's current kernel.panic.
	PanicSeconds int `json:"panic_seconds,omitempty"`
	// AllowUnreliableGrubenv goes on where GRUB cannot write grubenv at
	// boot (the one-shot entry would stay the default). Off by default.
	AllowUnreliableGrubenv bool `json:"allow_unreliable_grubenv,omitempty"`
}

// TrialBoot is what trial_boot.sh reports for any action.
type TrialBoot struct {
	Node      string `json:"node"`
	Round     string `json:"round"`
	Action    string `json:"action"`
	BootID    string `json:"boot_id"`
	Kernel    string `json:"kernel"`
	StateFile string `json:"state_file"`
	OldEntry  string `json:"old_entry,omitempty"`
	NewEntry  string `json:"new_entry,omitempty"`
	OldKernel string `json:"old_kernel,omitempty"`
	NewKernel string `json:"new_kernel,omitempty"`
	// NextEntry is grubenv's one-shot entry now ("" once GRUB used it).
	NextEntry string `json:"next_entry"`
	// Prepare details.
	KernelPanic     string   `json:"kernel_panic,omitempty"`
	PanicSeconds    int      `json:"panic_seconds,omitempty"`
	GrubenvReliable bool     `json:"grubenv_reliable"`
	GrubenvReasons  []string `json:"grubenv_reasons"`
	BootSource      string   `json:"boot_source,omitempty"`
	BootFSType      string   `json:"boot_fstype,omitempty"`
	// WatchdogArmed says whether systemd arms a hardware watchdog
	// (RuntimeWatchdogUSec), which also covers a hang.
	WatchdogArmed bool   `json:"watchdog_armed"`
	WatchdogUSec  string `json:"watchdog_runtime_usec,omitempty"`
	// Reboot details.
	RebootRequestedAt string `json:"reboot_requested_at,omitempty"`
	AlreadyRequested  bool   `json:"already_requested"`
	Method            string `json:"method,omitempty"`
	// Status details.
	RecordedBootID string `json:"recorded_boot_id,omitempty"`
	Rebooted       bool   `json:"rebooted"`
	// Outcome is not_rebooted, new_kernel (the trial boot worked),
	// fell_back (the old kernel runs again) or other_kernel.
	Outcome string `json:"outcome,omitempty"`
}

// Trial-boot outcomes.
const (
	OutcomeNotRebooted = "not_rebooted"
	OutcomeNewKernel   = "new_kernel"
	OutcomeFellBack    = "fell_back"
	OutcomeOtherKernel = "other_kernel"
)

type trialOut struct {
	Action          string   `json:"action"`
	BootID          string   `json:"boot_id"`
	Kernel          string   `json:"kernel"`
	StateFile       string   `json:"state_file"`
	OldEntry        string   `json:"old_entry"`
	NewEntry        string   `json:"new_entry"`
	OldKernel       string   `json:"old_kernel"`
	NewKernel       string   `json:"new_kernel"`
	NextEntry       string   `json:"next_entry"`
	KernelPanic     string   `json:"kernel_panic"`
	PanicSeconds    *int     `json:"panic_seconds"`
	GrubenvReliable bool     `json:"grubenv_reliable"`
	GrubenvReasons  []string `json:"grubenv_reasons"`
	BootSource      string   `json:"boot_source"`
	BootFSType      string   `json:"boot_fstype"`
	WatchdogArmed   bool     `json:"watchdog_armed"`
	WatchdogUSec    string   `json:"watchdog_runtime_usec"`
	RebootAt        string   `json:"reboot_requested_at"`
	Already         bool     `json:"already_requested"`
	Method          string   `json:"method"`
	Recorded        string   `json:"recorded_boot_id"`
	Rebooted        bool     `json:"rebooted"`
	Outcome         string   `json:"outcome"`
}

func (s *Steps) trialBoot(ctx context.Context, node, round, action string, extra map[string]string) (TrialBoot, error) {
	tb := TrialBoot{Node: node, Round: round, Action: action, GrubenvReasons: []string{}}
	if err := ValidateRound(round); err != nil {
		return tb, fmt.Errorf("trial boot (%s) on node %s: %w", action, node, err)
	}
	env := map[string]string{"ACTION": action, "ROUND": round}
	for k, v := range extra {
		env[k] = v
	}
	var o trialOut
	_, err := s.run(ctx, "trial_boot", node, env, &o, false)
	tb.BootID, tb.Kernel, tb.StateFile = strings.TrimSpace(o.BootID), o.Kernel, o.StateFile
	tb.OldEntry, tb.NewEntry, tb.OldKernel, tb.NewKernel, tb.NextEntry = o.OldEntry, o.NewEntry, o.OldKernel, o.NewKernel, o.NextEntry
	tb.KernelPanic, tb.GrubenvReliable, tb.GrubenvReasons = o.KernelPanic, o.GrubenvReliable, nonNil(o.GrubenvReasons)
	tb.BootSource, tb.BootFSType, tb.WatchdogArmed, tb.WatchdogUSec = o.BootSource, o.BootFSType, o.WatchdogArmed, o.WatchdogUSec
	tb.RebootRequestedAt, tb.AlreadyRequested, tb.Method = o.RebootAt, o.Already, o.Method
	tb.RecordedBootID, tb.Rebooted, tb.Outcome = strings.TrimSpace(o.Recorded), o.Rebooted, o.Outcome
	if o.PanicSeconds != nil {
		tb.PanicSeconds = *o.PanicSeconds
	}
	return tb, err
}

// TrialBootPrepare makes the new kernel boot once with the old one as the
// default (trial_boot.sh ACTION=prepare): checks, drop-in, update-grub,
// grub-reboot. It refuses (ErrRefused) when an entry is missing, the old
// entry is not the running kernel, kernel.panic is 0 or grubenv is not
// writable at boot.
func (s *Steps) TrialBootPrepare(ctx context.Context, node string, in TrialBootInput) (TrialBoot, error) {
	if err := ValidateEntryID("old entry", in.OldEntry); err != nil {
		return TrialBoot{Node: node}, fmt.Errorf("trial boot on node %s: %w", node, err)
	}
	if err := ValidateEntryID("new entry", in.NewEntry); err != nil {
		return TrialBoot{Node: node}, fmt.Errorf("trial boot on node %s: %w", node, err)
	}
	if in.OldEntry == in.NewEntry {
		return TrialBoot{Node: node}, fmt.Errorf("trial boot on node %s: %w: old and new entry are the same", node, ErrBadInput)
	}
	if in.PanicSeconds < 0 || in.PanicSeconds > 9999 {
		return TrialBoot{Node: node}, fmt.Errorf("trial boot on node %s: %w: panic seconds %d not in 0..9999", node, ErrBadInput, in.PanicSeconds)
	}
	extra := map[string]string{"OLD_ENTRY": in.OldEntry, "NEW_ENTRY": in.NewEntry, "ALLOW_UNRELIABLE_GRUBENV": "0"}
	if in.PanicSeconds > 0 {
		extra["PANIC_SECONDS"] = strconv.Itoa(in.PanicSeconds)
	}
	if in.AllowUnreliableGrubenv {
		extra["ALLOW_UNRELIABLE_GRUBENV"] = "1"
	}
	return s.trialBoot(ctx, node, in.Round, "prepare", extra)
}

// TrialBootReboot schedules the reboot a few seconds out and returns at
// once (ACTION=reboot). It refuses unless the prepared one-shot entry and
// drop-in are still in place and the node has not rebooted since.
func (s *Steps) TrialBootReboot(ctx context.Context, node, round string) (TrialBoot, error) {
	return s.trialBoot(ctx, node, round, "reboot", nil)
}

// TrialBootStatus tells whether the node rebooted (a new boot id) and into
// which kernel (ACTION=status).
func (s *Steps) TrialBootStatus(ctx context.Context, node, round string) (TrialBoot, error) {
	return s.trialBoot(ctx, node, round, "status", nil)
}

// PromoteInput are the inputs of Promote: the round, and the boot a
// person approved promoting, which the host must be running.
type PromoteInput struct {
	Round string `json:"round"`
	// ExpectedKernel is the trial kernel; promote.sh refuses, changing
	// nothing, unless it is the running kernel. Required.
	ExpectedKernel string `json:"expected_kernel"`
	// ExpectedBootID is the trial boot's boot id; promote.sh refuses,
	// changing nothing, when the host booted again since. "" is not
	// checked (a person running it by hand).
	ExpectedBootID string `json:"expected_boot_id,omitempty"`
}

// PromoteResult is what promote.sh found after making the new kernel the
// default.
type PromoteResult struct {
	Node           string `json:"node"`
	ExpectedKernel string `json:"expected_kernel"`
	ExpectedBootID string `json:"expected_boot_id,omitempty"`
	// RunningKernel and BootID are the host as promote.sh found it before
	// changing anything.
	RunningKernel string `json:"running_kernel"`
	BootID        string `json:"boot_id"`
	DropinRemoved bool   `json:"dropin_removed"`
	CfgDefault    string `json:"cfg_default"`
	NextEntry     string `json:"next_entry"`
	SavedEntry    string `json:"saved_entry"`
	// NextBootSource is "next_entry" or "default"; NextBootEntry the value
	// GRUB resolves, NextBootID and NextBootKernel the entry it names.
	NextBootSource string `json:"next_boot_source"`
	NextBootEntry  string `json:"next_boot_entry"`
	NextBootID     string `json:"next_boot_id"`
	NextBootKernel string `json:"next_boot_kernel"`
	// Promoted is true when GRUB will boot ExpectedKernel next.
	Promoted bool `json:"promoted"`
}

// Promote makes in.ExpectedKernel the default, on the boot in names only:
// promote.sh first refuses (ErrRefused, nothing changed) unless the host
// runs that kernel and, when in.ExpectedBootID is set, that boot; then it
// removes the trial-boot drop-in, runs update-grub and checks GRUB now
// boots it. When it does not, Promoted is false and the error says what
// GRUB will boot.
func (s *Steps) Promote(ctx context.Context, node string, in PromoteInput) (PromoteResult, error) {
	res := PromoteResult{Node: node, ExpectedKernel: in.ExpectedKernel, ExpectedBootID: in.ExpectedBootID}
	if err := ValidateRound(in.Round); err != nil {
		return res, fmt.Errorf("promote on node %s: %w", node, err)
	}
	if err := ValidateKernel("expected kernel", in.ExpectedKernel); err != nil {
		return res, fmt.Errorf("promote on node %s: %w", node, err)
	}
	env := map[string]string{"ROUND": in.Round, "EXPECTED_KERNEL": in.ExpectedKernel}
	if in.ExpectedBootID != "" {
		if err := ValidateBootID(in.ExpectedBootID); err != nil {
			return res, fmt.Errorf("promote on node %s: %w", node, err)
		}
		env["EXPECTED_BOOT_ID"] = in.ExpectedBootID
	}
	var o struct {
		Expected       string `json:"expected_kernel"`
		ExpectedBootID string `json:"expected_boot_id"`
		Running        string `json:"running_kernel"`
		BootID         string `json:"boot_id"`
		Removed        bool   `json:"dropin_removed"`
		CfgDefault     string `json:"cfg_default"`
		Next           string `json:"next_entry"`
		Saved          string `json:"saved_entry"`
		Source         string `json:"next_boot_source"`
		Entry          string `json:"next_boot_entry"`
		ID             string `json:"next_boot_id"`
		Kernel         string `json:"next_boot_kernel"`
	}
	env0, err := s.run(ctx, "promote", node, env, &o, true)
	res = PromoteResult{Node: node, ExpectedKernel: in.ExpectedKernel, ExpectedBootID: in.ExpectedBootID,
		RunningKernel: o.Running, BootID: strings.TrimSpace(o.BootID), DropinRemoved: o.Removed, CfgDefault: o.CfgDefault,
		NextEntry: o.Next, SavedEntry: o.Saved, NextBootSource: o.Source, NextBootEntry: o.Entry, NextBootID: o.ID, NextBootKernel: o.Kernel}
	if err != nil {
		return res, err
	}
	res.Promoted = env0.Status == StatusOK && o.Kernel == in.ExpectedKernel
	if !res.Promoted {
		return res, &StepError{Step: "promote", Node: node, Status: env0.Status, Reason: env0.Reason, ExitCode: 4}
	}
	return res, nil
}
