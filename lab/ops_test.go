package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/lab/world"
	"github.com/mcp-patch/mcp-patch/round"
)

// faultRun is one case of the fault catalogue as it runs.
type faultRun struct {
	lab   *Lab
	cs    *mcp.ClientSession
	agent *Agent
	out   Outcome
	waits []time.Time
	// cleared: the fault was cleared mid-round; waited: what the drain
	// said while it waited for the job.
	cleared bool
	waited  string
}

// roundView is the part of round_status's round the checks read.
type roundView struct {
	Phase string `json:"phase"`
	Stop  *struct {
		Node, Step, Reason string
	} `json:"stop"`
	Nodes []struct {
		Node   string `json:"node"`
		Window string `json:"window"`
	} `json:"nodes"`
}

func (r *faultRun) round(t *testing.T) roundView {
	t.Helper()
	res := callTool(t, r.cs, "round_status", map[string]any{})
	b, err := json.Marshal(res["round"])
	if err != nil {
		t.Fatal(err)
	}
	var v roundView
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("round_status round: %v", err)
	}
	return v
}

func (v roundView) window(node string) string {
	for _, n := range v.Nodes {
		if n.Node == node {
			return n.Window
		}
	}
	return ""
}

// nextDrainWaitsForWindow: the first wait of a round whose maintenance
// window closed while cp-1 was in progress is for the next window; by then
// cp-1 finished, and a drain of cp-2 now is refused and changes nothing.
func nextDrainWaitsForWindow(t *testing.T, r *faultRun, until time.Time) {
	if len(r.waits) != 1 {
		return
	}
	start, end := r.lab.maintenance[0], r.lab.maintenance[1]
	if d := until.Sub(start.Add(24 * time.Hour)); d < 0 || d > 5*time.Second {
		t.Errorf("the agent waits until %s, want the next window's opening %s", until, start.Add(24*time.Hour))
	}
	v := r.round(t)
	if v.window("cp-1") != "closed" {
		t.Errorf("cp-1 was in progress when the window closed at %s: it should have finished, its window is %q", end, v.window("cp-1"))
	}
	res := callTool(t, r.cs, "drain_node", map[string]any{"node": "cp-2"})
	reasons, _ := json.Marshal(res["reasons"])
	if res["status"] != "refused" || !strings.Contains(string(reasons), "maintenance window") {
		t.Errorf("drain_node cp-2 outside the window: %v %s", res["status"], reasons)
	}
	if w := r.round(t).window("cp-2"); w != "pending" {
		t.Errorf("cp-2's window is %q after the refused drain, want pending", w)
	}
}

// windowClosedMidRound: the round went on in the next window.
func windowClosedMidRound(t *testing.T, r *faultRun) {
	if len(r.waits) == 0 {
		t.Fatal("the agent never waited for a maintenance window")
	}
	start, end := r.lab.maintenance[0], r.lab.maintenance[1]
	drains := map[string]time.Time{}
	for _, rec := range readJournal(t, r.lab, "2026-11") {
		if rec.Kind == round.KindStepStarted && rec.Step == round.StepDrain {
			drains[rec.Node] = rec.Time
		}
	}
	if d := drains["cp-1"]; d.IsZero() || !d.Before(end) {
		t.Errorf("cp-1's drain started at %s, want inside the window ending %s", d, end)
	}
	if d := drains["cp-2"]; d.Before(start.Add(24 * time.Hour)) {
		t.Errorf("cp-2's drain started at %s, before the next window opened (%s)", d, start.Add(24*time.Hour))
	}
}

