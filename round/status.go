package round

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Phase is where the round stands as a whole.
type Phase string

// Phases.
const (
	PhaseNotPlanned Phase = "not_planned"
	PhaseWindows    Phase = "windows"
	PhaseClosing    Phase = "closing" // every window closed: fleet check, soak, autoremove, findings
	PhaseStopped    Phase = "stopped"
	PhaseAborted    Phase = "aborted"
	PhaseClosed     Phase = "closed"
)

// Status is the round_status view: where the round stands and what to do
// next, in words an agent can act on.
type Status struct {
	RoundID       string `json:"round_id"`
	Phase         Phase  `json:"phase"`
	CurrentWindow string `json:"current_window,omitempty"`
	WindowsClosed int    `json:"windows_closed"`
	WindowsTotal  int    `json:"windows_total"`
	// Windows counts the nodes by window state (pending, open, closed).
	Windows map[WindowState]int `json:"windows,omitempty"`
	// NodesShown is how many rows Nodes holds; fewer than WindowsTotal
	// when the rows are a page (Page). NextCursor is the cursor of the
	// next page, 0 when this is the last.
	NodesShown   int          `json:"nodes_shown"`
	NextCursor   int          `json:"next_cursor,omitempty"`
	Stop         *Stop        `json:"stop,omitempty"`
	NeedsRecheck []Target     `json:"needs_recheck,omitempty"`
	Nodes        []NodeStatus `json:"nodes,omitempty"`
	RoundSteps   []StepStatus `json:"round_steps"`
	SoakEndsAt   time.Time    `json:"soak_ends_at,omitzero"`
	// Waits are the drains that wait for another party now: the node,
	// who holds it, since when the round waits and until when before it
	// stops for a person (none once the round aborted or closed).
	Waits []Wait `json:"waits,omitempty"`
	// KuredLock is kured's reboot lock as the round holds it; nil: the
	// round never took it.
	KuredLock *KuredLockState `json:"kured_lock,omitempty"`
	// Next is the step (or decision) that comes next, when there is one.
	Next *Next `json:"next,omitempty"`
	// NextAction says in plain words what to do now.
	NextAction string `json:"next_action"`
}

// NodeStatus is one row of the per-node step table.
type NodeStatus struct {
	Index  int         `json:"index"`
	Node   string      `json:"node"`
	Role   Role        `json:"role"`
	GPU    bool        `json:"gpu,omitempty"`
	Canary bool        `json:"canary,omitempty"`
	VM     bool        `json:"vm,omitempty"`
	Window WindowState `json:"window"`
	// Steps are the node's steps that have started, in order; a step
	// not listed has not started (gpu_acceptance is only a GPU server's
	// step). A fleet's pending nodes then cost a line each, not one per
	// step.
	Steps        []StepStatus `json:"steps,omitempty"`
	KernelBefore string       `json:"kernel_before,omitempty"`
	KernelAfter  string       `json:"kernel_after,omitempty"`
}

// StepStatus is one step's cell.
type StepStatus struct {
	Step         Step      `json:"step"`
	State        StepState `json:"state"`
	Attempts     int       `json:"attempts,omitempty"`
	Started      time.Time `json:"started,omitzero"`
	Ended        time.Time `json:"ended,omitzero"`
	NeedsRecheck bool      `json:"needs_recheck,omitempty"`
	RiskAccepted bool      `json:"risk_accepted,omitempty"`
	Detail       string    `json:"detail,omitempty"`
}

// Next is what comes next: a step to start or to re-check, a decision a
// person must record, or a wait.
type Next struct {
	Node string `json:"node,omitempty"`
	Step Step   `json:"step,omitempty"`
	// Tool is the MCP tool for Step, where one is fixed.
	Tool string `json:"tool,omitempty"`
	// Decision is set when a person's decision is what is needed.
	Decision DecisionName `json:"decision,omitempty"`
	// NeedsApproval: the tool is destructive; a person must sign.
	NeedsApproval bool `json:"needs_approval,omitempty"`
	// Recheck: the step was left in flight; re-check and record its
	// outcome instead of starting it.
	Recheck bool `json:"recheck,omitempty"`
	// WaitUntil is set when the next thing is to wait (the soak).
	WaitUntil time.Time `json:"wait_until,omitzero"`
}

var needsApproval = map[Step]bool{StepDrain: true, StepInstall: true, StepTrialBoot: true,
	StepPromote: true, StepAutoremove: true}

