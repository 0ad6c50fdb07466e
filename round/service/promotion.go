package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/promotion"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// Environments (intent/environments.go) and the promotion gate
// (round/promotion): a server serves one environment of the intent
// repository (config environment). A round in an environment with an
// upstream one plans only kernels that closed a green round upstream and
// soaked there, as the upstream round's outcome record says under a
// person's signature; a person may promote one anyway with a signed
// statement kept in this server's state directory.

// promotedTool is the tool a kernel's promotion statement is kept under in
// the round's proofs (Step names the kernel).
const promotedTool = "kernel_promoted"

// Environment is the environment this server serves, as the intent
// repository's environments.yaml defines it, with all of them; ok is false
// when the config names none (the repository is served as one
// environment).
func (d *Service) Environment() (env intent.Environment, all intent.Environments, ok bool, err error) {
	if d.Config == nil || d.Config.Environment == "" {
		return intent.Environment{}, nil, false, nil
	}
	if d.Config.IntentRepo == "" {
		return intent.Environment{}, nil, false, answer.Refuse("Start the server with --intent-repo PATH.", "environment "+d.Config.Environment+" is configured, but no intent repository is")
	}
	envs, err := intent.LoadEnvironments(d.Config.IntentRepo)
	if err != nil {
		return intent.Environment{}, nil, false, IntentError("read "+intent.EnvironmentsFile, err)
	}
	if err := envs.Check(d.Config.Environment); err != nil {
		return intent.Environment{}, nil, false, answer.Refuse("Fix environment in the server's config or the repository's "+intent.EnvironmentsFile+".", err.Error())
	}
	env, _ = envs.Get(d.Config.Environment)
	return env, envs, true, nil
}

// RoundOfEnvironment refuses a round id that is not named after
// environment env ("<env>-<month>"; envs.Of): rounds of the environments of
// one repository never share an id, and prod's server does not plan
// prod-eu's round. Any id goes when env is "". Pure.
func RoundOfEnvironment(id, env string, envs intent.Environments) error {
	if env == "" {
		return nil
	}
	if owner := envs.Of(id); owner != env {
		return answer.Refuse(fmt.Sprintf("Name the round %s-<month>, e.g. %s-2026-12.", env, env),
			fmt.Sprintf("round %s is not a round of environment %s: the rounds of each environment are named after it", id, env), "nothing was changed")
	}
	return nil
}

// EnvironmentReach refuses a server whose cluster or inventory is not its
// environment's, as environments.yaml names them: production's server
// pointed at staging's kubeconfig context (or the reverse) would patch the
// wrong cluster. kubeContext is the context in use ("" in a cluster: not
// compared); inventory is the config's ssh.inventory, repoRoot the
// intent repository that env.Inventory is relative to. Pure.
func EnvironmentReach(env intent.Environment, kubeContext, inventory, repoRoot string) error {
	if env.Context != "" && kubeContext != "" && kubeContext != env.Context {
		return answer.Refuse(fmt.Sprintf("Point this server at environment %s's cluster (kubeconfig context %s), or set environment to the one it serves.", env.Name, env.Context),
			fmt.Sprintf("this server uses kubeconfig context %s, and environment %s is context %s in %s", kubeContext, env.Name, env.Context, intent.EnvironmentsFile), "nothing was changed")
	}
	if env.Inventory != "" && inventory != "" {
		want := filepath.Clean(filepath.Join(repoRoot, env.Inventory))
		if got, err := filepath.Abs(inventory); err == nil && filepath.Clean(got) != want {
			return answer.Refuse(fmt.Sprintf("Set ssh.inventory to %s, or set environment to the one this inventory serves.", want),
				fmt.Sprintf("this server's SSH inventory is %s, and environment %s's is %s in %s", got, env.Name, env.Inventory, intent.EnvironmentsFile), "nothing was changed")
		}
	}
	return nil
}

// PromotionGate is the promotion gate of round roundID: nil when this
// server serves no environment or its environment has no upstream one.
// Upstream outcome records that do not verify are in the gate's Rejected,
// named; a gate that cannot be built at all is an error (the plan stops).
func (d *Service) PromotionGate(ctx context.Context, roundID string) (*promotion.Gate, error) {
	env, _, ok, err := d.Environment()
	if err != nil || !ok || env.Upstream == "" {
		return nil, err
	}
	if d.Approvals == nil {
		return nil, answer.Refuse("Ask the operator to configure approvals.allowed_signers.",
			"environment "+env.Name+" plans only kernels proven in "+env.Upstream+" by signed outcome records, and no allowed_signers file is configured to verify them")
	}
	proofs, rejected, err := promotion.Load(ctx, d.Config.IntentRepo, env.Upstream, d.verifyOutcome)
	if err != nil {
		return nil, answer.Fail("Check the intent repository's rounds/ folder and call again.", "read the outcome records of "+env.Upstream+": "+err.Error())
	}
	promoted, err := d.promotions(ctx, roundID, env.Name)
	if err != nil {
		return nil, err
	}
	return &promotion.Gate{Environment: env.Name, Upstream: env.Upstream, Soak: env.PromotionSoak(), Now: d.Clock(),
		Proofs: proofs, Rejected: rejected, Promoted: promoted}, nil
}

