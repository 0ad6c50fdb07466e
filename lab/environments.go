package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/promotion"
)

// Staging before production, in the lab: two labs, each its own control
// plane, hosts, server configuration and state directory, each serving one
// environment of the example intent's environments.yaml, sharing one
// intent repository through a bare remote (each keeps its own working
// copy) and one lab clock. Staging's round runs first and a person (the
// lab's key) certifies its outcome; its round branch is pushed to the
// remote and production's working copy merges it, as people would after
// review; production's plan is refused while staging's soak runs, and
// plans the kernel staging proved once the clock has passed it.

// The environments of the example intent the two labs serve.
const (
	StagingEnvironment    = "staging"
	ProductionEnvironment = "production"
)

// IntentRemoteDir is the shared intent remote's folder under the
// directory SeedIntentRemote is given.
const IntentRemoteDir = "intent.git"

// SeedIntentRemote makes the shared intent repository of the labs of
// several environments: a bare repository dir/intent.git whose main holds
// examples/intent as it is (environments.yaml included). Each lab clones
// it (Options.IntentRemote) and commits its own endpoints on top.
func SeedIntentRemote(dir string) (string, error) {
	seed := filepath.Join(dir, "intent-seed")
	remote := filepath.Join(dir, IntentRemoteDir)
	if err := os.RemoveAll(seed); err != nil {
		return "", err
	}
	if err := copyExampleIntent(seed); err != nil {
		return "", fmt.Errorf("lab: seed the intent remote: %w", err)
	}
	for _, step := range []struct {
		dir  string
		args []string
	}{
		{seed, []string{"init", "-q", "-b", "main"}},
		{seed, []string{"add", "-A"}},
		{seed, []string{"commit", "-q", "-m", "Intent of the lab platform (from examples/intent)"}},
		{dir, []string{"clone", "-q", "--bare", seed, remote}},
	} {
		if err := git(step.dir, step.args...); err != nil {
			return "", fmt.Errorf("lab: seed the intent remote: %w", err)
		}
	}
	if err := os.RemoveAll(seed); err != nil {
		return "", err
	}
	return remote, nil
}

// StagingOptions is the staging lab's shape beside a production lab of
// opts: two control-plane hosts and one GPU server (the canary), emulated,
// on a control plane of its own; the rest as opts. Two control-plane
// hosts, not one: the platform's Postgres runs on them, and a
// single-instance CloudNativePG cluster has no replica to switch over to,
// so its primary's node can never be drained (a plan blocker, as it would
// be on a real cluster).
func StagingOptions(opts Options) Options {
	opts.ControlPlanes, opts.Canary, opts.GPUServers = 2, 1, 0
	opts.VMCanary, opts.VMFirmware = false, ""
	opts.Environment = StagingEnvironment
	return opts
}

// EnvironmentsResult is what the round through both environments left.
type EnvironmentsResult struct {
	StagingRound, ProductionRound string
	Staging, Production           DemoResult
	// Certified is the commit of staging's outcome record on its round
	// branch, Principal who signed its statement.
	Certified, Principal string
	// Refused is production's plan_round answer while staging's soak ran
	// (status and reasons).
	Refused []string
	// SoakUntil is when staging's kernel had soaked promotion_soak_hours,
	// on the lab clock.
	SoakUntil time.Time
	// Proof is production's plan.md section "Promotion from staging".
	Proof []string
}

