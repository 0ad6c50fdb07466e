package lab

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/lab/maintainers"
)

// TestFaultCatalogue injects each fault of the catalogue into a small lab
// (2 control-plane nodes, 1 canary) and lets the agent client run the
// round: the round must stop at the right step, on the right node, with
// the right words, and nothing destructive may run after the stop. The
// faults the fleet-wide preflight sees (a removal, /boot, grubenv on
// mdraid, a PDB that never allows an eviction, NVIDIA modules missing for
// the target kernel, a changed host key) stop the round at plan time, as
// that node's failed inspect or simulate check, before anything is
// cordoned. The faults that are not regressions (an SSH drop mid-install, every GPU
// allocated) must let the round close.
func TestFaultCatalogue(t *testing.T) {
	cases := []faultCase{
		{fault: "apt-would-remove", node: "cp-1", stopStep: "simulate", stopNode: "cp-1", reason: "remove"},
		{fault: "package-not-held", node: "cp-1", stopStep: "simulate", stopNode: "cp-1", reason: "not held"},
		{fault: "host-key-changed", node: "cp-1", stopStep: "inspect", stopNode: "cp-1", reason: "host key"},
		{fault: "kernel-panic", node: "cp-1", stopStep: "trial_boot", stopNode: "cp-1", reason: "OLD kernel"},
		{fault: "hang-on-boot", node: "cp-1", stopStep: "trial_boot", stopNode: "cp-1", reason: "hang"},
		{fault: "boot-on-mdraid", node: "cp-1", stopStep: "inspect", stopNode: "cp-1", reason: "grubenv"},
		{fault: "pdb-blocks-drain", arg: "cp-1", stopStep: "inspect", stopNode: "cp-1", reason: "disruption budget"},
		{fault: "etcd-member-lost", arg: "cp-2", stopStep: "drain", stopNode: "cp-1", reason: "etcd"},
		{fault: "postgres-not-ready", stopStep: "gate", stopNode: "cp-1", reason: "postgres"},
		{fault: "webhook-short", after: "promote_kernel", stopStep: "gate", stopNode: "cp-1", reason: "webhook"},
		{fault: "new-failing-pod", after: "promote_kernel", stopStep: "gate", stopNode: "cp-1", reason: "stack-health"},
		{fault: "nvidia-modules-missing", node: "gpu-canary-1", stopStep: "inspect", stopNode: "gpu-canary-1", reason: "NVIDIA"},
		{fault: "gpu-missing", node: "gpu-canary-1", stopStep: "gpu_acceptance", stopNode: "gpu-canary-1", reason: "GPU"},
		{fault: "fabric-manager-down", node: "gpu-canary-1", stopStep: "gpu_acceptance", stopNode: "gpu-canary-1", reason: "abric"},
		{fault: "model-errors", stopStep: "gpu_acceptance", stopNode: "gpu-canary-1", reason: "completion"},
		{fault: "ssh-drop-mid-install", node: "cp-1"},
		{fault: "gpus-exhausted", arg: "gpu-canary-1", after: "uncordon_node", afterNode: "gpu-canary-1"},
		// Real-host hazards: each a clear stop before anything changed, or
		// (phasing) nothing to stop for.
		{fault: "dpkg-interrupted", node: "cp-1", stopStep: "simulate", stopNode: "cp-1", reason: "dpkg --configure -a"},
		{fault: "boot-nearly-full", node: "cp-1", stopStep: "simulate", stopNode: "cp-1", reason: "/boot has 20 MiB free"},
		// The lock is taken once cp-1 is drained: held before, inspection
		// finds it and the round stops there (TestHostOnlyHazardsThroughTheCLI).
		{fault: "dpkg-locked", node: "cp-1", after: "drain_node", afterNode: "cp-1", stopStep: "install", stopNode: "cp-1", reason: "dpkg is locked by process"},
		{fault: "grub-default-overridden", node: "cp-1", stopStep: "trial_boot", stopNode: "cp-1", reason: "sets GRUB_DEFAULT"},
		{fault: "phased-update", node: "cp-1"},
		// Operations: maintenance windows, the alert gate, notices, a kernel
		// that boots but is red (rolled back), jobs that hold a drain.
		{fault: "window-closes", after: "drain_node", afterNode: "cp-1", beforeWait: nextDrainWaitsForWindow, check: windowClosedMidRound},
		{fault: "alert-firing", after: "promote_kernel", alertmanager: true, stopStep: "gate", stopNode: "cp-1", reason: DefaultFiringAlert,
			check: func(t *testing.T, r *faultRun) { rollBackAndProve(t, r, "cp-1", true) }},
		{fault: "alertmanager-down", after: "promote_kernel", alertmanager: true, stopStep: "gate", stopNode: "cp-1", reason: "could not check"},
		{fault: "webhook-down", check: failedSendsJournaled},
		{fault: "bond-down-on-new-kernel", node: "cp-1", stopStep: "verify", stopNode: "cp-1", reason: "bond0",
			check: func(t *testing.T, r *faultRun) { rollBackAndProve(t, r, "cp-1", false) }},
		{fault: "gpu-job-running", arg: "gpu-canary-1", poll: time.Second, stopStep: "drain", stopNode: "gpu-canary-1",
			reason: "jobs still run on the node after waiting", check: drainHeldForJob},
		{name: "gpu-job-finishes", fault: "gpu-job-running", arg: "gpu-canary-1", clearWhile: "drain_node", check: drainWaitedForJob},
		// The others that maintain the nodes (lab/others.go): the canary's
		// driver is the GPU Operator's driver container.
		{fault: "driver-image-missing", otherActors: true, stopStep: "inspect", stopNode: "gpu-canary-1", reason: "no precompiled driver image", check: nothingCordoned},
		{fault: "driver-build-fails", node: "gpu-canary-1", otherActors: true, builtAtBoot: true, stopStep: "gpu_acceptance", stopNode: "gpu-canary-1",
			reason: "driver pod", check: driverBackAfterRollback},
		// Another party holds a node: its drain waits (nothing cordoned,
		// nothing of theirs changed, the wait in round_status) until the
		// holder lets go, then goes on by itself.
		{fault: "kured-lock-held", node: "cp-2", otherActors: true, clearWhile: "drain_node", held: heldBy("kured", "cp-2"), check: othersLeftAsTheyWere},
		{fault: "node-maintenance-held", node: "gpu-canary-1", otherActors: true, clearWhile: "drain_node", clearNode: "gpu-canary-1",
			held: heldBy("node-maintenance", "network-operator.nvidia.com"), check: othersLeftAsTheyWere},
		{fault: "gpu-operator-upgrading-node", node: "gpu-canary-1", otherActors: true, clearWhile: "drain_node", clearNode: "gpu-canary-1",
			held: heldBy("gpu-operator", maintainers.LabelGPUDriverUpgradeState+"=drain-required"), check: othersLeftAsTheyWere},
		// A person's cordon: the round stops for a person and lifts nothing;
		// once the person uncordons and signs resume, the round closes.
		{fault: "cordoned-by-a-person", node: "gpu-canary-1", otherActors: true, stopStep: "drain", stopNode: "gpu-canary-1", reason: "a person must look",
			check: personsCordonKeptThenResume},
	}
	// faultCasesAtOnce cases run at a time, whatever go test's -parallel
	// (2 on 2 cores): each has a lab of its own, on a control plane an
	// earlier case finished with, and most of a case is waiting (a red
	// gate's settle time, a drain waiting for its job, reboots).
	queue := make(chan int)
	var wg sync.WaitGroup
	for range faultCasesAtOnce {
		wg.Go(func() {
			for i := range queue {
				runFaultCase(t, cases[i])
			}
		})
	}
	for i := range cases {
		queue <- i
	}
	close(queue)
	wg.Wait()
}