// JournalPromotion records in round s the promotion gate's verdicts as
// plan f took them (round.KindPromotion), each only when it says something
// new of its kernel: the round's report lists them, a person's promotion
// as a residual risk.
func JournalPromotion(s *window.Round, f plan.Fleet) error {
	if f.Promotion == nil {
		return nil
	}
	st := s.Journal.State()
	for _, v := range f.Promotion.Kernels {
		detail := v.Why
		if v.Risk != "" {
			detail += "; residual risk: " + v.Risk
		}
		if last, ok := st.LastPromotion(v.Kernel); ok && last.Detail == detail {
			continue
		}
		if _, err := s.Journal.Promotion(v.Kernel, detail, ""); err != nil {
			return fmt.Errorf("journal the promotion of %s: %w", v.Kernel, err)
		}
	}
	return nil
}

// verifyOutcome verifies a committed outcome statement (promotion.VerifyFunc).
func (d *Service) verifyOutcome(ctx context.Context, text string) (promotion.Statement, error) {
	a, req, err := d.Approvals.VerifyRecord(ctx, text, policy.KindRoundOutcome)
	if err != nil {
		return promotion.Statement{}, err
	}
	return promotion.Statement{Environment: req.Environment, Round: req.Round, Digest: req.OutcomeDigest, Summary: req.Summary, Principal: a.Principal}, nil
}

// promotions are the kernels a person promoted into round roundID of
// environment env: the statements kept in this server's state directory,
// each verified again now and bound to this environment and round. One
// that no longer verifies counts for nothing (the log says why).
func (d *Service) promotions(ctx context.Context, roundID, env string) ([]promotion.Promoted, error) {
	ps, err := d.proofs(roundID)
	if err != nil {
		return nil, answer.Fail("Ask the operator to fix the server's state directory.", "read the kept statements of round "+roundID+": "+err.Error())
	}
	var out []promotion.Promoted
	for _, p := range ps {
		if p.Tool != promotedTool {
			continue
		}
		a, req, err := d.Approvals.VerifyRecord(ctx, p.Approval, policy.KindKernelPromoted)
		if err == nil && (req.Environment != env || req.Round != roundID || req.Kernel != p.Step) {
			err = fmt.Errorf("it was signed for %s in round %s of %s", req.Kernel, req.Round, req.Environment)
		}
		if err != nil {
			d.Log.Warn("a kept kernel promotion counts for nothing", "round", roundID, "approval", p.ApprovalID, "err", err)
			continue
		}
		out = append(out, promotion.Promoted{Kernel: req.Kernel, Principal: a.Principal, Reason: req.Reason, ApprovalID: a.ID})
	}
	return out, nil
}

// Certified is a round's outcome record certified by a person and
// committed.
type Certified struct {
	Principal string
	// Record and Statement are the repository paths of the files.
	Record, Statement string
	Commit            string
	Lines             []string
}