// failedSendsJournaled: with the receiver down the round closed, and the
// journal holds each failed send.
func failedSendsJournaled(t *testing.T, r *faultRun) {
	if n := len(r.lab.Receiver.Notices()); n != 0 {
		t.Errorf("the receiver is down but got %d notices", n)
	}
	failed := waitJournal(t, r.lab, "2026-11", func(recs []round.Record) bool {
		return countFailedNotices(recs) > 0
	})
	t.Logf("%d failed notices journaled, e.g. %s", countFailedNotices(failed), firstFailedNotice(failed))
	for _, kind := range []string{"approval_needed", "window_closed"} {
		if !strings.Contains(allFailedNotices(failed), "notification "+kind+" to lab-receiver failed") {
			t.Errorf("no failed %s notice in the journal", kind)
		}
	}
}

func countFailedNotices(recs []round.Record) int {
	n := 0
	for _, rec := range recs {
		if rec.Kind == round.KindNotification && strings.Contains(rec.Detail, " failed after ") {
			n++
		}
	}
	return n
}

func firstFailedNotice(recs []round.Record) string {
	for _, rec := range recs {
		if rec.Kind == round.KindNotification && strings.Contains(rec.Detail, " failed after ") {
			return rec.Detail
		}
	}
	return ""
}

func allFailedNotices(recs []round.Record) string {
	var b strings.Builder
	for _, rec := range recs {
		if rec.Kind == round.KindNotification && strings.Contains(rec.Detail, " failed after ") {
			b.WriteString(rec.Detail + "\n")
		}
	}
	return b.String()
}

