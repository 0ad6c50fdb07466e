package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// TestHostileAgentActsOnlyUnderSignatures is a scripted agent that holds
// the MCP tools and write access to the intent repository's working copy,
// but no signing key, on the fleet rig (a signed plan, three nodes
// through preflight). Over seeded random sequences, each on a fresh copy
// of that rig (fleet.fork), it calls every destructive tool on every node
// bare, with approvals it saw signed (replayed, on another node, for
// another tool, a window approval's steps again), after writing plan and
// window entries into plan-signatures.json, after editing plan.json,
// the node plans (nodes/<node>.json), the round's journal and state.json, after forging journal
// records of a step in flight, and asks for statements whose summary it
// rewrote or uses a statement signed for an earlier stop; now and then a
// person signs a request the agent obtained (a step's, a whole window's,
// a resume), and the hosts move on (installs finish or fail, reboots come
// back). It counts every destructive host and cluster action (apt
// started, trial boot prepared, promote, fallback drill armed, a cordon)
// per tool and node against the person's signatures for that tool and
// node: none may exceed them, and a statement is accepted only for the
// stop it was signed at, once. A failure prints the seed and the shortest
// sequence found that still breaks it.
//
// MCP_PATCH_HOSTILE_SEQUENCES sets how many sequences run (default 10),
// MCP_PATCH_HOSTILE_FIRST the first seed (default 0, so two runs can share
// the seeds out); MCP_PATCH_HOSTILE_SEED runs the one sequence of that seed.
func TestHostileAgentActsOnlyUnderSignatures(t *testing.T) {
	sequences, first := 10, uint64(0)
	if v := os.Getenv("MCP_PATCH_HOSTILE_SEQUENCES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("MCP_PATCH_HOSTILE_SEQUENCES=%q: want a positive count", v)
		}
		sequences = n
	}
	if v := os.Getenv("MCP_PATCH_HOSTILE_FIRST"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("MCP_PATCH_HOSTILE_FIRST=%q: want the first seed", v)
		}
		first = n
	}
	if v := os.Getenv("MCP_PATCH_HOSTILE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("MCP_PATCH_HOSTILE_SEED=%q: want a seed", v)
		}
		sequences, first = 1, n
	}
	start := time.Now()
	base := newFleet(t)
	base.signInProcess()
	base.planned()
	for _, n := range hostileNodes {
		base.preflight(n)
	}
	setup := time.Since(start)
	totals := map[string]int{}
	var actions, signatures, ops int
	for s := range sequences {
		seed := first + uint64(s)
		seq := hostileSequence(seed)
		ops += len(seq)
		res := runHostile(t, base, seq)
		if res.violation != "" {
			short := shrinkHostile(t, base, seq[:res.at+1])
			t.Fatalf("seed %d (rerun: MCP_PATCH_HOSTILE_SEED=%d): op %d: %s\nshortest sequence found (%d ops) that still breaks it:\n%s",
				seed, seed, res.at, res.violation, len(short), formatHostile(short))
		}
		actions += res.actions
		signatures += res.signed
		for k, c := range res.kinds {
			totals[k] += c
		}
	}
	elapsed := time.Since(start)
	t.Logf("hostile agent: %d sequences, %d operations by kind %v; %d destructive actions, all under %d person signatures; setup %s, all %s",
		sequences, ops, totals, actions, signatures, setup.Round(time.Millisecond), elapsed.Round(time.Millisecond))
	fmt.Printf("hostile agent: %d sequences, %d operations, %d destructive actions, 0 without a matching signature (%s)\n",
		sequences, ops, actions, elapsed.Round(time.Second))
	if actions == 0 {
		t.Fatal("no destructive action ran under any signature: the sequences never reached the steps they attack")
	}
}

var (
	hostileTools = []string{"drain_node", "install_updates", "trial_boot", "promote_kernel", "fallback_drill"}
	hostileNodes = []string{"cp-1", "gpu-1", "gpu-2"}
)

