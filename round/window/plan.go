package window

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/round"
)

// Plan is what one destructive step will do, decided before it runs. Its
// Digest is what a person signs; the step acts on exactly this value.
type Plan interface {
	// Step is the journal step the plan runs as ("" for the drill, which
	// is recorded as a lesson).
	Step() round.Step
	// Target is the node, or FleetTarget for a fleet-wide step.
	Target() string
	Digest() string
	// Summary is the plan in plain words, for the request a person signs.
	Summary() []string
}

// FleetTarget is the node name a fleet-wide plan (autoremove) binds.
const FleetTarget = "all-nodes"

// DigestOf hashes parts, each terminated, into "sha256:<hex>".
func DigestOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// DrainPlan cordons a node and evicts the pods of the preview.
type DrainPlan struct {
	Node string `json:"node"`
	// PreviewDigest is drain.Evictions.Digest: the pods that go, the policy.
	PreviewDigest string   `json:"preview_digest"`
	Evict         []string `json:"evict"`
	Warnings      []string `json:"warnings,omitempty"`
	// WaitsFor are the jobs (drain.wait_for_jobs) running on the node when
	// the plan was made: the drain cordons, then waits for them, up to
	// JobWaitMinutes. Not in the digest: jobs come and go.
	WaitsFor       []string `json:"waits_for,omitempty"`
	JobWaitMinutes int      `json:"job_wait_minutes,omitempty"`
}

func (p DrainPlan) Step() round.Step { return round.StepDrain }
func (p DrainPlan) Target() string   { return p.Node }
func (p DrainPlan) Digest() string   { return p.PreviewDigest }
func (p DrainPlan) Summary() []string {
	s := []string{fmt.Sprintf("cordon %s and evict %d pods (PDBs respected, DaemonSets stay)", p.Node, len(p.Evict))}
	if len(p.WaitsFor) > 0 {
		s = append(s, fmt.Sprintf("after the cordon, wait up to %d minutes for %d running jobs before evicting (then the round stops, the node cordoned):",
			p.JobWaitMinutes, len(p.WaitsFor)))
		for _, j := range Clip(p.WaitsFor, 20) {
			s = append(s, "wait for "+j)
		}
	}
	s = append(s, Clip(p.Evict, 40)...)
	for _, w := range p.Warnings {
		s = append(s, "warning: "+OneLine(w))
	}
	return s
}

// PackagePlan is the package set install_updates moves: the simulated
// apt-get full-upgrade, bound by its digest.
type PackagePlan struct {
	Node          string   `json:"node"`
	PackageDigest string   `json:"package_digest"`
	Lines         []string `json:"lines"`
	// AptLines are apt's own lines (Inst, Remv) the digest is computed
	// over: what a drift from the reviewed plan is shown against.
	AptLines      []string `json:"apt_lines,omitempty"`
	TargetKernel  string   `json:"target_kernel,omitempty"`
	RunningKernel string   `json:"running_kernel,omitempty"`
}

func (p PackagePlan) Step() round.Step { return round.StepInstall }
func (p PackagePlan) Target() string   { return p.Node }
func (p PackagePlan) Digest() string   { return p.PackageDigest }
func (p PackagePlan) Summary() []string {
	s := []string{fmt.Sprintf("install on %s: %d packages move (apt-get full-upgrade), nothing is removed", p.Node, len(p.Lines))}
	if p.TargetKernel != "" {
		s = append(s, "new kernel "+p.TargetKernel+" is installed beside "+p.RunningKernel+", which stays the default")
	}
	return append(s, Clip(p.Lines, 60)...)
}

// TrialBootPlan boots the new kernel once while the old entry stays the
// default. Entry ids carry the submenu path, as grub-reboot needs them.
type TrialBootPlan struct {
	Node          string `json:"node"`
	RunningKernel string `json:"running_kernel"`
	TargetKernel  string `json:"target_kernel"`
	OldEntry      string `json:"old_entry"`
	NewEntry      string `json:"new_entry"`
	PanicSeconds  int    `json:"panic_seconds"`
	BootID        string `json:"boot_id"`
}

func (p TrialBootPlan) Step() round.Step { return round.StepTrialBoot }
func (p TrialBootPlan) Target() string   { return p.Node }
func (p TrialBootPlan) Digest() string {
	return DigestOf("trial_boot", p.Node, p.RunningKernel, p.OldEntry, p.TargetKernel, p.NewEntry, fmt.Sprint(p.PanicSeconds))
}
func (p TrialBootPlan) Summary() []string {
	return []string{
		fmt.Sprintf("reboot %s once into %s (GRUB entry %s)", p.Node, p.TargetKernel, p.NewEntry),
		fmt.Sprintf("the default stays %s (GRUB entry %s) through a drop-in; panic=%d on the kernel command line", p.RunningKernel, p.OldEntry, p.PanicSeconds),
		fmt.Sprintf("current boot_id %s", p.BootID),
	}
}

// PromotePlan makes the trial-booted kernel the default, on the boot the
// trial boot proved and the checks ran on: its digest covers that boot, so
// a person's signature binds the boot they saw, and promote.sh refuses on
// a host that runs another kernel or another boot.
type PromotePlan struct {
	Node     string `json:"node"`
	Kernel   string `json:"kernel"`
	NewEntry string `json:"new_entry"`
	// BootID is the trial boot's boot id (/proc/sys/kernel/random/boot_id),
	// which the host, observed now, runs.
	BootID string `json:"boot_id"`
}