// CertifyOutcome writes the outcome record of closed round roundID (the
// open or last round when empty) for the environments downstream: what the
// round did with each kernel, from the round's own anchored state
// (window.OutcomeOf). Without an attestation it answers the statement a
// person signs; with one it verifies it against the record it derives
// now, writes rounds/<id>/outcome.json and outcome.statement and commits
// them.
func (d *Service) CertifyOutcome(ctx context.Context, roundID, attestation string) (Certified, error) {
	env, envs, ok, err := d.Environment()
	if err != nil {
		return Certified{}, err
	}
	if !ok {
		return Certified{}, answer.Refuse("Set environment in the server's config (the repository's "+intent.EnvironmentsFile+" names them).",
			"this server serves no named environment: an outcome record is what an environment downstream plans from", "nothing was written")
	}
	if d.Book == nil {
		return Certified{}, answer.Refuse("Start the server with --intent-repo.", "no intent repository is configured")
	}
	if roundID == "" {
		roundID = d.Book.CurrentID()
	}
	if roundID == "" {
		roundID = lastRound(d.Book.Root, env.Name, envs)
	}
	if roundID == "" {
		return Certified{}, answer.Refuse("Name the round: round ids are under rounds/ in the intent repository.", "environment "+env.Name+" has no round here", "nothing was written")
	}
	if err := RoundOfEnvironment(roundID, env.Name, envs); err != nil {
		return Certified{}, err
	}
	st, _, err := d.RoundState(roundID)
	if err != nil {
		return Certified{}, err
	}
	if !st.Closed {
		return Certified{}, answer.Refuse("Close the round first (close_round, after the soak and autoremove, or after an abort).",
			"round "+roundID+" is not closed: its outcome is not known yet", "nothing was written")
	}
	o := window.OutcomeOf(st, env.Name)
	// The NVIDIA packages installed with each kernel, from the plan the
	// person signed: without it, the record proves no NVIDIA package.
	if f, _, err := d.SignedPlan(ctx, roundID); err == nil {
		o = OutcomeNvidia(o, f)
	} else {
		d.Log.Warn("the outcome names no NVIDIA package: the round's signed plan cannot be read", "round", roundID, "err", err)
	}
	raw, err := o.Encode()
	if err != nil {
		return Certified{}, fmt.Errorf("encode the outcome of round %s: %w", roundID, err)
	}
	digest, lines := promotion.Digest(raw), o.Lines()
	if d.Approvals == nil {
		return Certified{}, answer.Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
	}
	fields := policy.AttestationFields{Environment: env.Name, Round: roundID, Digest: digest}
	if attestation == "" {
		text, exp, err := d.Approvals.Attestation(policy.KindRoundOutcome, fields, lines)
		if err != nil {
			return Certified{}, fmt.Errorf("build the outcome statement: %w", err)
		}
		return Certified{Lines: lines}, statementToSign(text, lines, exp)
	}
	a, req, err := d.Approvals.VerifyRecord(ctx, attestation, policy.KindRoundOutcome)
	if err != nil {
		return Certified{}, answer.Refuse("Ask the person to sign the statement this tool answers without attestation.", "statement refused: "+err.Error(), "nothing was written")
	}
	st2 := promotion.Statement{Environment: req.Environment, Round: req.Round, Digest: req.OutcomeDigest, Summary: req.Summary, Principal: a.Principal}
	if why := promotion.Check(st2, roundID, o, raw); why != "" {
		return Certified{}, answer.Refuse("Ask the person to sign the statement this tool answers now (call again without attestation).",
			"statement refused: "+why, "nothing was written")
	}
	dir := d.Book.Dir(roundID)
	for _, f := range []struct {
		name string
		data []byte
	}{{promotion.OutcomeFile, raw}, {promotion.StatementFile, []byte(attestation)}} {
		if err := round.WriteFile(d.Book.Root, dir, f.name, f.data); err != nil {
			return Certified{}, answer.Fail("Check the intent repository's working copy and call again.", "write "+f.name+" of round "+roundID+": "+err.Error())
		}
	}
	out := Certified{Principal: a.Principal, Lines: lines,
		Record: "rounds/" + roundID + "/" + promotion.OutcomeFile, Statement: "rounds/" + roundID + "/" + promotion.StatementFile}
	r, err := d.IntentRepo(roundID)
	if err != nil {
		return out, err
	}
	c, err := r.CommitFiles(ctx, fmt.Sprintf("round %s: outcome in %s certified by %s", roundID, env.Name, a.Principal), []string{out.Record, out.Statement})
	if errors.Is(err, intent.ErrNoChange) {
		out.Commit = "(no change)"
		return out, nil
	}
	if err != nil {
		return out, IntentError("commit the outcome record", err)
	}
	out.Commit = c.Hash
	return out, nil
}

// lastRound is the last round of environment env under root's rounds/
// ("<env>-<month>" names sort by month): "" when there is none.
func lastRound(root, env string, envs intent.Environments) string {
	entries, err := os.ReadDir(filepath.Join(root, "rounds"))
	if err != nil {
		return ""
	}
	last := ""
	for _, e := range entries {
		if e.IsDir() && envs.Of(e.Name()) == env && round.ValidRoundID(e.Name()) && e.Name() > last {
			last = e.Name()
		}
	}
	return last
}

// OutcomeNvidia adds to each kernel of o the NVIDIA packages the signed
// plan f installed with it on the nodes where it was promoted (pure).
func OutcomeNvidia(o promotion.Outcome, f plan.Fleet) promotion.Outcome {
	ks := slices.Clone(o.Kernels)
	for i, k := range ks {
		var nv []string
		for _, n := range f.Nodes {
			if n.Target == k.Kernel && slices.Contains(k.Promoted, n.Node) {
				nv = append(nv, plan.NvidiaInstalled(n.Packages.Nvidia)...)
			}
		}
		slices.Sort(nv)
		ks[i].Nvidia = slices.Compact(nv)
		if len(ks[i].Nvidia) == 0 {
			ks[i].Nvidia = nil
		}
	}
	o.Kernels = ks
	return o
}