// Status returns the round_status view at the journal's clock.
func (j *Journal) Status() Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.refreshView()
	return j.state.Status(j.now())
}

// Status returns the round_status view at now.
func (s *State) Status(now time.Time) Status {
	st := Status{RoundID: s.RoundID, CurrentWindow: s.Current, WindowsTotal: len(s.Nodes),
		NeedsRecheck: s.needsRecheck()}
	if s.Stop != nil {
		stop := *s.Stop
		st.Stop = &stop
	}
	for _, n := range s.Nodes {
		ns := NodeStatus{Index: n.Index + 1, Node: n.Node, Role: n.Role, GPU: n.GPU, Canary: n.Canary,
			VM: n.VM, Window: n.Window, KernelBefore: n.KernelBefore, KernelAfter: n.KernelAfter}
		for _, step := range NodeSteps {
			if r := n.Steps[step]; r != nil && started(r) {
				ns.Steps = append(ns.Steps, stepStatus(step, r))
			}
		}
		if n.Window == WindowClosed {
			st.WindowsClosed++
		}
		if st.Windows == nil {
			st.Windows = map[WindowState]int{}
		}
		st.Windows[n.Window]++
		st.Nodes = append(st.Nodes, ns)
	}
	st.NodesShown = len(st.Nodes)
	for _, step := range RoundSteps {
		if r := s.RoundSteps[step]; r != nil {
			st.RoundSteps = append(st.RoundSteps, stepStatus(step, r))
		}
	}
	if !s.Aborted && !s.Closed {
		for _, w := range s.Waits {
			w.Holders = slices.Clone(w.Holders)
			st.Waits = append(st.Waits, w)
		}
	}
	if s.KuredLock != nil {
		k := *s.KuredLock
		st.KuredLock = &k
	}
	if !s.SoakStarted.IsZero() && s.Plan != nil {
		st.SoakEndsAt = s.SoakStarted.Add(time.Duration(s.Plan.Soak))
	}
	switch {
	case s.Closed:
		st.Phase = PhaseClosed
	case s.Aborted:
		st.Phase = PhaseAborted
	case s.Stop != nil:
		st.Phase = PhaseStopped
	case s.Plan == nil:
		st.Phase = PhaseNotPlanned
	case st.WindowsClosed < st.WindowsTotal:
		st.Phase = PhaseWindows
	default:
		st.Phase = PhaseClosing
	}
	st.Next, st.NextAction = s.next(now)
	return st
}

// NodeQuery picks the node rows of a status: one node, the nodes whose
// window is in one state, a page from a cursor. The summary (counts,
// current window, stop, next) is whole whatever it picks.
type NodeQuery struct {
	// Node, when set, picks that node alone.
	Node string
	// Window, when set, picks the nodes whose window is in that state.
	Window WindowState
	// Cursor is the position (1-based) the page starts at. 0: the whole
	// fleet for a round of at most AllNodesUpTo nodes, else the first node
	// whose window is not closed (the open window, then what comes next),
	// and no rows once every window is closed.
	Cursor int
	// Limit is the most rows a page holds; 0 is PageNodes, and it is at
	// most MaxPageNodes.
	Limit int
}

// Paging bounds: a round of up to AllNodesUpTo nodes shows every node
// (unless asked for less); a larger one shows a page, so what an agent
// reads stays the same size at a thousand nodes as at ten.
const (
	AllNodesUpTo = 12
	PageNodes    = 10
	MaxPageNodes = 25
)

// Page keeps the node rows q picks and says where the next page starts.
func (st Status) Page(q NodeQuery) Status {
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = PageNodes
	case limit > MaxPageNodes:
		limit = MaxPageNodes
	}
	all := st.Nodes
	if q.Node == "" && q.Window == "" && q.Cursor == 0 && q.Limit == 0 && len(all) <= AllNodesUpTo {
		return st
	}
	cursor := q.Cursor
	if cursor <= 0 {
		cursor = 1
		if q.Node == "" && q.Window == "" {
			// The open window and what comes next; once every window
			// is closed, the summary alone (cursor 1 reads from the
			// start).
			cursor = len(all) + 1
			for _, n := range all {
				if n.Window != WindowClosed {
					cursor = n.Index
					break
				}
			}
			if cursor > len(all) {
				st.Nodes, st.NodesShown, st.NextCursor = nil, 0, 1
				return st
			}
		}
	}
	var rows []NodeStatus
	st.NextCursor = 0
	for _, n := range all {
		if n.Index < cursor || (q.Node != "" && n.Node != q.Node) || (q.Window != "" && n.Window != q.Window) {
			continue
		}
		if len(rows) == limit {
			st.NextCursor = n.Index
			break
		}
		rows = append(rows, n)
	}
	st.Nodes, st.NodesShown = rows, len(rows)
	return st
}