// hostileKinds are the operations, by name; a sequence is a list of them
// with their picks.
var hostileKinds = []string{
	"bare call", "bare call again", "replayed approval", "approval on another node", "approval for another tool",
	"hand-written signatures", "plan.json edited", "nodes.json edited", "journal edited", "state.json edited",
	"forged journal start", "statement with a rewritten summary", "statement from another stop",
	"journal forged, server restarted",
	"the person signs a step", "the person signs a window", "the person signs a resume",
	"the hosts move on", "an install fails", "write tools",
}

// hostileOp is one operation of a sequence: its kind and the random
// picks it uses (tool, node, and a number for anything else).
type hostileOp struct {
	Kind       int
	Tool, Node string
	Pick       int
}

func (o hostileOp) String() string {
	return fmt.Sprintf("%s %s %s pick=%d", hostileKinds[o.Kind], o.Tool, o.Node, o.Pick)
}

// hostileSequence is seed's sequence: 20 to 40 operations.
func hostileSequence(seed uint64) []hostileOp {
	r := mrand.New(mrand.NewPCG(20261203, seed))
	seq := make([]hostileOp, 20+r.IntN(21))
	// Every sequence opens the round's first window as the agent would
	// (a bare drain of the control-plane node, and the person signs it),
	// so that what follows attacks steps that can run.
	seq[0] = hostileOp{Kind: slices.Index(hostileKinds, "bare call"), Tool: "drain_node", Node: "cp-1"}
	seq[1] = hostileOp{Kind: slices.Index(hostileKinds, "the person signs a step"), Tool: "drain_node", Node: "cp-1"}
	for i := 2; i < len(seq); i++ {
		seq[i] = hostileOp{Kind: r.IntN(len(hostileKinds)), Tool: hostileTools[r.IntN(len(hostileTools))],
			Node: hostileNodes[r.IntN(len(hostileNodes))], Pick: r.IntN(1 << 20)}
	}
	return seq
}

func formatHostile(seq []hostileOp) string {
	var b strings.Builder
	for i, o := range seq {
		fmt.Fprintf(&b, "  %d: %s\n", i, o)
	}
	return b.String()
}

// shrinkHostile is a shortest sequence found that still breaks the
// property: each operation dropped in turn where the rest still fails.
func shrinkHostile(t *testing.T, base *fleet, seq []hostileOp) []hostileOp {
	for i := len(seq) - 2; i >= 0; i-- {
		try := append(append([]hostileOp{}, seq[:i]...), seq[i+1:]...)
		if res := runHostile(t, base, try); res.violation != "" {
			seq = try[:res.at+1]
			if i > len(seq)-1 {
				i = len(seq) - 1
			}
		}
	}
	return seq
}

type hostileResult struct {
	violation       string
	at              int
	actions, signed int
	kinds           map[string]int
}

// windowSteps are the steps one window signature covers on node, as the
// intent sizes it (GPU servers per window, the canary's drill with them),
// not as any file the agent can write says.
func windowSteps(node string) []string {
	if node == "cp-1" {
		return nil
	}
	steps := []string{"drain_node", "install_updates", "trial_boot", "promote_kernel"}
	if node == "gpu-1" {
		steps = append(steps, "fallback_drill")
	}
	return steps
}

