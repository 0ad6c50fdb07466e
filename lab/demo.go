package lab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/tools"
)

// Session connects an in-process MCP client to mcp-patch's server built
// from the lab's configuration, with the lab's clock. close ends both.
func (l *Lab) Session(ctx context.Context, log *slog.Logger) (*mcp.ClientSession, *tools.Deps, func(), error) {
	cfg := l.Config
	d, cleanup, err := tools.Build(ctx, &cfg, log, func(string) string { return "" }, l.Clock.Now)
	if err != nil {
		return nil, nil, nil, err
	}
	srv := tools.NewServer(tools.Builtin(), d, "lab")
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "lab-agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		ss.Close()
		cleanup()
		return nil, nil, nil, err
	}
	return cs, d, func() { cs.Close(); ss.Close(); cleanup() }, nil
}

// DemoResult is what a demo round left behind.
type DemoResult struct {
	Outcome  Outcome
	Duration time.Duration
	Branch   string
	Log      string // git log --oneline of the working branch
	// State is the round as its journal's last record left it; nil when
	// no record was written.
	State *round.State
	// CallsLog is the file holding every tool call the agent made, one
	// line each, with its status and first reason.
	CallsLog string
	// Signatures and PerStepSignatures are what plan.json says the round
	// needs: as the intent sizes approvals, and with one per destructive
	// step (0 when plan.json could not be read).
	Signatures, PerStepSignatures int
}

// RunRound runs a whole round on a running lab with the agent client,
// approvals signed by the lab's key and the soak passed by the lab clock.
// It writes a line to w as each step of the round ends (StepLine, from the
// journal as it is written) and every tool call to the calls log
// (DemoResult.CallsLog, in the lab's directory).
func (l *Lab) RunRound(ctx context.Context, roundID string, w io.Writer, log *slog.Logger) (res DemoResult, err error) {
	start := time.Now()
	res.Branch = "mcp-patch/round-" + roundID
	res.CallsLog = l.CallsLog(roundID)
	calls, err := os.Create(res.CallsLog)
	if err != nil {
		return res, fmt.Errorf("lab: the calls log: %w", err)
	}
	defer func() {
		if cerr := calls.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("lab: the calls log: %w", cerr))
		}
	}()
	cs, d, closeSession, err := l.Session(ctx, log)
	if err != nil {
		return res, err
	}
	defer closeSession()
	if d.Book == nil {
		return res, errors.New("lab: the server keeps no rounds (no round book)")
	}
	// The journal observer runs under the journal's lock as each record is
	// on disk: it only formats one line and keeps the state.
	var mu sync.Mutex
	var last *round.State
	prev := d.Book.Observe
	d.Book.Observe = func(rec round.Record, st *round.State) {
		if prev != nil {
			prev(rec, st)
		}
		mu.Lock()
		defer mu.Unlock()
		last = st
		if line := StepLine(rec, st, time.Since(start)); line != "" {
			fmt.Fprintln(w, line)
		}
	}
	agent := &Agent{
		Session: cs,
		Sign:    l.Sign,
		Wait:    l.Clock.AdvanceTo,
		Say:     func(s string) { fmt.Fprintln(calls, s) },
		BeforeClose: func(ctx context.Context) error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "record_lesson", Arguments: map[string]any{
				"component": "os-layer", "kind": "lesson", "round": roundID,
				"text": "Lab round " + roundID + ": every node booted the new kernel on its trial boot; windows closed one at a time behind green gates.",
			}})
			if err != nil || res.IsError {
				return fmt.Errorf("record_lesson before close: %v %v", err, res)
			}
			fmt.Fprintln(calls, "record_lesson    os-layer       ok")
			return nil
		},
	}
	if l.VMCanary != nil {
		// A status call on the VM runs a host step on its one emulated CPU.
		agent.PollNode = map[string]time.Duration{l.VMCanary.Name: vmPoll}
	}
	drilled := false
	agent.BeforeCall = func(ctx context.Context, tool, node string) error {
		if tool != "trial_boot" || drilled || !strings.HasPrefix(node, "gpu-canary") {
			return nil
		}
		drilled = true
		status, reasons, err := agent.Follow(ctx, "fallback_drill", map[string]any{"node": node})
		if err != nil {
			return fmt.Errorf("fallback drill: %w", err)
		}
		fmt.Fprintf(calls, "%-16s %-14s %-12s %s\n", "fallback_drill", node, status, first(reasons))
		if status != "ok" {
			return fmt.Errorf("fallback drill on %s: %s: %v", node, status, reasons)
		}
		return nil
	}
	out, err := agent.Run(ctx, roundID)
	res.Outcome, res.Duration = out, time.Since(start)
	mu.Lock()
	res.State = last
	mu.Unlock()
	if b, perr := os.ReadFile(filepath.Join(l.IntentRepo, "rounds", roundID, "plan.json")); perr == nil {
		if f, perr := plan.Decode(b); perr == nil {
			res.Signatures, res.PerStepSignatures = f.Signatures, f.PerStepSignatures
		}
	}
	if b, gerr := exec.Command("git", "-C", l.IntentRepo, "log", "--oneline", res.Branch).Output(); gerr == nil {
		res.Log = strings.TrimSpace(string(b))
	}
	return res, err
}