// started reports whether a node step shows in round_status: it was
// tried, or it is anything but pending.
func started(r *StepRun) bool {
	return r.State != Pending || len(r.Attempts) > 0 || r.NeedsRecheck || r.RiskAccepted
}

// applies reports whether step is one of the node's steps.
func (n NodeStatus) applies(step Step) bool { return step != StepGPUAcceptance || n.GPU }

func stepStatus(step Step, r *StepRun) StepStatus {
	ss := StepStatus{Step: step, State: r.State, Attempts: len(r.Attempts), NeedsRecheck: r.NeedsRecheck,
		RiskAccepted: r.RiskAccepted}
	if a := r.last(); a != nil {
		ss.Started, ss.Ended, ss.Detail = a.Started, a.Ended, a.Detail
	}
	return ss
}

func stepNext(step Step, node string) *Next {
	return &Next{Node: node, Step: step, Tool: step.Tool(), NeedsApproval: needsApproval[step]}
}

func describe(nx *Next) string {
	var b strings.Builder
	b.WriteString(string(nx.Step))
	if nx.Node != "" {
		b.WriteString(" " + nx.Node)
	}
	if nx.Tool != "" {
		fmt.Fprintf(&b, " (%s", nx.Tool)
		if nx.NeedsApproval {
			b.WriteString("; destructive: a person signs the approval")
		}
		b.WriteString(")")
	}
	return b.String()
}

