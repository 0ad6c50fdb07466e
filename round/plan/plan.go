// Package plan owns the round's plan as people review it: the fleet-wide
// preflight turned into one document per round (rounds/<id>/plan.md for
// people, plan.json for the server) with a digest per node and step, a
// digest of the whole plan, the blockers that stop the round before the
// first cordon, the signatures the round needs, and the drift between a
// reviewed node plan and the live one.
//
// It is pure: it does not talk to hosts, the cluster or Git, and imports
// none of the project's host, kube, intent or policy packages. The tool
// layer gathers the facts (inspection, simulation, drain preview,
// placement) into the small types declared here and calls Build, Diff and
// Markdown.
package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/mcp-patch/mcp-patch/round/promotion"
)

// Step names a destructive step a node's plan binds.
type Step string

// The steps of a node's window that a person approves, in order. Fallback
// drill applies to the canary only.
const (
	StepDrain     Step = "drain"
	StepInstall   Step = "install"
	StepDrill     Step = "fallback_drill"
	StepTrialBoot Step = "trial_boot"
	StepPromote   Step = "promote"
)

// WindowSteps are the steps bound in every node's plan, in order.
var WindowSteps = []Step{StepDrain, StepInstall, StepTrialBoot, StepPromote}

// Approval modes (intent settings: approvals).
const (
	// PerStep: one signature per destructive step (the default; always for
	// control-plane nodes and autoremove).
	PerStep = "per_step"
	// PerWindow: one signature for a node's whole window, bound to every
	// step digest of that node in the signed plan.
	PerWindow = "per_window"
)

// Roles of a node in the plan (the same words as the round's order).
const (
	RoleControlPlane = "control-plane"
	RoleGPU          = "gpu"
	RoleOther        = "other"
)

// Packages are the packages that move on a node, grouped for people. Each
// entry reads "name old -> new" ("name (new) -> version" for a new one).
type Packages struct {
	Kernel     []string `json:"kernel"`
	Nvidia     []string `json:"nvidia"`
	Kubernetes []string `json:"kubernetes"`
	Other      []string `json:"other"`
}

// Count is the number of packages that move.
func (p Packages) Count() int {
	return len(p.Kernel) + len(p.Nvidia) + len(p.Kubernetes) + len(p.Other)
}

// Grub is what the trial boot will use: the GRUB entry ids (submenu path
// included) of the running and the target kernel.
type Grub struct {
	// Old boots the running kernel; it stays the default through the trial.
	Old string `json:"old"`
	// New boots the target kernel once. Before install the entry does not
	// exist yet: it is the id update-grub will give it, derived from the
	// running kernel's entry (NewPredicted).
	New          string `json:"new"`
	NewPredicted bool   `json:"new_predicted,omitempty"`
	// PanicSeconds is kernel.panic for the trial boot.
	PanicSeconds int `json:"panic_seconds"`
}

// Workload is one owner of pods a drain evicts.
type Workload struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	// Pods is how many of its pods the drain evicts now. It is shown, not
	// bound: pods of a Deployment move between nodes during a round.
	Pods int `json:"pods"`
}

// Key names the workload: namespace/kind/name.
func (w Workload) Key() string { return w.Namespace + "/" + w.Kind + "/" + w.Name }

// Drain is what the node's drain would evict now (the server's preview,
// with a dry-run eviction of each pod).
type Drain struct {
	// Workloads are the owners of the pods evicted, sorted by Key.
	Workloads []Workload `json:"workloads"`
	// Pods is the number of pods evicted.
	Pods int `json:"pods"`
	// Refused are pods whose dry-run eviction the API server refused now
	// ("ns/pod: reason"); a PDB that can never allow it is a blocker.
	Refused []string `json:"refused,omitempty"`
	// EmptyDirData says how many evicted pods lose emptyDir data.
	EmptyDirData int `json:"emptydir_data,omitempty"`
	// WaitsFor are the jobs (the intent's drain.wait_for_jobs) running on
	// the node now, "ns/pod": the drain cordons, then waits for them, up to
	// JobWaitMinutes. Not in the digest: jobs come and go.
	WaitsFor       []string `json:"waits_for,omitempty"`
	JobWaitMinutes int      `json:"job_wait_minutes,omitempty"`
}