// CallsLog is the file RunRound writes every tool call of round roundID
// to, in the lab's directory.
func (l *Lab) CallsLog(roundID string) string {
	return filepath.Join(l.Dir, "round-"+roundID+"-calls.log")
}

// StepLine is the demo's line for a journal record as it is written, at
// elapsed since the round began: a window or round step's outcome and how
// long it took, a node's preflight once its last step (snapshot) is done,
// the soak as it starts, a decision, a lesson (the fallback drill's
// verdict), a rollback. It is "" for what a person following the round
// need not see line by line: step starts, the preflight's other steps as
// they pass, notifications, releases.
func StepLine(rec round.Record, st *round.State, elapsed time.Duration) string {
	at := fmt.Sprintf("  %5s  ", clock(elapsed))
	node := cmp.Or(rec.Node, "round")
	switch rec.Kind {
	case round.KindPlan:
		if st == nil {
			return ""
		}
		order := make([]string, 0, len(st.Nodes))
		for _, n := range st.Nodes {
			order = append(order, n.Node)
		}
		return at + fmt.Sprintf("%-14s %-15s done     %d nodes in order: %s", node, round.StepPlan, len(order), clip(strings.Join(order, ", "), 70))
	case round.KindStepStarted:
		if rec.Step == round.StepSoak {
			return at + fmt.Sprintf("%-14s %-15s started  (%s on the lab clock)", node, rec.Step, soakOf(st))
		}
	case round.KindStepFinished, round.KindStepFailed:
		r := st.StepRun(rec.Step, rec.Node)
		if r == nil || len(r.Attempts) == 0 {
			return ""
		}
		a := r.Attempts[len(r.Attempts)-1]
		took := stepTime(a.Ended.Sub(a.Started))
		if rec.Kind == round.KindStepFailed {
			return at + fmt.Sprintf("%-14s %-15s FAILED   %-7s %s", node, rec.Step, took, clip(rec.Detail, 90))
		}
		if slices.Contains(round.PreflightSteps, rec.Step) {
			if rec.Step != round.StepSnapshot {
				return ""
			}
			return at + fmt.Sprintf("%-14s %-15s done     %-7s inspect, simulate, download, snapshot", node, "preflight", preflightTime(st, rec.Node))
		}
		line := at + fmt.Sprintf("%-14s %-15s done     %s", node, rec.Step, took)
		if rec.Kernel != "" && (rec.Step == round.StepTrialBoot || rec.Step == round.StepPromote) {
			line += "  (runs " + rec.Kernel + ")"
		}
		return line
	case round.KindDecision:
		return at + fmt.Sprintf("%-14s %-15s %s  %s", node, "decision", rec.Decision, clip(rec.Detail, 80))
	case round.KindLesson:
		return at + fmt.Sprintf("%-14s %-15s %s", "round", "lesson", clip(rec.Detail, 100))
	case round.KindRollback:
		return at + fmt.Sprintf("%-14s %-15s %s  %s", node, "rollback", cmp.Or(string(rec.Outcome), "started"), clip(rec.Detail, 80))
	}
	return ""
}