// next decides what comes next and says it in words.
func (s *State) next(now time.Time) (*Next, string) {
	if s.Closed {
		return nil, fmt.Sprintf("Round %s is closed; nothing is left to do.", s.RoundID)
	}
	if rc := s.needsRecheck(); len(rc) > 0 {
		t := rc[0]
		nx := stepNext(t.Step, t.Node)
		nx.Recheck = true
		where := ""
		if t.Node != "" {
			where = " on " + t.Node
		}
		if t.Step.ReadOnly() {
			return nx, fmt.Sprintf("%s%s was in flight when the previous server process stopped; it is read-only, so run it again (%s).",
				t.Step, where, t.Step.Tool())
		}
		return nx, fmt.Sprintf("%s%s was in flight when the previous server process stopped. Re-check the host and cluster to learn whether it finished, then record that it finished or failed; do not repeat it blindly.",
			t.Step, where)
	}
	if s.Aborted {
		for _, n := range s.Nodes {
			if n.Window == WindowOpen && !n.Steps[StepUncordon].Green() {
				nx := stepNext(StepUncordon, n.Node)
				return nx, fmt.Sprintf("The round was aborted. Hand %s back: %s, if it is healthy on the kernel it runs; then commit the lessons and report and close.", n.Node, describe(nx))
			}
		}
		if !s.FindingsCommitted {
			return &Next{Step: StepClose}, "The round was aborted. Record the lessons, write the report, commit both, then close the round."
		}
		return &Next{Step: StepClose}, "The round was aborted and its findings are committed: close the round."
	}
	if s.Stop != nil {
		where := string(s.Stop.Step)
		if s.Stop.Node != "" {
			where += " on " + s.Stop.Node
		}
		return &Next{Decision: DecisionResume, Node: s.Stop.Node, Step: s.Stop.Step},
			fmt.Sprintf("The round stopped: %s failed (%s). Nothing that changes a host or the cluster runs until a person decides. Re-check with the read-only tools, then a person records a signed resume (the failed step may run again) or abort.", where, s.Stop.Reason)
	}
	if s.Plan == nil {
		nx := stepNext(StepPlan, "")
		return nx, "No order is recorded: plan the round (plan_round) from the inventory and the placement of the Postgres primary and the API VIP."
	}
	var inflight []string
	s.forEachTarget(func(t Target, r *StepRun) {
		if r.State == InFlight && t.Step != StepSoak {
			inflight = append(inflight, strings.TrimSpace(string(t.Step)+" "+t.Node))
		}
	})
	if len(inflight) > 0 {
		return nil, fmt.Sprintf("Wait: %s in flight. A step that waits can be called again with the same arguments to see where it stands.", strings.Join(inflight, ", "))
	}
	if !s.BaselineTaken {
		nx := stepNext(StepBaseline, "")
		return nx, "Take the stack-health baseline (plan_round) before the first drain, so each gate can tell new failures from old."
	}
	if s.Current != "" {
		nx := s.nextInWindow(s.Node(s.Current))
		if nx.Decision != "" {
			return nx, fmt.Sprintf("%s is a VM: a person must attest %s (signed) before install.", nx.Node, nx.Decision)
		}
		if nx.Step == StepGate {
			return nx, fmt.Sprintf("Next in the window of %s: %s. A green gate closes the window and lets the next cordon start.", nx.Node, describe(nx))
		}
		return nx, fmt.Sprintf("Next in the window of %s: %s.", nx.Node, describe(nx))
	}
	for _, n := range s.Nodes {
		if n.Window == WindowClosed {
			continue
		}
		for _, step := range PreflightSteps {
			if !n.Steps[step].Green() {
				nx := stepNext(step, n.Node)
				return nx, fmt.Sprintf("Preflight of %s (position %d): %s.", n.Node, n.Index+1, describe(nx))
			}
		}
		nx := stepNext(StepDrain, n.Node)
		return nx, fmt.Sprintf("Open the window of %s (position %d): %s.", n.Node, n.Index+1, describe(nx))
	}
	fc := s.RoundSteps[StepFleetCheck]
	if !s.FleetCheckGreen || fc.greenSeq() < s.lastClosedSeq() {
		nx := stepNext(StepFleetCheck, "")
		return nx, "Every window is closed: check that the whole fleet runs the intended kernel (fleet_check)."
	}
	if s.SoakStarted.IsZero() {
		nx := stepNext(StepSoak, "")
		return nx, fmt.Sprintf("Start the soak of %s: the fleet runs on the new kernels before autoremove.", time.Duration(s.Plan.Soak))
	}
	if end := s.SoakStarted.Add(time.Duration(s.Plan.Soak)); now.Before(end) {
		return &Next{Step: StepAutoremove, Tool: StepAutoremove.Tool(), WaitUntil: end},
			fmt.Sprintf("Soak until %s (%s left); then autoremove.", end.UTC().Format(time.RFC3339), end.Sub(now).Round(time.Second))
	}
	if !s.RoundSteps[StepAutoremove].Green() {
		nx := stepNext(StepAutoremove, "")
		return nx, fmt.Sprintf("The soak is over: %s; it never removes the running kernel.", describe(nx))
	}
	if !s.FindingsCommitted {
		return &Next{Step: StepClose}, "Record the lessons, write the report and timeline, commit them to the intent repo, record the commit; then close."
	}
	return &Next{Step: StepClose}, "Findings are committed: close the round."
}

// nextInWindow is the next thing in n's open window.
func (s *State) nextInWindow(n *NodeState) *Next {
	st := n.Steps
	switch {
	case !st[StepDrain].Green():
		return stepNext(StepDrain, n.Node)
	case !st[StepSnapshot].Green():
		return stepNext(StepSnapshot, n.Node)
	case n.VM && !n.HypervisorSnapshot:
		return &Next{Node: n.Node, Decision: DecisionHypervisorSnapshotTaken}
	case !st[StepInstall].Green():
		return stepNext(StepInstall, n.Node)
	case !st[StepTrialBoot].Green():
		return stepNext(StepTrialBoot, n.Node)
	case !st[StepVerify].greenAfter(st[StepTrialBoot]):
		return stepNext(StepVerify, n.Node)
	case !st[StepUncordon].Green():
		return stepNext(StepUncordon, n.Node)
	case n.GPU && !st[StepGPUAcceptance].greenAfter(st[StepUncordon]):
		return stepNext(StepGPUAcceptance, n.Node)
	case !st[StepPromote].Green():
		return stepNext(StepPromote, n.Node)
	}
	return stepNext(StepGate, n.Node)
}

func (s *State) forEachTarget(f func(Target, *StepRun)) {
	for _, n := range s.Nodes {
		for _, step := range NodeSteps {
			if r := n.Steps[step]; r != nil {
				f(Target{Node: n.Node, Step: step}, r)
			}
		}
	}
	for _, step := range RoundSteps {
		if r := s.RoundSteps[step]; r != nil {
			f(Target{Step: step}, r)
		}
	}
}