// Node is one node's reviewed plan: what moves, what boots, what the
// drain evicts, what runs there, and a digest for each step.
type Node struct {
	Node     string `json:"node"`
	Position int    `json:"position"`
	Role     string `json:"role"`
	GPU      bool   `json:"gpu,omitempty"`
	Canary   bool   `json:"canary,omitempty"`
	// Reason is why the node sits where it does in the order.
	Reason  string `json:"reason"`
	Running string `json:"running_kernel"`
	Target  string `json:"target_kernel"`
	// PackageDigest is the apt plan digest install binds; PackageLines the
	// lines it is computed over.
	PackageDigest string   `json:"package_digest"`
	PackageLines  []string `json:"package_lines,omitempty"`
	Packages      Packages `json:"packages"`
	Grub          Grub     `json:"grub"`
	Drain         Drain    `json:"drain"`
	// DriverContainer says where a driver-container GPU server's driver
	// for the target kernel comes from (nil: host packages).
	DriverContainer *DriverContainerPlan `json:"driver_container,omitempty"`
	// Others are who else maintained the node at plan time (the GPU
	// Operator's driver upgrade, another NodeMaintenance, kured's lock, a
	// person's cordon or taint), in words: information, since the round
	// looks again before each cordon; not part of any digest.
	Others []string `json:"others,omitempty"`
	// Runs says what runs there that the round cares about (Postgres
	// primary or replica, API VIP, webhook replicas, model pods, GPUs).
	Runs     []string  `json:"runs"`
	Risks    []string  `json:"risks"`
	Blockers []Blocker `json:"blockers"`
	// Approval is PerStep or PerWindow for this node's window.
	Approval string `json:"approval"`
	// Steps maps each bound step to its digest.
	Steps map[Step]string `json:"steps"`
	// Window is the digest over every step digest: what a per-window
	// approval binds.
	Window string `json:"window_digest"`
}

// Signatures is how many signatures the node's window needs.
func (n Node) Signatures() int {
	if n.Approval == PerWindow {
		return 1
	}
	return len(n.steps())
}

// steps are the steps this node's window runs that need a signature.
func (n Node) steps() []Step {
	if n.Canary {
		return []Step{StepDrain, StepInstall, StepDrill, StepTrialBoot, StepPromote}
	}
	return WindowSteps
}

// Blocker is something that stops the round before the first cordon.
type Blocker struct {
	Node  string `json:"node"`
	Cause string `json:"cause"`
	// Fix says what a person does about it.
	Fix string `json:"fix"`
	// Check is the preflight check of the node it fails: "simulate" for
	// the package set (removals, holds), "inspect" for the rest.
	Check string `json:"check"`
}

// Checks a blocker fails.
const (
	CheckInspect  = "inspect"
	CheckSimulate = "simulate"
	// CheckPromotion: the target kernel has no proof from the upstream
	// environment (round/promotion).
	CheckPromotion = "promotion"
)

func (b Blocker) String() string {
	s := b.Node + ": " + b.Cause
	if b.Fix != "" {
		s += " (" + b.Fix + ")"
	}
	return s
}

// Note is a lesson or open question of the intent that bears on the round.
type Note struct {
	Component string `json:"component"`
	Kind      string `json:"kind"` // "lesson" or "open_question"
	Ref       string `json:"ref,omitempty"`
	Text      string `json:"text"`
	// Source is where a lesson carried from the upstream environment was
	// written ("staging, round staging-2026-11"); empty for this
	// environment's own.
	Source string `json:"source,omitempty"`
}

// Fleet is the whole reviewed plan of a round.
type Fleet struct {
	Round string `json:"round"`
	// Revision counts re-plans (0 for the first plan).
	Revision int    `json:"revision"`
	Nodes    []Node `json:"nodes"`
	// Placement is what runs where for the round, in words.
	Placement []string `json:"placement"`
	Notes     []Note   `json:"notes"`
	// Risks are fleet-wide: what the intent asks that the cluster cannot
	// honour as written (a selector that picks nothing). In the digest.
	Risks    []string  `json:"risks"`
	Summary  []string  `json:"summary"`
	Blockers []Blocker `json:"blockers"`
	// TestEnvironment says whether the target kernel closed a round in
	// the test environment the intent names ("" when it names none).
	TestEnvironment string `json:"test_environment,omitempty"`
	// Promotion is the promotion gate's verdict on each target kernel,
	// when the round's environment has an upstream one.
	Promotion *FleetPromotion `json:"promotion,omitempty"`
	// Signatures is what this plan needs: the plan itself, each node's
	// window as sized, autoremove. PerStepSignatures is the same with one
	// signature per destructive step everywhere, for comparison.
	Signatures        int `json:"signatures"`
	PerStepSignatures int `json:"per_step_signatures"`
	// Digest is over the round, the order and every node's window digest:
	// what a person signs before the first cordon.
	Digest string `json:"digest"`
}