// preflightTime is the time node's preflight steps took, together.
func preflightTime(st *round.State, node string) string {
	var d time.Duration
	for _, step := range round.PreflightSteps {
		if r := st.StepRun(step, node); r != nil {
			for _, a := range r.Attempts {
				if !a.Ended.IsZero() {
					d += a.Ended.Sub(a.Started)
				}
			}
		}
	}
	return stepTime(d)
}

func soakOf(st *round.State) string {
	if st == nil || st.Plan == nil {
		return "its soak"
	}
	return time.Duration(st.Plan.Soak).String()
}

// stepTime prints a step's duration to a tenth of a second under a
// minute, to the second above.
func stepTime(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// clock prints elapsed time as m:ss.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// clip shortens s to n runes on one line, marking the cut.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// WriteSummary writes the end of the demo: how the round went (kernels
// before and after, failures and decisions, the signatures), the report's
// own summary lines, and where the report, timeline, plan, journal and
// tool calls are.
func (l *Lab) WriteSummary(w io.Writer, roundID string, res DemoResult) error {
	dir := filepath.Join(l.IntentRepo, "rounds", roundID)
	report, err := os.ReadFile(filepath.Join(dir, round.ReportFile))
	if err != nil {
		return fmt.Errorf("lab: the round's report: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Round %s closed in %s: %d tool calls, %d approvals signed", roundID, res.Duration.Round(time.Second), res.Outcome.Calls, res.Outcome.Approvals)
	if res.Signatures > 0 {
		fmt.Fprintf(&b, " (the plan needs %d as the intent sizes approvals, %d with one per destructive step)", res.Signatures, res.PerStepSignatures)
	}
	b.WriteString(".\n")
	if st := res.State; st != nil {
		for _, k := range kernelChanges(st) {
			fmt.Fprintf(&b, "Kernels: %s\n", k)
		}
		fmt.Fprintf(&b, "Failures: %d; decisions: %d; lessons: %d (all in the report)\n", len(st.Failures), len(st.Decisions), len(st.Lessons))
	}
	b.WriteString("The report's summary:\n")
	for _, line := range reportSummary(string(report)) {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	commits := 0
	if res.Log != "" {
		commits = strings.Count(res.Log, "\n") + 1
	}
	fmt.Fprintf(&b, "Where it is (intent repository %s, branch %s, %d commits):\n", l.IntentRepo, res.Branch, commits)
	for _, f := range [][2]string{
		{"report", filepath.Join(dir, round.ReportFile)},
		{"timeline", filepath.Join(dir, round.TimelineFile)},
		{"plan", filepath.Join(dir, "plan.md") + " (people read it; plan.json beside it holds the digests they sign)"},
		{"journal", filepath.Join(dir, round.JournalFile)},
		{"tool calls", res.CallsLog},
		{"commits", "git -C " + l.IntentRepo + " log --oneline " + res.Branch},
	} {
		fmt.Fprintf(&b, "  %-10s  %s\n", f[0], f[1])
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// reportSummary is the report's summary: its list lines before the first
// section.
func reportSummary(report string) []string {
	head, _, _ := strings.Cut(report, "\n## ")
	var out []string
	for _, line := range strings.Split(head, "\n") {
		if strings.HasPrefix(line, "- ") {
			out = append(out, line)
		}
	}
	return out
}

// kernelChanges says which kernels the round's nodes moved between, one
// line per distinct change, the most common first.
func kernelChanges(st *round.State) []string {
	type change struct{ before, after string }
	count := map[change][]string{}
	var order []change
	for _, n := range st.Nodes {
		c := change{cmp.Or(n.KernelBefore, "unknown"), cmp.Or(n.KernelAfter, "unchanged")}
		if count[c] == nil {
			order = append(order, c)
		}
		count[c] = append(count[c], n.Node)
	}
	slices.SortStableFunc(order, func(a, b change) int { return len(count[b]) - len(count[a]) })
	var out []string
	for _, c := range order {
		out = append(out, fmt.Sprintf("%d of %d nodes %s -> %s (%s)", len(count[c]), len(st.Nodes), c.before, c.after, clip(strings.Join(count[c], ", "), 60)))
	}
	return out
}
