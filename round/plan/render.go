package plan

import (
	"fmt"
	"io"
	"strings"
)

// Markdown writes plan.md: what a person reads before signing the plan.
func Markdown(w io.Writer, f Fleet) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Plan of round %s\n\n", f.Round)
	if f.Revision > 0 {
		p("Revision %d (re-planned after review).\n\n", f.Revision)
	}
	p("Plan digest: `%s`\n\n", f.Digest)
	p("## Summary\n\n")
	for _, s := range f.Summary {
		p("- %s\n", s)
	}
	p("\n**This round needs %d signatures** (%d with one signature per destructive step): the plan itself, ", f.Signatures, f.PerStepSignatures)
	p("each node's window as the intent sizes it (per step on control-plane nodes, per step or per window on GPU servers) and autoremove.\n\n")
	if len(f.Blockers) > 0 {
		p("## Blockers\n\nNothing is cordoned while any of these stands.\n\n")
		for _, bl := range f.Blockers {
			p("- **%s**: %s", bl.Node, bl.Cause)
			if bl.Fix != "" {
				p(" — %s", bl.Fix)
			}
			p("\n")
		}
		p("\n")
	}
	if len(f.Risks) > 0 {
		p("## Risks\n\n")
		for _, r := range f.Risks {
			p("- %s\n", r)
		}
		p("\n")
	}
	if pr := f.Promotion; pr != nil {
		p("## Promotion from %s\n\nThis round runs in %s: a target kernel, with the NVIDIA packages moved with it, is planned only with proof from %s (a round there that closed green with them, certified by a person's signature, and soaked since) or a person's signed promotion.\n\n", pr.Upstream, pr.Environment, pr.Upstream)
		p("| kernel | NVIDIA packages with it | proven | why |\n|---|---|---|---|\n")
		for _, v := range pr.Kernels {
			word := "**no**"
			if v.Proven {
				word = "yes"
			}
			nv := "-"
			if len(v.Nvidia) > 0 {
				nv = strings.Join(v.Nvidia, ", ")
			}
			p("| %s | %s | %s | %s |\n", v.Kernel, cell(nv), word, cell(v.Why))
		}
		if len(pr.Kernels) == 0 {
			p("| - | - | - | no node gets a new kernel |\n")
		}
		p("\n")
	}
	p("## Order\n\n| # | node | role | running → target | signatures | why here |\n|---|---|---|---|---|---|\n")
	for _, n := range f.Nodes {
		role := n.Role
		if n.Canary {
			role += " (canary)"
		}
		p("| %d | %s | %s | %s → %s | %d (%s) | %s |\n", n.Position, n.Node, role, orDash(n.Running), orDash(n.Target), n.Signatures(), strings.ReplaceAll(n.Approval, "_", " "), cell(n.Reason))
	}
	p("\n## What runs where\n\n")
	for _, l := range f.Placement {
		p("- %s\n", l)
	}
	for _, n := range f.Nodes {
		writeNode(&b, n)
	}
	p("\n## Lessons and open questions that bear on this round\n\n")
	if len(f.Notes) == 0 {
		p("- none\n")
	}
	for _, nt := range f.Notes {
		ref := ""
		if nt.Ref != "" {
			ref = " " + nt.Ref
		}
		if nt.Source != "" {
			ref += " (from " + nt.Source + ")"
		}
		p("- %s %s%s: %s\n", nt.Component, strings.ReplaceAll(nt.Kind, "_", " "), ref, oneLine(nt.Text))
	}
	p("\n## Signing\n\nSign the plan digest before the first cordon: `mcp-patch approve` renders this plan from plan.json itself and shows it before it signs. ")
	p("Every step is checked against this plan before it runs; a node that drifted is refused with a diff and planned again, ")
	p("and only the steps that changed are signed again.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// NodeMarkdown writes one node's section of plan.md: kernels, packages,
// GRUB entries, drain preview, risks, blockers and step digests. It is
// what a person reads before approving the node's whole window.
func NodeMarkdown(w io.Writer, n Node) error {
	var b strings.Builder
	writeNode(&b, n)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeNode writes node n's section of plan.md to b.
func writeNode(b *strings.Builder, n Node) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## %d. %s\n\n", n.Position, n.Node)
	p("- kernel: %s → %s\n", orDash(n.Running), orDash(n.Target))
	if len(n.Runs) > 0 {
		p("- runs here: %s\n", strings.Join(n.Runs, "; "))
	}
	if len(n.Others) > 0 {
		p("- others maintaining it at plan time (looked at again before each cordon): %s\n", strings.Join(n.Others, "; "))
	}
	p("- approval: %s (%d signature(s)), window digest `%s`\n", strings.ReplaceAll(n.Approval, "_", " "), n.Signatures(), n.Window)
	p("\n### Packages that move (%d)\n\n", n.Packages.Count())
	group := func(name string, lines []string) {
		if len(lines) == 0 {
			return
		}
		p("- %s: %s\n", name, strings.Join(lines, ", "))
	}
	group("kernel", n.Packages.Kernel)
	group("NVIDIA", n.Packages.Nvidia)
	group("Kubernetes", n.Packages.Kubernetes)
	group("other", n.Packages.Other)
	if n.Packages.Count() == 0 {
		p("- none\n")
	}
	p("- package plan digest `%s`\n", orDash(n.PackageDigest))
	if dc := n.DriverContainer; dc != nil {
		p("\n### NVIDIA driver (GPU Operator driver container)\n\n")
		if dc.Source != "" {
			p("- for %s: %s\n", orDash(n.Target), dc.Source)
		} else {
			p("- for %s: none yet (see the blockers)\n", orDash(n.Target))
		}
	}
	p("\n### GRUB\n\n")
	if n.Grub.Old == "" {
		p("- no trial boot entries\n")
	} else {
		p("- default during the trial (running kernel): `%s`\n", n.Grub.Old)
		note := ""
		if n.Grub.NewPredicted {
			note = " (the id update-grub will give it; checked again at the trial boot)"
		}
		p("- booted once (target kernel): `%s`%s\n", n.Grub.New, note)
		p("- kernel.panic for the trial: %d s\n", n.Grub.PanicSeconds)
	}
	p("\n### Drain preview\n\n")
	if n.Drain.Pods == 0 {
		p("- evicts nothing (DaemonSet and static pods stay)\n")
	} else {
		p("- evicts %d pod(s) of %d workload(s):\n", n.Drain.Pods, len(n.Drain.Workloads))
		for _, wl := range n.Drain.Workloads {
			p("  - %s (%d)\n", wl.Key(), wl.Pods)
		}
	}
	for _, r := range n.Drain.Refused {
		p("- refused now by the API server: %s\n", r)
	}
	if len(n.Drain.WaitsFor) > 0 {
		p("- cordons, then waits up to %d min for %d running job(s) before evicting (then the round stops):\n", n.Drain.JobWaitMinutes, len(n.Drain.WaitsFor))
		for _, j := range n.Drain.WaitsFor {
			p("  - %s\n", j)
		}
	}
	if len(n.Risks) > 0 {
		p("\n### Risks\n\n")
		for _, r := range n.Risks {
			p("- %s\n", r)
		}
	}
	if len(n.Blockers) > 0 {
		p("\n### Blockers\n\n")
		for _, bl := range n.Blockers {
			p("- %s — %s\n", bl.Cause, bl.Fix)
		}
	}
	p("\n### Step digests\n\n")
	for _, s := range WindowSteps {
		p("- %s `%s`\n", s, orDash(n.Steps[s]))
	}
}

func cell(s string) string { return strings.ReplaceAll(oneLine(s), "|", "\\|") }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Text is a short readable table of the plan, for a terminal.
func Text(w io.Writer, f Fleet) error {
	var b strings.Builder
	for _, s := range f.Summary {
		fmt.Fprintf(&b, "%s\n", s)
	}
	fmt.Fprintf(&b, "\n%-3s %-24s %-14s %-40s %5s %5s %s\n", "#", "NODE", "ROLE", "KERNEL", "PKGS", "EVICT", "GRUB (new entry)")
	for _, n := range f.Nodes {
		role := n.Role
		if n.Canary {
			role += "*"
		}
		fmt.Fprintf(&b, "%-3d %-24s %-14s %-40s %5d %5d %s\n", n.Position, n.Node, role, orDash(n.Running)+" -> "+orDash(n.Target),
			n.Packages.Count(), n.Drain.Pods, orDash(n.Grub.New))
	}
	if len(f.Blockers) > 0 {
		fmt.Fprintf(&b, "\nBLOCKERS\n")
		for _, bl := range f.Blockers {
			fmt.Fprintf(&b, "  %s\n", bl)
		}
	}
	fmt.Fprintf(&b, "\nplan digest %s\n", f.Digest)
	_, err := io.WriteString(w, b.String())
	return err
}