// Promoted is a person's promotion of a kernel, recorded.
type Promoted struct {
	Principal string
	Verdict   promotion.Verdict
}

// PromoteUnproven keeps a person's signed statement promoting kernel into
// round roundID of this server's environment without proof from upstream:
// the plan then takes the kernel and names the residual risk. Without an
// attestation it answers the statement to sign, which names what the
// gate finds missing now.
func (d *Service) PromoteUnproven(ctx context.Context, roundID, kernel, reason, attestation string) (Promoted, error) {
	env, envs, ok, err := d.Environment()
	if err != nil {
		return Promoted{}, err
	}
	if !ok || env.Upstream == "" {
		return Promoted{}, answer.Refuse("Nothing to do: only an environment with an upstream one has a promotion gate.",
			"this server's environment has no upstream environment", "nothing was recorded")
	}
	if roundID == "" {
		roundID = d.CurrentRoundID()
	}
	if !round.ValidRoundID(roundID) {
		return Promoted{}, answer.Refuse("Use a round id such as "+env.Name+"-2026-12.", fmt.Sprintf("round id %q is not valid", roundID))
	}
	if err := RoundOfEnvironment(roundID, env.Name, envs); err != nil {
		return Promoted{}, err
	}
	gate, err := d.PromotionGate(ctx, roundID)
	if err != nil {
		return Promoted{}, err
	}
	v := gate.Judge(kernel)
	if v.Proven {
		return Promoted{Verdict: v}, answer.Refuse("Nothing to do: plan the round.", kernel+" may be planned already: "+v.Why, "nothing was recorded")
	}
	summary := []string{"not proven in " + env.Upstream + ": " + v.Why}
	fields := policy.AttestationFields{Environment: env.Name, Round: roundID, Kernel: kernel, Reason: reason}
	if attestation == "" {
		text, exp, err := d.Approvals.Attestation(policy.KindKernelPromoted, fields, summary)
		if err != nil {
			return Promoted{}, answer.Refuse("Give a kernel release (uname -r, e.g. 6.8.0-49-generic) and a reason in plain ASCII.", "cannot build the statement: "+err.Error(), "nothing was recorded")
		}
		return Promoted{Verdict: v}, statementToSign(text, summary, exp)
	}
	a, req, err := d.Approvals.VerifyRecord(ctx, attestation, policy.KindKernelPromoted)
	if err == nil {
		err = promotedMatches(req, fields, summary)
	}
	if err != nil {
		return Promoted{}, answer.Refuse("Ask the person to sign the statement this tool answers now (call again without attestation).", "statement refused: "+err.Error(), "nothing was recorded")
	}
	if err := d.KeepProof(roundID, Proof{Tool: promotedTool, Step: kernel, Node: round.FleetWide, ApprovalID: a.ID, Approval: attestation}); err != nil {
		return Promoted{}, answer.Refuse("Ask the operator to fix the server's state directory.", "the statement could not be kept: "+err.Error(), "nothing was recorded")
	}
	// Used once: the same statement cannot be kept twice, and one signed
	// long ago is not taken now.
	if err := d.Approvals.Consume(ctx, a); err != nil {
		return Promoted{}, answer.Refuse("Ask the person to sign a fresh statement.", "statement could not be used: "+err.Error())
	}
	gate.Promoted = append(gate.Promoted, promotion.Promoted{Kernel: kernel, Principal: a.Principal, Reason: reason, ApprovalID: a.ID})
	return Promoted{Principal: a.Principal, Verdict: gate.Judge(kernel)}, nil
}

// promotedMatches holds a verified promotion statement to what this call
// would record: environment, round, kernel, reason and the summary the
// server derives now. Pure.
func promotedMatches(req policy.Request, want policy.AttestationFields, summary []string) error {
	switch {
	case req.Environment != want.Environment:
		return fmt.Errorf("it was signed for environment %s, this server serves %s", req.Environment, want.Environment)
	case req.Round != want.Round:
		return fmt.Errorf("it was signed for round %s, not %s", req.Round, want.Round)
	case req.Kernel != want.Kernel:
		return fmt.Errorf("it was signed for kernel %s, not %s", req.Kernel, want.Kernel)
	case req.Reason != want.Reason:
		return errors.New("its reason is not the one given")
	case !slices.Equal(req.Summary, summary):
		return errors.New("the summary the person signed is not what the gate finds now")
	}
	return nil
}