// RunEnvironments runs round <env>-<month> in staging, certifies its
// outcome with the lab's key, brings staging's round branch to
// production's working copy through the shared remote, checks that
// production's plan is refused while staging's soak runs, passes the soak
// on the shared lab clock, and runs production's round from its plan (which
// shows the proof) to its close. Lines go to w as each step ends.
func RunEnvironments(ctx context.Context, staging, production *Lab, month string, w io.Writer, log *slog.Logger) (res EnvironmentsResult, err error) {
	if staging.Clock != production.Clock {
		return res, errors.New("lab: staging and production must share one lab clock (Options.Clock)")
	}
	envs, err := intent.LoadEnvironments(production.IntentRepo)
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	env, ok := envs.Get(production.Environment)
	if !ok || env.Upstream == "" || env.Upstream != staging.Environment {
		return res, fmt.Errorf("lab: environment %q of %s has no upstream %q", production.Environment, intent.EnvironmentsFile, staging.Environment)
	}
	res.StagingRound, res.ProductionRound = staging.Environment+"-"+month, production.Environment+"-"+month
	for _, id := range []string{res.StagingRound, res.ProductionRound} {
		if !round.ValidRoundID(id) {
			return res, fmt.Errorf("lab: %q is not a round id: give the month as YYYY-MM", id)
		}
	}

	fmt.Fprintf(w, "%s: round %s on its own control plane (%d hosts)\n", staging.Environment, res.StagingRound, staging.Hosts())
	res.Staging, err = staging.RunRound(ctx, res.StagingRound, w, log)
	if err != nil {
		return res, fmt.Errorf("lab: %s's round: %w", staging.Environment, err)
	}
	if !res.Staging.Outcome.Closed {
		return res, fmt.Errorf("lab: %s's round stopped: %+v", staging.Environment, res.Staging.Outcome.Stopped)
	}
	if res.Principal, err = staging.decide(ctx, log, map[string]any{"decision": "outcome_certified"}); err != nil {
		return res, err
	}
	if res.Certified, err = gitOutput(staging.IntentRepo, "rev-parse", res.Staging.Branch); err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	fmt.Fprintf(w, "%s: outcome of %s certified by %s (commit %s)\n", staging.Environment, res.StagingRound, res.Principal, short(res.Certified))

	branch := res.Staging.Branch
	if err := git(staging.IntentRepo, "push", "-q", "origin", branch); err != nil {
		return res, fmt.Errorf("lab: push %s's round to the intent remote: %w", staging.Environment, err)
	}
	// Each lab's working copy carries its own endpoints (model, OIDC
	// issuer, registry) on top of the shared intent: production keeps its
	// own where the two differ.
	if err := git(production.IntentRepo, "fetch", "-q", "origin", branch); err != nil {
		return res, fmt.Errorf("lab: fetch %s's round: %w", staging.Environment, err)
	}
	if err := git(production.IntentRepo, "merge", "-q", "--no-ff", "-X", "ours", "-m",
		"Merge "+staging.Environment+"'s round "+res.StagingRound+" (its record, outcome and lessons)", "FETCH_HEAD"); err != nil {
		return res, fmt.Errorf("lab: merge %s's round into %s's working copy: %w", staging.Environment, production.Environment, err)
	}
	fmt.Fprintf(w, "%s: %s pushed to the intent remote and merged into %s's working copy\n", staging.Environment, branch, production.Environment)

	raw, err := os.ReadFile(filepath.Join(production.IntentRepo, "rounds", res.StagingRound, promotion.OutcomeFile))
	if err != nil {
		return res, fmt.Errorf("lab: %s's outcome record in %s's working copy: %w", staging.Environment, production.Environment, err)
	}
	o, err := promotion.Decode(raw)
	if err != nil {
		return res, fmt.Errorf("lab: %s's outcome record: %w", staging.Environment, err)
	}
	res.SoakUntil = o.Closed.Add(env.PromotionSoak())

	status, reasons, err := production.planRound(ctx, res.ProductionRound, log)
	if err != nil {
		return res, err
	}
	res.Refused = append([]string{status}, reasons...)
	if status != "failed" || !strings.Contains(strings.Join(reasons, "\n"), "still soaking in "+staging.Environment) {
		return res, fmt.Errorf("lab: %s's plan while %s's soak runs (until %s) answered %s: %v", production.Environment, staging.Environment, res.SoakUntil.UTC().Format(time.RFC3339), status, reasons)
	}
	fmt.Fprintf(w, "%s: plan of %s refused while %s's soak runs: %s\n", production.Environment, res.ProductionRound, staging.Environment, stillSoaking(reasons))

	production.Clock.AdvanceTo(res.SoakUntil.Add(time.Second))
	fmt.Fprintf(w, "%s: soak of %s passed on the lab clock (%s, until %s)\n", staging.Environment, res.StagingRound,
		env.PromotionSoak(), res.SoakUntil.UTC().Format("2006-01-02 15:04 UTC"))
	// The refused plan stopped the round: a person resumes it.
	if _, err := production.decide(ctx, log, map[string]any{"decision": "resume",
		"reason": "the kernel has soaked in " + staging.Environment}); err != nil {
		return res, err
	}
	if status, reasons, err = production.planRound(ctx, res.ProductionRound, log); err != nil {
		return res, err
	}
	if status != "ok" {
		return res, fmt.Errorf("lab: %s's plan after %s's soak answered %s: %v", production.Environment, staging.Environment, status, reasons)
	}
	md, err := os.ReadFile(filepath.Join(production.IntentRepo, "rounds", res.ProductionRound, "plan.md"))
	if err != nil {
		return res, fmt.Errorf("lab: %s's plan.md: %w", production.Environment, err)
	}
	res.Proof = planSection(string(md), "Promotion from "+staging.Environment)
	if len(res.Proof) == 0 {
		return res, fmt.Errorf("lab: %s's plan.md has no section \"Promotion from %s\"", production.Environment, staging.Environment)
	}

	fmt.Fprintf(w, "\n%s: round %s (%d hosts), planned with the proof from %s\n", production.Environment, res.ProductionRound, production.Hosts(), staging.Environment)
	res.Production, err = production.RunRound(ctx, res.ProductionRound, w, log)
	if err != nil {
		return res, fmt.Errorf("lab: %s's round: %w", production.Environment, err)
	}
	if !res.Production.Outcome.Closed {
		return res, fmt.Errorf("lab: %s's round stopped: %+v", production.Environment, res.Production.Outcome.Stopped)
	}
	return res, nil
}