// cell is how a step shows in the text table.
func cell(ss StepStatus) string {
	switch {
	case ss.NeedsRecheck:
		return "RECHECK"
	case ss.RiskAccepted:
		return "accepted"
	}
	switch ss.State {
	case Done:
		return "ok"
	case Failed:
		return "FAIL"
	case InFlight:
		return "run"
	}
	return "-"
}

// RenderStatusText writes the status as a plain-text table for people.
func RenderStatusText(w io.Writer, st Status) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Round %s: %s", st.RoundID, st.Phase)
	if st.CurrentWindow != "" {
		fmt.Fprintf(&b, ", window open on %s", st.CurrentWindow)
	}
	fmt.Fprintf(&b, ", %d/%d windows closed\n", st.WindowsClosed, st.WindowsTotal)
	if st.NodesShown < st.WindowsTotal {
		fmt.Fprintf(&b, "windows: %d pending, %d open, %d closed; %d node(s) shown", st.Windows[WindowPending], st.Windows[WindowOpen], st.Windows[WindowClosed], st.NodesShown)
		if len(st.Nodes) > 0 {
			fmt.Fprintf(&b, " from position %d", st.Nodes[0].Index)
		}
		if st.NextCursor > 0 {
			fmt.Fprintf(&b, "; next page: cursor %d", st.NextCursor)
		}
		b.WriteString("\n")
	}
	if st.Stop != nil {
		fmt.Fprintf(&b, "STOPPED at %s", st.Stop.Step)
		if st.Stop.Node != "" {
			fmt.Fprintf(&b, " on %s", st.Stop.Node)
		}
		fmt.Fprintf(&b, " (%s): %s\n", st.Stop.Time.UTC().Format(time.RFC3339), st.Stop.Reason)
	}
	for _, w := range st.Waits {
		fmt.Fprintf(&b, "WAITING on %s since %s, at most until %s, for:", w.Node, w.Since.UTC().Format(time.RFC3339), w.Until.UTC().Format(time.RFC3339))
		for _, h := range w.Holders {
			fmt.Fprintf(&b, " %s (%s)", h.Actor, h.Who)
			if !h.Since.IsZero() {
				fmt.Fprintf(&b, " since %s", h.Since.UTC().Format(time.RFC3339))
			}
			b.WriteString(";")
		}
		b.WriteString("\n")
	}
	if k := st.KuredLock; k != nil && k.Held {
		fmt.Fprintf(&b, "kured's reboot lock held by the round since %s", k.Taken.UTC().Format(time.RFC3339))
		if k.Failure != "" {
			fmt.Fprintf(&b, "; its release FAILED: %s", k.Failure)
		}
		b.WriteString("\n")
	}
	if len(st.Nodes) > 0 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, "#\tnode\trole\twindow")
		for _, step := range NodeSteps {
			fmt.Fprintf(tw, "\t%s", step)
		}
		fmt.Fprint(tw, "\tkernel\n")
		for _, n := range st.Nodes {
			role := string(n.Role)
			if n.Canary {
				role += " (canary)"
			}
			if n.VM {
				role += " VM"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s", n.Index, n.Node, role, n.Window)
			cells := map[Step]string{}
			for _, ss := range n.Steps {
				cells[ss.Step] = cell(ss)
			}
			for _, step := range NodeSteps {
				c, ok := cells[step]
				switch {
				case !ok && n.applies(step):
					c = cell(StepStatus{Step: step, State: Pending})
				case !ok:
					c = "n/a"
				}
				fmt.Fprintf(tw, "\t%s", c)
			}
			kernel := n.KernelBefore
			if n.KernelAfter != "" {
				kernel += " -> " + n.KernelAfter
			}
			if kernel == "" {
				kernel = "?"
			}
			fmt.Fprintf(tw, "\t%s\n", kernel)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	b.WriteString("\nround:")
	for _, ss := range st.RoundSteps {
		fmt.Fprintf(&b, " %s=%s", ss.Step, cell(ss))
	}
	if !st.SoakEndsAt.IsZero() {
		fmt.Fprintf(&b, " (soak ends %s)", st.SoakEndsAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "\n\nnext: %s\n", st.NextAction)
	_, err := io.WriteString(w, b.String())
	return err
}