// readJournal reads a round's journal records as they are on disk.
func readJournal(t *testing.T, l *Lab, id string) []round.Record {
	t.Helper()
	data, err := round.ReadJournal(filepath.Join(l.IntentRepo, "rounds", id))
	if err != nil {
		t.Fatal(err)
	}
	var out []round.Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var rec round.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitJournal waits (bounded, generously) until the journal satisfies ok.
func waitJournal(t *testing.T, l *Lab, id string, ok func([]round.Record) bool) []round.Record {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		recs := readJournal(t, l, id)
		if ok(recs) {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the journal did not get the expected records within 2 minutes (%d records)", len(recs))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rollBackAndProve runs rollback_node on a node stopped with red checks on
// its new kernel, as a person would approve it, and proves the result on
// the host: a new boot id, the old kernel running from its old GRUB entry,
// the new kernel not the default; the round stays stopped for a person,
// and the report (after the person aborts) lists the rollback.
func rollBackAndProve(t *testing.T, r *faultRun, node string, promoted bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := r.lab.Fleet.Host(node)
	before, err := h.State()
	if err != nil {
		t.Fatal(err)
	}
	if before.Kernel != fleet.NewKernel {
		t.Fatalf("%s runs %s before the rollback, want the new kernel %s", node, before.Kernel, fleet.NewKernel)
	}
	status, reasons, err := r.agent.Follow(ctx, "rollback_node", map[string]any{"node": node})
	if err != nil {
		t.Fatal(err)
	}
	if status != "ok" {
		t.Fatalf("rollback_node %s: %s %v", node, status, reasons)
	}
	t.Logf("rollback_node %s: %v", node, reasons)
	after, err := h.State()
	if err != nil {
		t.Fatal(err)
	}
	if after.Kernel != fleet.OldKernel || after.BootID == before.BootID || !strings.Contains(after.BootEntry, fleet.OldKernel) {
		t.Errorf("after the rollback %s runs %s (boot id %s, was %s; entry %s), want %s on a new boot",
			node, after.Kernel, after.BootID, before.BootID, after.BootEntry, fleet.OldKernel)
	}
	if !strings.Contains(strings.Join(reasons, " "), after.BootID) || !strings.Contains(strings.Join(reasons, " "), "uname "+fleet.OldKernel) {
		t.Errorf("the rollback's result does not show its proof (boot id %s, uname %s): %v", after.BootID, fleet.OldKernel, reasons)
	}
	dropin, err := os.ReadFile(h.Path("/etc/default/grub.d/99-trial-boot.cfg"))
	if err != nil || !strings.Contains(string(dropin), after.BootEntry) {
		t.Errorf("the drop-in that keeps the old entry the default (promoted=%v): %q, %v", promoted, dropin, err)
	}
	v := r.round(t)
	if v.Stop == nil || v.Stop.Node != node {
		t.Fatalf("the round should stay stopped at %s for a person: %+v", node, v.Stop)
	}
	recs := readJournal(t, r.lab, "2026-11")
	var rb []round.Record
	for _, rec := range recs {
		if rec.Kind == round.KindRollback && rec.Node == node {
			rb = append(rb, rec)
		}
	}
	if len(rb) != 2 || rb[0].ApprovalID == "" || rb[1].Outcome != round.OutcomeDone {
		t.Errorf("journal rollback records of %s: %+v, want a start under its approval and a done end", node, rb)
	}
	// The person aborts; the report shows the rollback.
	res := callTool(t, r.cs, "record_decision", map[string]any{"decision": "abort", "reason": "new kernel breaks the node; rolled back"})
	req, _ := res["approval"].(map[string]any)
	if res["status"] != "approval_required" || req == nil {
		t.Fatalf("record_decision abort: %v", res)
	}
	statement, err := r.lab.Sign(req["request"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if res := callTool(t, r.cs, "record_decision", map[string]any{"decision": "abort", "reason": "new kernel breaks the node; rolled back",
		"attestation": statement}); res["status"] != "ok" {
		t.Fatalf("record_decision abort signed: %v", res)
	}
	if res := callTool(t, r.cs, "close_round", map[string]any{}); res["status"] != "ok" {
		t.Fatalf("close_round after the abort: %v", res)
	}
	report, err := os.ReadFile(filepath.Join(r.lab.IntentRepo, "rounds", "2026-11", "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "rollback of "+node+" to its old kernel: done") {
		t.Errorf("the report does not show the rollback of %s:\n%s", node, report)
	}
}

// whileWaiting runs while the canary's drain waits for its training job:
// the node is cordoned (no new job lands) and the job still runs there.
func (r *faultRun) whileWaiting(t *testing.T) {
	n, err := r.lab.Cluster.Client().CoreV1().Nodes().Get(context.Background(), "gpu-canary-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable {
		t.Error("the drain waits for the job but gpu-canary-1 is not cordoned: a new job could land")
	}
	pods, err := r.lab.Cluster.Client().CoreV1().Pods("").List(context.Background(), metav1.ListOptions{
		LabelSelector: world.JobLabel + "=" + world.JobLabelValue, FieldSelector: "spec.nodeName=gpu-canary-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].DeletionTimestamp != nil {
		t.Errorf("the training job should still run while the drain waits: %d pods", len(pods.Items))
	}
	r.waited = "checked"
}

// planShowsJob: the plan people review lists the job the canary's drain
// waits for.
func planShowsJob(t *testing.T, r *faultRun) {
	md, err := os.ReadFile(filepath.Join(r.lab.IntentRepo, "rounds", "2026-11", "plan.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "waits up to 1 min for 1 running job(s)") || !strings.Contains(string(md), "workloads/"+world.TrainingJobPrefix+"gpu-canary-1-") {
		t.Errorf("plan.md does not show the job the canary's drain waits for:\n%s", md)
	}
}

// drainHeldForJob: the job outlived the bounded wait; the round stopped at
// the canary's drain with the node cordoned and the job untouched.
func drainHeldForJob(t *testing.T, r *faultRun) {
	planShowsJob(t, r)
	r.whileWaiting(t)
	for _, rec := range readJournal(t, r.lab, "2026-11") {
		if rec.Kind == round.KindStepFinished && rec.Step == round.StepDrain && rec.Node == "gpu-canary-1" {
			t.Error("the canary's drain finished although the job still runs")
		}
	}
}

// drainWaitedForJob: the job finished while the drain waited; the drain
// then evicted and the round closed.
func drainWaitedForJob(t *testing.T, r *faultRun) {
	planShowsJob(t, r)
	if r.waited == "" {
		t.Fatal("the canary's drain never answered in_progress while the job ran")
	}
}