// WriteEnvironmentsSummary writes a line per environment (its round, how
// it closed, the kernels it moved) and where its report is, staging's
// certified outcome,
// production's refusal while staging soaked and plan.md's proof from
// staging.
func WriteEnvironmentsSummary(w io.Writer, staging, production *Lab, res EnvironmentsResult) error {
	var b strings.Builder
	for _, e := range []struct {
		lab *Lab
		id  string
		res DemoResult
	}{{staging, res.StagingRound, res.Staging}, {production, res.ProductionRound, res.Production}} {
		kernels := "no node moved"
		if e.res.State != nil {
			kernels = strings.Join(kernelChanges(e.res.State), "; ")
		}
		fmt.Fprintf(&b, "%-10s  round %s closed in %s: %d tool calls, %d approvals; %s\n", e.lab.Environment, e.id,
			e.res.Duration.Round(time.Second), e.res.Outcome.Calls, e.res.Outcome.Approvals, kernels)
	}
	for _, e := range []struct {
		lab *Lab
		id  string
	}{{staging, res.StagingRound}, {production, res.ProductionRound}} {
		fmt.Fprintf(&b, "%-10s  report %s (plan, journal, timeline beside it); tool calls %s\n", e.lab.Environment,
			filepath.Join(e.lab.IntentRepo, "rounds", e.id, round.ReportFile), e.lab.CallsLog(e.id))
	}
	fmt.Fprintf(&b, "%-10s  outcome certified by %s: %s (commit %s)\n", staging.Environment, res.Principal,
		filepath.Join(staging.IntentRepo, "rounds", res.StagingRound, promotion.OutcomeFile), short(res.Certified))
	fmt.Fprintf(&b, "%-10s  plan refused while %s soaked: %s\n", production.Environment, staging.Environment, stillSoaking(res.Refused))
	fmt.Fprintf(&b, "%-10s  %s (plan.md, %s):\n", production.Environment, "Promotion from "+staging.Environment,
		filepath.Join(production.IntentRepo, "rounds", res.ProductionRound, "plan.md"))
	for _, line := range res.Proof {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// soakingLine is the promotion gate's verdict on a kernel still soaking
// upstream.
var soakingLine = regexp.MustCompile(`kernel \S+ is still soaking in \S+ until [0-9-]+ [0-9:]+ UTC`)

// stillSoaking is the gate's verdict in a refused plan's reasons, else
// their first line, shortened.
func stillSoaking(reasons []string) string {
	for _, r := range reasons {
		if m := soakingLine.FindString(r); m != "" {
			return m
		}
	}
	return clip(first(reasons), 110)
}

// planSection is the non-empty lines of plan.md's section called title,
// without its heading.
func planSection(md, title string) []string {
	_, rest, ok := strings.Cut(md, "\n## "+title+"\n")
	if !ok {
		return nil
	}
	body, _, _ := strings.Cut(rest, "\n## ")
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.TrimSpace(line) != "" {
			out = append(out, line)
		}
	}
	return out
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// toolAnswer is what the environments' flow reads of a tool's answer.
type toolAnswer struct {
	Status   string   `json:"status"`
	Reasons  []string `json:"reasons"`
	Approval *struct {
		Request string `json:"request"`
	} `json:"approval"`
	Principal string `json:"principal"`
}

// callOnce connects a session to the lab's server, runs do with a call
// function on it, and closes it.
func (l *Lab) callOnce(ctx context.Context, log *slog.Logger, do func(call func(tool string, args map[string]any) (toolAnswer, error)) error) error {
	cs, _, closeSession, err := l.Session(ctx, log)
	if err != nil {
		return err
	}
	defer closeSession()
	return do(func(tool string, args map[string]any) (toolAnswer, error) {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return toolAnswer{}, fmt.Errorf("%s: protocol error: %w", tool, err)
		}
		if len(r.Content) != 1 {
			return toolAnswer{}, fmt.Errorf("%s: %d content blocks", tool, len(r.Content))
		}
		text, ok := r.Content[0].(*mcp.TextContent)
		if !ok {
			return toolAnswer{}, fmt.Errorf("%s: the answer is not text", tool)
		}
		var a toolAnswer
		if err := json.Unmarshal([]byte(text.Text), &a); err != nil {
			return toolAnswer{}, fmt.Errorf("%s: output is not JSON: %w", tool, err)
		}
		return a, nil
	})
}

// planRound calls plan_round once and returns its status and reasons.
func (l *Lab) planRound(ctx context.Context, roundID string, log *slog.Logger) (status string, reasons []string, err error) {
	err = l.callOnce(ctx, log, func(call func(string, map[string]any) (toolAnswer, error)) error {
		a, err := call("plan_round", map[string]any{"round": roundID})
		status, reasons = a.Status, a.Reasons
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("lab: %s's plan_round: %w", l.Environment, err)
	}
	return status, reasons, nil
}

// decide records a person's decision (record_decision with args): the
// statement the server answers, signed with the lab's key. It returns who
// signed it.
func (l *Lab) decide(ctx context.Context, log *slog.Logger, args map[string]any) (principal string, err error) {
	err = l.callOnce(ctx, log, func(call func(string, map[string]any) (toolAnswer, error)) error {
		ask, err := call("record_decision", args)
		if err != nil {
			return err
		}
		if ask.Status != "approval_required" || ask.Approval == nil {
			return fmt.Errorf("answered %s without a statement to sign: %v", ask.Status, ask.Reasons)
		}
		att, err := l.Sign(ask.Approval.Request)
		if err != nil {
			return err
		}
		signed := map[string]any{"attestation": att}
		for k, v := range args {
			signed[k] = v
		}
		done, err := call("record_decision", signed)
		if err != nil {
			return err
		}
		if done.Status != "ok" {
			return fmt.Errorf("with the signed statement answered %s: %v", done.Status, done.Reasons)
		}
		principal = done.Principal
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("lab: %s's record_decision %v: %w", l.Environment, args["decision"], err)
	}
	return principal, nil
}

// gitOutput runs git in dir as the lab and returns its output, trimmed.
func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