func (p PromotePlan) Step() round.Step { return round.StepPromote }
func (p PromotePlan) Target() string   { return p.Node }
func (p PromotePlan) Digest() string {
	return DigestOf("promote_kernel", p.Node, p.Kernel, p.NewEntry, p.BootID)
}

// ReviewedDigest is the part of the digest the reviewed plan fixes before
// any trial boot: node, kernel and entry. A window approval, signed before
// the boot exists, binds this; the boot is then held by the server's own
// observation (DecideOnTrialBoot) and by promote.sh.
func (p PromotePlan) ReviewedDigest() string {
	return DigestOf("promote_kernel", p.Node, p.Kernel, p.NewEntry)
}

func (p PromotePlan) Summary() []string {
	return []string{
		fmt.Sprintf("make %s the default kernel of %s (remove the trial-boot drop-in, update-grub)", p.Kernel, p.Node),
		fmt.Sprintf("only while %s runs the boot its trial boot proved and verify checked: boot id %s on %s", p.Node, p.BootID, p.Kernel),
	}
}

// WindowBound is the digest a window approval binds for p: the plan's
// digest, or for a plan that also binds what only the window itself
// observes (promote's boot), the part the reviewed plan fixes.
func WindowBound(p Plan) string {
	if r, ok := p.(interface{ ReviewedDigest() string }); ok {
		return r.ReviewedDigest()
	}
	return p.Digest()
}

// NodeRemoval is what autoremove takes off one node.
type NodeRemoval struct {
	Node          string   `json:"node"`
	RunningKernel string   `json:"running_kernel"`
	Removals      []string `json:"removals"`
}

// AutoremovePlan is apt-get autoremove --purge on every node of the round.
type AutoremovePlan struct {
	Nodes []NodeRemoval `json:"nodes"`
}

func (p AutoremovePlan) Step() round.Step { return round.StepAutoremove }
func (p AutoremovePlan) Target() string   { return FleetTarget }
func (p AutoremovePlan) Digest() string {
	parts := []string{"autoremove"}
	for _, n := range p.Nodes {
		parts = append(parts, n.Node+"="+strings.Join(n.Removals, ","))
	}
	return DigestOf(parts...)
}
func (p AutoremovePlan) Summary() []string {
	var s []string
	for _, n := range p.Nodes {
		line := fmt.Sprintf("%s (running %s): remove %s", n.Node, n.RunningKernel, strings.Join(n.Removals, " "))
		if len(n.Removals) == 0 {
			line = fmt.Sprintf("%s (running %s): nothing to remove", n.Node, n.RunningKernel)
		}
		s = append(s, OneLine(line))
	}
	return Clip(s, 150)
}

// FallbackDrillPlan crashes the new kernel once on purpose on the canary
// and expects GRUB to bring the old one back.
type FallbackDrillPlan struct {
	Node          string `json:"node"`
	RunningKernel string `json:"running_kernel"`
	TargetKernel  string `json:"target_kernel"`
	OldEntry      string `json:"old_entry"`
	NewEntry      string `json:"new_entry"`
	PanicSeconds  int    `json:"panic_seconds"`
}

func (p FallbackDrillPlan) Step() round.Step { return "" }
func (p FallbackDrillPlan) Target() string   { return p.Node }
func (p FallbackDrillPlan) Digest() string {
	return DigestOf("fallback_drill", p.Node, p.RunningKernel, p.OldEntry, p.TargetKernel, p.NewEntry)
}
func (p FallbackDrillPlan) Summary() []string {
	return []string{
		fmt.Sprintf("fallback drill on %s: the new kernel %s boots once and crashes on purpose after its sysctls load", p.Node, p.TargetKernel),
		fmt.Sprintf("expected: the host reboots by itself into %s (GRUB entry %s), which stays the default", p.RunningKernel, p.OldEntry),
	}
}

// Encode is the plan as the journal keeps it beside its digest.
func Encode(p Plan) (json.RawMessage, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode the %s plan of %s: %w", p.Step(), p.Target(), err)
	}
	return b, nil
}

// Approved reads the plan an attempt in flight was approved for, and
// checks it against the digest journaled with it: re-entry acts on this
// value only.
func Approved[P Plan](a *round.Attempt) (P, error) {
	var p P
	if a == nil || a.PlanDigest == "" || len(a.Plan) == 0 {
		return p, ErrNoApprovedPlan
	}
	if err := json.Unmarshal(a.Plan, &p); err != nil {
		return p, fmt.Errorf("%w: %v", ErrNoApprovedPlan, err)
	}
	if got := p.Digest(); got != a.PlanDigest {
		return p, fmt.Errorf("%w: the journaled plan hashes to %s, the approval was for %s", ErrNoApprovedPlan, got, a.PlanDigest)
	}
	return p, nil
}

// Clip keeps the first max lines and says how many more there were.
func Clip(lines []string, max int) []string {
	if len(lines) <= max {
		return lines
	}
	return append(lines[:max:max], fmt.Sprintf("... and %d more", len(lines)-max))
}

// OneLine folds whitespace to single spaces.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