// FleetPromotion is the promotion gate as the plan shows it.
type FleetPromotion struct {
	Environment string              `json:"environment"`
	Upstream    string              `json:"upstream"`
	Kernels     []promotion.Verdict `json:"kernels"`
}

// Node returns the named node's plan.
func (f Fleet) Node(name string) (Node, bool) {
	i := slices.IndexFunc(f.Nodes, func(n Node) bool { return n.Node == name })
	if i < 0 {
		return Node{}, false
	}
	return f.Nodes[i], true
}

// Ready reports whether the plan has no blocker.
func (f Fleet) Ready() bool { return len(f.Blockers) == 0 }

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// DrainDigest binds which workloads a drain evicts and the pods refused
// now, not pod names or counts: pods of a Deployment are replaced and move
// between nodes while the round goes on.
func DrainDigest(node string, d Drain) string {
	parts := []string{"drain", node}
	for _, w := range d.Workloads {
		parts = append(parts, w.Key())
	}
	return digest(parts...)
}

// TrialBootDigest binds the GRUB entries, the target kernel and the panic
// timeout of a trial boot.
func TrialBootDigest(node, target string, g Grub) string {
	return digest("trial_boot", node, target, g.Old, g.New, strconv.Itoa(g.PanicSeconds))
}

// PromoteDigest binds the kernel and entry promote makes the default.
func PromoteDigest(node, target, entry string) string {
	return digest("promote", node, target, entry)
}

// seal computes the node's step digests and its window digest.
func (n *Node) seal() {
	n.Steps = map[Step]string{
		StepDrain:     DrainDigest(n.Node, n.Drain),
		StepInstall:   n.PackageDigest,
		StepTrialBoot: TrialBootDigest(n.Node, n.Target, n.Grub),
		StepPromote:   PromoteDigest(n.Node, n.Target, n.Grub.New),
	}
	parts := []string{"window", n.Node, n.Approval}
	for _, s := range WindowSteps {
		parts = append(parts, string(s)+"="+n.Steps[s])
	}
	n.Window = digest(parts...)
}

// seal computes every count and digest of the fleet plan.
func (f *Fleet) seal() {
	f.Signatures, f.PerStepSignatures = 2, 2 // the plan itself, autoremove
	parts := []string{"plan", f.Round}
	for i := range f.Nodes {
		n := &f.Nodes[i]
		n.seal()
		f.Signatures += n.Signatures()
		f.PerStepSignatures += len(n.steps())
		parts = append(parts, n.digestPart())
	}
	f.Digest = fleetDigest(parts, f.Blockers, f.Risks)
}

// digestPart is the node's part of the fleet digest.
func (n *Node) digestPart() string { return fmt.Sprintf("%d:%s=%s", n.Position, n.Node, n.Window) }

// fleetDigest is the digest over the round's parts, its blockers and its
// fleet-wide risks.
func fleetDigest(parts []string, blockers []Blocker, risks []string) string {
	for _, b := range blockers {
		parts = append(parts, "blocker:"+b.String())
	}
	for _, r := range risks {
		parts = append(parts, "risk:"+r)
	}
	return digest(parts...)
}

// Encode writes the plan as plan.json bytes.
func (f *Fleet) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode plan of round %s: %w", f.Round, err)
	}
	return append(b, '\n'), nil
}

// Decode reads plan.json bytes and checks that its digests are its own: a
// plan edited by hand after it was sealed is refused.
func Decode(b []byte) (Fleet, error) {
	var f Fleet
	if err := json.Unmarshal(b, &f); err != nil {
		return Fleet{}, fmt.Errorf("read plan: %w", err)
	}
	want := f.Digest
	f.seal()
	if f.Digest != want {
		return Fleet{}, fmt.Errorf("read plan of round %s: its digest %s does not match its content (%s): the file was changed after it was sealed", f.Round, want, f.Digest)
	}
	return f, nil
}