// faultCasesAtOnce is how many of the fault catalogue's cases run at once.
const faultCasesAtOnce = 3

func runFaultCase(t *testing.T, tc faultCase) {
	name := tc.fault
	if tc.name != "" {
		name = tc.name
	}
	t.Run(name, func(t *testing.T) {
		opts := Options{ControlPlanes: 2, Canary: 1, GPUServers: 0,
			RebootTimeout: 15 * time.Second, GateSettle: 30 * time.Second, DrainTimeoutMinutes: 1,
			OtherActors: tc.otherActors, DriverBuiltAtBoot: tc.builtAtBoot}
		if tc.alertmanager {
			if opts.Alertmanager = FindAlertmanager(os.Getenv); opts.Alertmanager == "" {
				t.Fatal("no Alertmanager binary: run scripts/setup.sh (it builds v0.28.1 into the cache) or set MCP_PATCH_ALERTMANAGER")
			}
		}
		l := upLab(t, opts)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		inject := func() {
			if err := l.Inject(ctx, tc.fault, tc.node, tc.arg); err != nil {
				t.Fatalf("inject %s: %v", tc.fault, err)
			}
		}
		if tc.after == "" {
			inject()
		}
		cs, _, closeSession, err := l.Session(ctx, testLog(t))
		if err != nil {
			t.Fatal(err)
		}
		defer closeSession()
		sawNoCapacity, injected := false, false
		run := &faultRun{lab: l, cs: cs}
		agent := &Agent{Session: cs, Sign: l.Sign, Wait: func(until time.Time) {
			run.waits = append(run.waits, until)
			if tc.beforeWait != nil {
				tc.beforeWait(t, run, until)
			}
			l.Clock.AdvanceTo(until)
		}, Say: func(s string) {
			t.Log(s)
			if strings.Contains(s, "no capacity") {
				sawNoCapacity = true
			}
		}, Poll: tc.poll, AfterCall: func(ctx context.Context, tool, node, status string) {
			if tool == tc.after && (tc.afterNode == "" || node == tc.afterNode) && !injected {
				injected = true
				inject()
			}
			if tool == tc.clearWhile && status == "in_progress" && (tc.clearNode == "" || node == tc.clearNode) && !run.cleared {
				run.cleared = true
				if tc.held != nil {
					tc.held(t, run)
				} else {
					run.whileWaiting(t)
				}
				if err := l.Clear(ctx, tc.fault, tc.node); err != nil {
					t.Fatalf("clear %s: %v", tc.fault, err)
				}
			}
		}}
		run.agent = agent
		out, err := agent.Run(ctx, "2026-11")
		run.out = out
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
		if tc.stopStep == "" {
			if !out.Closed {
				t.Fatalf("the round should close despite %s; stopped: %+v", tc.fault, out.Stopped)
			}
			if tc.fault == "gpus-exhausted" && !sawNoCapacity {
				t.Error("gpu_acceptance did not report no capacity")
			}
			if tc.check != nil {
				tc.check(t, run)
			}
			return
		}
		if out.Stopped == nil {
			t.Fatalf("the round did not stop (closed=%v)", out.Closed)
		}
		if out.Stopped.Step != tc.stopStep || out.Stopped.Node != tc.stopNode ||
			!strings.Contains(strings.ToLower(out.Stopped.Reason), strings.ToLower(tc.reason)) {
			t.Fatalf("stopped at %s on %s (%q); want %s on %s mentioning %q",
				out.Stopped.Step, out.Stopped.Node, out.Stopped.Reason, tc.stopStep, tc.stopNode, tc.reason)
		}
		// Nothing destructive runs after the stop, approval or not.
		for _, tool := range []string{"drain_node", "install_updates", "trial_boot", "promote_kernel"} {
			for _, node := range []string{"cp-1", "cp-2", "gpu-canary-1"} {
				res := callTool(t, cs, tool, map[string]any{"node": node})
				if res["status"] == "ok" || res["status"] == "in_progress" || res["status"] == "approval_required" {
					t.Errorf("%s on %s after the stop: %v", tool, node, res["status"])
				}
			}
		}
		if tc.check != nil {
			tc.check(t, run)
		}
	})
}

// faultCase is one case of the fault catalogue.
type faultCase struct {
	fault, node, arg string
	after            string // inject after this tool's call ("" = before the round)
	afterNode        string // ... on this node ("" = any)
	stopStep         string // "" = the round closes
	stopNode, reason string
	name             string // the subtest's name when not the fault's
	alertmanager     bool   // the lab runs a real Alertmanager
	// otherActors: the lab runs the other actors (Options.OtherActors),
	// builtAtBoot its driver container building at boot.
	otherActors, builtAtBoot bool
	// clearWhile clears the fault once this tool answers in_progress (a
	// job that finishes while the drain waits for it).
	clearWhile string
	// clearNode: clearWhile counts only this node's calls ("" = any);
	// held, when set, runs then instead of whileWaiting.
	clearNode string
	held      func(t *testing.T, r *faultRun)
	poll      time.Duration // the agent's pause before calling a step in progress again
	// beforeWait runs when the agent waits for the clock (a maintenance
	// window, the soak), before the lab clock moves.
	beforeWait func(t *testing.T, r *faultRun, until time.Time)
	// check runs last, on the lab as the round left it.
	check func(t *testing.T, r *faultRun)
}

func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