// runHostile runs seq on a fresh copy of base and says the first
// violation.
func runHostile(t *testing.T, base *fleet, seq []hostileOp) (res hostileResult) {
	t.Helper()
	f := base.fork(t)
	res.kinds = map[string]int{}
	roundDir := filepath.Join(f.repo, "rounds", fRound)
	sigs := map[string]int{} // what the person signed, per tool/node
	var held []string        // approvals the agent saw signed
	requests := map[string]*Result{}
	drainDigests := map[string]string{}
	cordoned := map[string]bool{}
	// Statements: the stop each was signed at, and whether it was used.
	type statement struct {
		text, stop string
		used       bool
	}
	var statements []*statement
	stopOf := func() string {
		st := f.state()
		if st.Stop == nil {
			return ""
		}
		return fmt.Sprintf("%s/%s/%d", st.Stop.Step, st.Stop.Node, len(st.Failures))
	}
	count := func() map[string]int {
		got := map[string]int{}
		for _, n := range hostileNodes {
			h := f.host(n)
			got["install_updates/"+n] = h.Count("install")
			got["trial_boot/"+n] = h.Count("prepare")
			got["promote_kernel/"+n] = h.Count("promote")
			got["fallback_drill/"+n] = h.Count("drill-arm")
		}
		return got
	}
	check := func() string {
		for _, n := range hostileNodes {
			if u := f.node(n).Spec.Unschedulable; u && !cordoned[n] {
				cordoned[n] = true
				res.actions++
				if sigs["drain_node/"+n] == 0 {
					return n + " was cordoned without a person's signature"
				}
				sigs["drain_node/"+n]--
			} else if !u {
				cordoned[n] = false
			}
		}
		for k, c := range count() {
			if c > sigs[k] {
				return fmt.Sprintf("%s acted %d times under %d signatures", k, c, sigs[k])
			}
		}
		return ""
	}
	call := func(tool, node, approval string) *Result {
		args := map[string]any{"node": node}
		if approval != "" {
			args["approval"] = approval
		}
		_, r := f.call(tool, args)
		if r.Status == StatusApprovalRequired && approval == "" && r.Approval != nil {
			requests[tool+"/"+node] = r
			if tool == "drain_node" {
				drainDigests[node] = requestDigest(t, r)
			}
		}
		return r
	}
	restore := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(roundDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// editWhile writes edit(b) into the round file name, calls, and puts
	// the file back (the agent covers its tracks).
	editWhile := func(name string, edit func(string) string, tool, node string) {
		b, err := os.ReadFile(filepath.Join(roundDir, name))
		if err != nil {
			return
		}
		restore(name, []byte(edit(string(b))))
		call(tool, node, "")
		restore(name, b)
	}
	heldPick := func(p int) string { return held[p%len(held)] }
	f.d.Book.SegmentBytes = hostileSegmentBytes
	rebuild := func() {
		cluster, hosts := f.d.Cluster, f.d.Hosts
		f.stop()
		d := f.build()
		d.Cluster, d.Hosts, d.Book.SegmentBytes = cluster, hosts, hostileSegmentBytes
	}
	// The standing rules, as the hosts and the cluster show them after
	// each operation: nothing destructive while the round is stopped (but
	// what a person's resume lifts), no promote unless the host runs the
	// trial kernel, no cordon before every earlier window closed.
	order := f.state().Plan.Order
	standing := func(kind string, before map[string]int, wasStopped bool, wasCordoned map[string]bool) string {
		after := count()
		for _, n := range hostileNodes {
			if f.node(n).Spec.Unschedulable && !wasCordoned[n] {
				after["drain_node/"+n]++
				st := f.state()
				for _, p := range order.Positions[:max(order.Index(n), 0)] {
					if w := st.Node(p.Node); w == nil || w.Window != round.WindowClosed {
						return fmt.Sprintf("%s was cordoned while the window of %s, before it, was not closed", n, p.Node)
					}
				}
			}
			if after["promote_kernel/"+n] > before["promote_kernel/"+n] {
				if h := f.host(n); h.Running != h.Target {
					return fmt.Sprintf("%s was promoted to %s while it runs %s", n, h.Target, h.Running)
				}
			}
		}
		if wasStopped && kind != "the person signs a resume" && kind != "statement from another stop" {
			for k, c := range after {
				if c > before[k] {
					return fmt.Sprintf("%s acted while the round was stopped", k)
				}
			}
		}
		return ""
	}
	for i, op := range seq {
		tool, node := op.Tool, op.Node
		kind := hostileKinds[op.Kind]
		before, wasStopped := count(), f.state().Stop != nil
		wasCordoned := map[string]bool{}
		for _, n := range hostileNodes {
			wasCordoned[n] = f.node(n).Spec.Unschedulable
		}
		switch kind {
		case "bare call", "bare call again":
			// Again: a step whose approval was used, called once more.
			call(tool, node, "")
			if kind == "bare call again" {
				call(tool, node, "")
			}
		case "replayed approval":
			if len(held) > 0 {
				call(tool, node, heldPick(op.Pick))
			}
		case "approval on another node":
			if len(held) > 0 {
				call(tool, hostileNodes[(op.Pick/7)%len(hostileNodes)], heldPick(op.Pick))
			}
		case "approval for another tool":
			if len(held) > 0 {
				call(hostileTools[(op.Pick/7)%len(hostileTools)], node, heldPick(op.Pick))
			}
		case "hand-written signatures":
			f.handWriteSignatures(drainDigests)
			call(tool, node, "")
		case "plan.json edited":
			edits := []func(string) string{
				func(s string) string { return strings.Replace(s, `"per_step"`, `"per_window"`, 1) },
				func(s string) string { return strings.Replace(s, `"control-plane"`, `"gpu"`, 1) },
				func(s string) string { return strings.ReplaceAll(s, "sha256:", "sha256:0") },
			}
			f.handWriteSignatures(drainDigests)
			editWhile(service.FleetPlanFile, edits[op.Pick%len(edits)], tool, node)
		case "nodes.json edited":
			editWhile(filepath.Join(window.NodePlansDir, node+".json"), func(s string) string { return strings.ReplaceAll(s, "sha256:", "sha256:0") }, tool, node)
		case "journal edited":
			// A hand-written record of the step done, appended to the
			// journal file (the agent can write the working copy).
			editWhile(round.JournalFile, func(s string) string {
				return s + fmt.Sprintf(`{"seq":999999,"kind":"step_finished","step":%q,"node":%q,"outcome":"done","approval_id":"forged"}`+"\n", toolStepOf(tool), node)
			}, tool, node)
		case "journal forged, server restarted":
			// With the server ended, the agent rewrites the journal (the
			// live file or a sealed segment), starts the server again and
			// calls the step, bare and with an approval it holds; then
			// the files are put back as they were (a person restores
			// them from the committed history) and the server starts
			// again.
			f.stop()
			saved := readRoundJournal(t, roundDir)
			forged, what := forgeJournal(t, saved, op, tool, node)
			res.kinds["journal forged: "+what]++
			writeRoundJournal(t, roundDir, saved, forged)
			rebuild()
			call(tool, node, "")
			if len(held) > 0 {
				call(tool, node, heldPick(op.Pick))
			}
			f.stop()
			if now := readRoundJournal(t, roundDir); maps.EqualFunc(now, forged, bytes.Equal) {
				writeRoundJournal(t, roundDir, forged, saved)
			}
			rebuild()
		case "state.json edited":
			// The server keeps its state snapshot out of the repository:
			// the agent writes one of its own there, every step done.
			j, err := f.d.Book.View(fRound)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.MarshalIndent(j.State(), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			restore(round.StateFile, []byte(strings.ReplaceAll(strings.ReplaceAll(string(b), `"not_started"`, `"done"`), `"in_flight"`, `"done"`)))
			call(tool, node, "")
			if err := os.Remove(filepath.Join(roundDir, round.StateFile)); err != nil {
				t.Fatal(err)
			}
		case "forged journal start":
			j, err := f.d.Book.Journal(fRound, false)
			if err != nil {
				t.Fatal(err)
			}
			step := toolStepOf(tool)
			if run := window.StepRun(j.State(), step, node); run == nil || run.State != round.InFlight {
				// A record of a step in flight under an approval nobody
				// signed (the journal takes it as any other).
				if _, err := j.StartStep(step, node, round.Meta{ApprovalID: "forged", PlanDigest: "sha256:" + strings.Repeat("f", 64)}); err != nil {
					res.kinds["forged journal start (journal refused it)"]++
				}
			}
			call(tool, node, "")
		case "statement with a rewritten summary":
			_, r := f.call("record_decision", map[string]any{"decision": "resume", "reason": "fixed"})
			if r.Approval != nil {
				req, err := policy.ParseRequest([]byte(r.Approval.Request))
				if err != nil {
					t.Fatal(err)
				}
				req.Summary = append(req.Summary, "and nothing else")
				_, r := f.call("record_decision", map[string]any{"decision": "resume", "reason": "fixed", "attestation": f.person.sign(t, req.String())})
				if r.Status == StatusOK {
					return hostileResult{violation: "a statement whose summary was rewritten was accepted", at: i}
				}
			}
		case "statement from another stop", "the person signs a resume":
			if kind == "the person signs a resume" {
				_, r := f.call("record_decision", map[string]any{"decision": "resume", "reason": "fixed"})
				if r.Approval != nil {
					res.signed++
					statements = append(statements, &statement{text: f.person.sign(t, r.Approval.Request), stop: stopOf()})
				}
			}
			if len(statements) == 0 {
				break
			}
			s := statements[op.Pick%len(statements)]
			now := stopOf()
			_, r := f.call("record_decision", map[string]any{"decision": "resume", "reason": "fixed", "attestation": s.text})
			if r.Status == StatusOK {
				if s.used || s.stop != now || now == "" {
					return hostileResult{violation: fmt.Sprintf("a resume statement signed at stop %q (used %v) was accepted at stop %q", s.stop, s.used, now), at: i}
				}
				s.used = true
			}
		case "the person signs a step":
			// The request for this tool and node, or else any the agent holds.
			keys := slices.Sorted(maps.Keys(requests))
			if _, ok := requests[tool+"/"+node]; !ok && len(keys) > 0 {
				tool, node, _ = strings.Cut(keys[op.Pick%len(keys)], "/")
			}
			for _, key := range []string{tool + "/" + node} {
				r, ok := requests[key]
				if !ok {
					break
				}
				a := f.person.sign(t, r.Approval.Request)
				held = append(held, a)
				sigs[key]++
				res.signed++
				call(tool, node, a)
				delete(requests, key)
			}
		case "the person signs a window":
			_, r := f.call("approve_window", map[string]any{"node": node})
			if r.Status == StatusApprovalRequired && r.Approval != nil {
				a := f.person.sign(t, r.Approval.Request)
				held = append(held, a)
				res.signed++
				for _, s := range windowSteps(node) {
					sigs[s+"/"+node]++
				}
				f.call("approve_window", map[string]any{"node": node, "approval": a})
			}
		case "the hosts move on":
			h := f.host(node)
			h.InstallState = "finished"
			if op.Pick%2 == 0 {
				h.Boot(op.Pick%3 == 0)
			}
			f.advance(time.Minute)
		case "an install fails":
			h := f.host(node)
			h.InstallState, h.ExitCode = "finished", 100
			call("install_updates", node, "")
			h.ExitCode = 0
		case "write tools":
			w := []string{"record_verification", "uncordon_node", "close_window", "record_inspection", "record_simulation"}
			f.call(w[op.Pick%len(w)], map[string]any{"node": node})
		}
		res.kinds[kind]++
		if v := standing(kind, before, wasStopped, wasCordoned); v != "" {
			res.violation, res.at = kind+": "+v, i
			return res
		}
		if v := check(); v != "" {
			res.violation, res.at = kind+": "+v, i
			return res
		}
	}
	for _, c := range count() {
		res.actions += c
	}
	return res
}

// toolStepOf is the journal step a destructive tool runs.
func toolStepOf(tool string) round.Step {
	switch tool {
	case "drain_node":
		return round.StepDrain
	case "install_updates":
		return round.StepInstall
	case "trial_boot":
		return round.StepTrialBoot
	case "promote_kernel":
		return round.StepPromote
	}
	return round.StepTrialBoot // the drill is a trial boot of the armed kernel
}

// hostileSegmentBytes seals the hostile rig's journal in small segments,
// so that forgeries reach sealed segments too.
const hostileSegmentBytes = 4 << 10

// readRoundJournal reads the round's journal files (the live file and
// every sealed segment) by name.
func readRoundJournal(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	names, err := filepath.Glob(filepath.Join(dir, "journal*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range names {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = b
	}
	return out
}

// writeRoundJournal replaces the journal files from (as read) with to.
func writeRoundJournal(t *testing.T, dir string, from, to map[string][]byte) {
	t.Helper()
	for name := range from {
		if _, ok := to[name]; !ok {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, b := range to {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// forgeJournal is one of the agent's rewrites of the journal's files,
// chosen by op.Pick: records numbered on as the server would, so only
// the anchor can tell them apart.
func forgeJournal(t *testing.T, files map[string][]byte, op hostileOp, tool, node string) (map[string][]byte, string) {
	t.Helper()
	out := maps.Clone(files)
	live := splitJSONL(files[round.JournalFile])
	var segs []string
	for name := range files {
		if name != round.JournalFile {
			segs = append(segs, name)
		}
	}
	slices.Sort(segs)
	lastSeq := uint64(0)
	for _, name := range append(slices.Clone(segs), round.JournalFile) {
		for _, r := range splitJSONL(files[name]) {
			lastSeq = r.Seq
		}
	}
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	appendRecs := func(recs []round.Record, rs ...round.Record) []round.Record {
		for _, r := range rs {
			lastSeq++
			r.Seq, r.Time = lastSeq, at
			recs = append(recs, r)
		}
		return recs
	}
	green := func(step round.Step, n string) []round.Record {
		return []round.Record{{Kind: round.KindStepStarted, Step: step, Node: n, ApprovalID: "forged"},
			{Kind: round.KindStepFinished, Step: step, Node: n, Outcome: round.OutcomeDone, Kernel: fTarget}}
	}
	var what string
	switch op.Pick % 6 {
	case 0: // a failure cut away and green steps written after it
		what = "green steps over a failure"
		cut := len(live)
		for i := len(live) - 1; i >= 0; i-- {
			if live[i].Kind == round.KindStepFailed {
				cut, node = i, live[i].Node
				break
			}
		}
		if cut < len(live) {
			lastSeq = live[cut].Seq - 1
		}
		recs := live[:cut]
		for _, s := range []round.Step{round.StepTrialBoot, round.StepVerify, round.StepUncordon, round.StepGPUAcceptance} {
			recs = appendRecs(recs, green(s, node)...)
		}
		live = recs
	case 1: // a person's decision nobody signed
		what = "unsigned resume"
		live = appendRecs(live, round.Record{Kind: round.KindDecision, Decision: round.DecisionResume, Node: node, Step: toolStepOf(tool), ApprovalID: "forged"})
	case 2: // a window closed and its gate green
		what = "window closed by hand"
		recs := live
		for _, s := range []round.Step{round.StepPromote, round.StepGate} {
			recs = appendRecs(recs, green(s, node)...)
		}
		live = recs
	case 3: // two records swapped, their numbers kept in order
		what = "records reordered"
		if len(live) >= 3 {
			i := len(live) - 3
			live[i], live[i+1] = live[i+1], live[i]
			live[i].Seq, live[i+1].Seq = live[i+1].Seq, live[i].Seq
		}
	case 4: // a record deleted and the rest renumbered
		what = "record deleted, renumbered"
		if len(live) >= 2 {
			i := len(live) / 2
			live = append(live[:i:i], live[i+1:]...)
			for j := i; j < len(live); j++ {
				live[j].Seq--
			}
		}
	case 5: // a sealed segment rewritten after it was committed
		what = "sealed segment edited"
		if len(segs) == 0 {
			what = "no segment yet: the live file's last failure made green"
		}
		name := round.JournalFile
		if len(segs) > 0 {
			name = segs[op.Pick%len(segs)]
		}
		recs := splitJSONL(files[name])
		for i := range recs {
			if recs[i].Kind == round.KindStepFailed || i == len(recs)-1 {
				recs[i].Kind, recs[i].Outcome, recs[i].Detail = round.KindStepFinished, round.OutcomeDone, ""
				break
			}
		}
		if name != round.JournalFile {
			out[name] = joinJSONL(t, recs)
			return out, what
		}
		live = recs
	}
	out[round.JournalFile] = joinJSONL(t, live)
	return out, what
}

func splitJSONL(b []byte) []round.Record {
	var out []round.Record
	for _, l := range bytes.Split(b, []byte("\n")) {
		var r round.Record
		if len(l) > 0 && json.Unmarshal(l, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

func joinJSONL(t *testing.T, recs []round.Record) []byte {
	t.Helper()
	var b []byte
	for _, r := range recs {
		l, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, l...), '\n')
	}
	return b
}
