package tools

import (
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// TestHostileAgentActsOnlyUnderSignatures is a scripted agent that holds
// the MCP tools and write access to the intent repository's working copy,
// but no signing key, on the fleet rig (a signed plan, three nodes). Over
// random sequences it calls every destructive tool on every node bare,
// with approvals it saw signed (replayed, or for another tool or node),
// after writing plan and window entries into plan-signatures.json, after
// editing plan.json and nodes.json, after forging journal records of a
// step in flight, and asks for statements whose summary it rewrote; now
// and then a person signs a request the agent obtained, and the hosts
// move on (installs finish, reboots come back). It counts every
// destructive host and cluster action (apt started, trial boot prepared,
// promote, fallback drill armed, autoremove, a cordon) per tool and node
// against the person's signatures for that tool and node: none may
// exceed them.
func TestHostileAgentActsOnlyUnderSignatures(t *testing.T) {
	const episodes, ops = 2, 300
	start := time.Now()
	totals := map[string]int{}
	actions, signatures := 0, 0
	for ep := range episodes {
		a, s := hostileEpisode(t, mrand.New(mrand.NewPCG(20261203, uint64(ep))), ops, totals)
		actions += a
		signatures += s
	}
	t.Logf("hostile agent: %d episodes, %d operations by kind %v; %d destructive actions, all under %d person signatures; %s",
		episodes, episodes*ops, totals, actions, signatures, time.Since(start).Round(time.Millisecond))
	fmt.Printf("hostile agent: %d operations, %d destructive actions, 0 without a matching signature (%s)\n",
		episodes*ops, actions, time.Since(start).Round(time.Second))
}

var hostileTools = []string{"drain_node", "install_updates", "trial_boot", "promote_kernel", "fallback_drill"}

func hostileEpisode(t *testing.T, r *mrand.Rand, ops int, kinds map[string]int) (actions, signed int) {
	f := newFleet(t)
	f.planned()
	nodes := []string{"cp-1", "gpu-1", "gpu-2"}
	for _, n := range nodes {
		f.preflight(n)
	}
	roundDir := filepath.Join(f.repo, "rounds", fRound)
	// What the person signed, per tool and node, and approvals the agent
	// holds (each used once by the person's intent; the agent replays).
	sigs := map[string]int{}
	var held []string
	requests := map[string]*Result{} // the last approval request per tool/node
	drainDigests := map[string]string{}
	cordoned := map[string]bool{}
	count := func() map[string]int {
		got := map[string]int{}
		for _, n := range nodes {
			h := f.host(n)
			got["install_updates/"+n] = h.Count("install")
			got["trial_boot/"+n] = h.Count("prepare")
			got["promote_kernel/"+n] = h.Count("promote")
			got["fallback_drill/"+n] = h.Count("drill-arm")
		}
		return got
	}
	check := func(i int, kind string) {
		t.Helper()
		for _, n := range nodes {
			if u := f.node(n).Spec.Unschedulable; u && !cordoned[n] {
				cordoned[n] = true
				actions++
				if sigs["drain_node/"+n] == 0 {
					t.Fatalf("op %d (%s): %s was cordoned without a person's signature", i, kind, n)
				}
			} else if !u {
				cordoned[n] = false
			}
		}
		for k, c := range count() {
			if c > sigs[k] {
				t.Fatalf("op %d (%s): %s acted %d times under %d signatures", i, kind, k, c, sigs[k])
			}
		}
	}
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	call := func(tool, node, approval string) *Result {
		args := map[string]any{"node": node}
		if approval != "" {
			args["approval"] = approval
		}
		_, res := f.call(tool, args)
		if res.Status == StatusApprovalRequired && approval == "" {
			requests[tool+"/"+node] = res
			if tool == "drain_node" {
				drainDigests[node] = requestDigest(t, res)
			}
		}
		return res
	}
	restore := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(roundDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range ops {
		tool, node := pick(hostileTools), pick(nodes)
		var kind string
		switch k := r.IntN(12); k {
		case 0, 1:
			kind = "bare call"
			call(tool, node, "")
		case 2:
			kind = "replayed approval"
			if len(held) > 0 {
				call(tool, node, pick(held))
			}
		case 3:
			kind = "hand-written signatures"
			f.handWriteSignatures(drainDigests)
			call(tool, node, "")
		case 4:
			kind = "plan.json edited"
			b, err := os.ReadFile(filepath.Join(roundDir, fleetPlanFile))
			if err != nil {
				t.Fatal(err)
			}
			edited := strings.Replace(string(b), `"per_step"`, `"per_window"`, 1)
			if r.IntN(2) == 0 {
				edited = strings.Replace(string(b), `"control-plane"`, `"gpu"`, 1)
			}
			f.handWriteSignatures(drainDigests)
			restore(fleetPlanFile, []byte(edited))
			call(tool, node, "")
			restore(fleetPlanFile, b)
		case 5:
			kind = "nodes.json edited"
			p := filepath.Join(roundDir, "nodes.json")
			b, err := os.ReadFile(p)
			if err == nil {
				restore("nodes.json", []byte(strings.ReplaceAll(string(b), "sha256:", "sha256:0")))
				call(tool, node, "")
				restore("nodes.json", b)
			}
		case 6:
			kind = "forged journal start"
			j, err := f.d.Book.Journal(fRound, false)
			if err != nil {
				t.Fatal(err)
			}
			step := toolStepOf(tool)
			if run := window.StepRun(j.State(), step, node); run == nil || run.State != round.InFlight {
				// The agent writes a record of a step in flight under an
				// approval nobody signed (a record the journal takes as
				// any other).
				if _, err := j.StartStep(step, node, round.Meta{ApprovalID: "forged", PlanDigest: "sha256:" + strings.Repeat("f", 64)}); err != nil {
					kind = "forged journal start (journal refused it)"
				}
			}
			call(tool, node, "")
		case 7:
			kind = "statement with a rewritten summary"
			_, res := f.call("record_decision", map[string]any{"decision": "abort", "reason": "done"})
			if res.Approval != nil {
				req, err := policy.ParseRequest([]byte(res.Approval.Request))
				if err != nil {
					t.Fatal(err)
				}
				req.Summary = append(req.Summary, "and nothing else")
				_, res := f.call("record_decision", map[string]any{"decision": "abort", "reason": "done", "attestation": f.person.sign(t, req.String())})
				if res.Status == StatusOK {
					t.Fatalf("op %d: a statement whose summary was rewritten was accepted", i)
				}
			}
		case 8:
			kind = "approval for another step"
			if len(held) > 0 {
				call(pick(hostileTools), pick(nodes), pick(held))
			}
		case 9:
			kind = "the person signs"
			for key, res := range requests { // any request the agent holds
				tool, node, _ = strings.Cut(key, "/")
				a := f.person.sign(t, res.Approval.Request)
				held = append(held, a)
				sigs[key]++
				signed++
				call(tool, node, a)
				delete(requests, key)
				break
			}
		case 10:
			kind = "the hosts move on"
			h := f.host(node)
			h.InstallState = "finished"
			if r.IntN(2) == 0 {
				h.Boot(false)
			}
			f.advance(time.Minute)
		case 11:
			kind = "write tools"
			f.call(pick([]string{"record_verification", "uncordon_node", "close_window", "record_inspection", "record_simulation"}), map[string]any{"node": node})
		}
		kinds[kind]++
		check(i, kind)
	}
	for _, c := range count() {
		actions += c
	}
	return actions, signed
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
