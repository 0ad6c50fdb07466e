package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// maxPlanBytes bounds the plan.json approve reads (a 1,000-node plan is
// a few MiB).
const maxPlanBytes = 256 << 20

// planShown is what `mcp-patch approve` shows a person of the plan a
// request binds, rendered by this binary from the round's plan.json and
// never read from plan.md (a file the agent can write): the whole plan
// for sign_plan, each step of the node's window for approve_window, each
// step's digest computed again from the plan and held to the one the
// request binds. A plan.json that is not the one the request binds is an
// error: the person must not sign. Requests of other tools bind no plan
// document: "".
//
// planFile is the plan.json to read; "" means rounds/<round>/plan.json of
// intentRepo.
func planShown(req policy.Request, planFile, intentRepo string) (string, error) {
	if req.Kind != policy.KindApproval || (req.Tool != "sign_plan" && req.Tool != "approve_window") {
		return "", nil
	}
	if planFile == "" {
		if intentRepo == "" {
			return "", fmt.Errorf("this request signs the plan of round %s: pass --plan with its plan.json (rounds/%s/plan.json on the round's branch) or --intent-repo, so that the plan is shown from it", req.Round, req.Round)
		}
		if !round.ValidRoundID(req.Round) {
			return "", fmt.Errorf("the request names round %q, which is not a round id", req.Round)
		}
		planFile = filepath.Join(intentRepo, "rounds", req.Round, "plan.json")
	}
	fh, err := os.Open(planFile)
	if err != nil {
		return "", fmt.Errorf("read the plan the request binds: %w", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxPlanBytes+1))
	if err != nil {
		return "", fmt.Errorf("read the plan the request binds: %w", err)
	}
	if len(b) > maxPlanBytes {
		return "", fmt.Errorf("read the plan the request binds: %s is larger than %d bytes", planFile, maxPlanBytes)
	}
	f, err := plan.Decode(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", planFile, err)
	}
	if f.Round != req.Round {
		return "", fmt.Errorf("%s is the plan of round %s; the request is for round %s", planFile, f.Round, req.Round)
	}
	var out strings.Builder
	switch req.Tool {
	case "sign_plan":
		if f.Digest != req.PlanDigest {
			return "", fmt.Errorf("%s has digest %s (revision %d); the request binds %s: it is not the plan you are asked to sign (fetch the round's branch again)",
				planFile, f.Digest, f.Revision, req.PlanDigest)
		}
		fmt.Fprintf(&out, "The plan you sign, rendered by this mcp-patch from %s (digest %s), not from plan.md:\n\n", planFile, f.Digest)
		if err := plan.Markdown(&out, f); err != nil {
			return "", err
		}
	case "approve_window":
		steps, err := windowSteps(req, f, planFile)
		if err != nil {
			return "", err
		}
		out.WriteString(steps)
	}
	return out.String(), nil
}

// windowTools are the window's tools in the order they run.
var windowTools = []string{"drain_node", "install_updates", "fallback_drill", "trial_boot", "promote_kernel"}

// windowSteps renders each step of the window an approve_window request
// binds from the node's plan, and refuses a request whose digests are
// not the plan's.
func windowSteps(req policy.Request, f plan.Fleet, planFile string) (string, error) {
	n, ok := f.Node(req.Node)
	if !ok {
		return "", fmt.Errorf("%s has no node %s", planFile, req.Node)
	}
	if n.Window != req.PlanDigest {
		return "", fmt.Errorf("%s gives %s the window digest %s; the request binds %s: it is not the window you are asked to approve (fetch the round's branch again)",
			planFile, n.Node, n.Window, req.PlanDigest)
	}
	// What the request binds, as its signed summary lists it.
	bound := map[string]string{}
	for _, l := range req.Summary {
		if tool, dg, ok := strings.Cut(l, " bound to "); ok && !strings.ContainsRune(dg, ' ') {
			bound[tool] = dg
		}
	}
	// The drain is bound to the live eviction preview, known only to the
	// server; every other step's digest follows from the plan.
	want := window.WindowTools(n, bound["drain_node"])
	for _, tool := range windowTools {
		if bound[tool] != want[tool] {
			return "", fmt.Errorf("the request binds %s to %q; the plan of %s in %s gives %q", tool, bound[tool], n.Node, planFile, want[tool])
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The window of %s you approve, rendered by this mcp-patch from %s (window digest %s), each step as it binds:\n", n.Node, planFile, n.Window)
	for _, tool := range windowTools {
		dg, ok := want[tool]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "  - %s: %s\n      bound to %s\n", tool, stepWords(tool, n), dg)
	}
	if err := plan.NodeMarkdown(&b, n); err != nil {
		return "", err
	}
	return b.String(), nil
}

// stepWords says what a window step does on node n, from its plan.
func stepWords(tool string, n plan.Node) string {
	switch tool {
	case "drain_node":
		var wl []string
		for _, w := range n.Drain.Workloads {
			wl = append(wl, fmt.Sprintf("%s (%d)", w.Key(), w.Pods))
		}
		if len(wl) == 0 {
			return "cordon " + n.Node + "; the reviewed drain evicts nothing (bound to the eviction preview the server took when it made the request)"
		}
		return fmt.Sprintf("cordon %s and evict %d pod(s): %s (bound to the eviction preview the server took when it made the request)", n.Node, n.Drain.Pods, strings.Join(wl, ", "))
	case "install_updates":
		return fmt.Sprintf("install %d package(s), the apt plan %s: %s", n.Packages.Count(), dash(n.PackageDigest), strings.Join(packageNames(n.Packages), ", "))
	case "fallback_drill":
		return fmt.Sprintf("fallback drill: kernel %s (GRUB entry %s) boots once and crashes on purpose; the host must come back by itself into %s (GRUB entry %s), which stays the default",
			dash(n.Target), dash(n.Grub.New), dash(n.Running), dash(n.Grub.Old))
	case "trial_boot":
		return fmt.Sprintf("boot %s (kernel %s) once, the default stays %s (kernel %s), kernel.panic %d s", dash(n.Grub.New), dash(n.Target), dash(n.Grub.Old), dash(n.Running), n.Grub.PanicSeconds)
	case "promote_kernel":
		return fmt.Sprintf("make %s (kernel %s) the default boot entry", dash(n.Grub.New), dash(n.Target))
	}
	return tool
}

// packageNames are the packages that move, kernel first.
func packageNames(p plan.Packages) []string {
	var out []string
	for _, g := range [][]string{p.Kernel, p.Nvidia, p.Kubernetes, p.Other} {
		out = append(out, g...)
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
