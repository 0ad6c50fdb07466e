// Package layers is the project's documented layering as data (the picture
// at the top of docs/ARCHITECTURE.md) and the pure check of an import graph
// against it: a package imports only packages of its own layer or below,
// production code never imports the lab or the test support, and the
// production binary links neither. The test beside it reads the graph from
// `go list`; this package reads nothing and is imported by nothing.
package layers

import (
	"fmt"
	"sort"
	"strings"
)

// A Layer is one level of the picture: the packages matching its patterns
// ("round/window" exactly, or "kube/..." for kube and everything under it).
type Layer struct {
	Name     string
	Packages []string
}

// An Exception is an import the layering forbids that is known and owned:
// it is reported as long as it exists and fails the check once it is gone,
// so it is removed from the list when its owner lands the fix.
type Exception struct {
	From, To string
	// Why names the owner and the fix.
	Why string
}

// Layering is the whole rule set. Package paths are relative to the module.
type Layering struct {
	// Layers are the production packages, top first: a package may import
	// a package of its own layer or of a layer below, never above.
	Layers []Layer
	// Lab is the simulated fleet and its binaries: production packages
	// never import it; it may import production packages of LabCeiling's
	// layer and below.
	Lab        []string
	LabCeiling string
	// LabBinaries are the production-layer binaries that may link the lab
	// (the lab's own binary, which is mcp-patch plus `lab`).
	LabBinaries []string
	// TestSupport is imported only by tests and by other test support; it
	// may import anything but binaries.
	TestSupport []string
	// Production is the production binary: its dependencies hold neither
	// lab nor test-support packages.
	Production string
	Exceptions []Exception
}

// Project is mcp-patch's layering, top first.
var Project = Layering{
	Layers: []Layer{
		{Name: "binaries", Packages: []string{"cmd/...", "scripts/internal/..."}},
		{Name: "cli", Packages: []string{"cli"}},
		{Name: "tools", Packages: []string{"tools"}},
		{Name: "the open round", Packages: []string{"round/service", "round/window", "round/ops"}},
		{Name: "reporting", Packages: []string{"metrics", "notify"}},
		{Name: "the plan and the book", Packages: []string{"round/plan", "round/plan/...", "round/book", "round/promotion"}},
		{Name: "records", Packages: []string{"round", "round/inbox", "intent"}},
		{Name: "cluster and hosts", Packages: []string{"kube", "kube/...", "host", "host/..."}},
		{Name: "foundations", Packages: []string{"policy", "answer", "mcptool", "round/maintenance", "config", "internal/table", "internal/layers", "scripts", "examples", "deploy"}},
	},
	Lab:         []string{"lab", "lab/..."},
	LabCeiling:  "tools",
	LabBinaries: []string{"cmd/mcp-patch-lab"},
	TestSupport: []string{"internal/testsupport/..."},
	Production:  "cmd/mcp-patch",
}

// Package is one package of the graph: its path relative to the module and
// the module packages its non-test files import.
type Package struct {
	Path    string
	Imports []string
}

// Violation is one import the layering forbids, said in full.
type Violation struct {
	From, To string
	Message  string
}

// matches reports whether path is pattern ("a/b") or under it ("a/...").
func matches(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// place is where a package sits: a layer index, or the lab, or test
// support, or nowhere.
type place struct {
	layer       int // index into Layers, -1 when not a production package
	lab, test   bool
	name        string
	specificity int
}

func (l Layering) place(path string) (place, bool) {
	best, found := place{layer: -1}, false
	consider := func(p place, pattern string) {
		if !matches(pattern, path) {
			return
		}
		p.specificity = len(strings.TrimSuffix(pattern, "/..."))
		if !strings.HasSuffix(pattern, "/...") {
			p.specificity++ // an exact name beats its own prefix
		}
		if !found || p.specificity > best.specificity {
			best, found = p, true
		}
	}
	for i, layer := range l.Layers {
		for _, pat := range layer.Packages {
			consider(place{layer: i, name: "layer " + layer.Name}, pat)
		}
	}
	for _, pat := range l.Lab {
		consider(place{layer: -1, lab: true, name: "the lab"}, pat)
	}
	for _, pat := range l.TestSupport {
		consider(place{layer: -1, test: true, name: "test support"}, pat)
	}
	return best, found
}

func (l Layering) layerIndex(name string) int {
	for i, layer := range l.Layers {
		if layer.Name == name {
			return i
		}
	}
	return -1
}

// Check returns every import of pkgs the layering forbids, sorted, and the
// exceptions that no longer occur (each a Violation saying to remove it).
// An unplaced package is a violation too: the picture must name it.
func (l Layering) Check(pkgs []Package) []Violation {
	var out []Violation
	ceiling := l.layerIndex(l.LabCeiling)
	seen := map[Exception]bool{}
	excepted := func(from, to string) bool {
		for _, e := range l.Exceptions {
			if e.From == from && matches(e.To, to) {
				seen[Exception{From: e.From, To: e.To}] = true
				return true
			}
		}
		return false
	}
	for _, p := range pkgs {
		from, ok := l.place(p.Path)
		if !ok {
			out = append(out, Violation{From: p.Path, Message: fmt.Sprintf("%s is in no layer: add it to internal/layers.Project and to the picture in docs/ARCHITECTURE.md", p.Path)})
			continue
		}
		for _, imp := range p.Imports {
			to, ok := l.place(imp)
			if !ok {
				continue // reported as a package of its own
			}
			msg := l.judge(p.Path, from, imp, to, ceiling)
			if msg == "" || excepted(p.Path, imp) {
				continue
			}
			out = append(out, Violation{From: p.Path, To: imp, Message: msg})
		}
	}
	for _, e := range l.Exceptions {
		if !seen[Exception{From: e.From, To: e.To}] {
			out = append(out, Violation{From: e.From, To: e.To, Message: fmt.Sprintf("the exception %s -> %s no longer occurs: remove it from internal/layers.Project.Exceptions", e.From, e.To)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		return out[i].To < out[j].To
	})
	return out
}

// judge says why from may not import to, or "" when it may.
func (l Layering) judge(fromPath string, from place, toPath string, to place, ceiling int) string {
	switch {
	case to.test && !from.test:
		return fmt.Sprintf("%s (%s) imports %s (test support): only tests and test support may", fromPath, from.name, toPath)
	case from.test:
		if to.layer == 0 {
			return fmt.Sprintf("%s (test support) imports %s (%s): test support never imports a binary", fromPath, toPath, to.name)
		}
		return ""
	case to.lab && from.lab:
		return ""
	case to.lab:
		for _, b := range l.LabBinaries {
			if matches(b, fromPath) {
				return ""
			}
		}
		return fmt.Sprintf("%s (%s) imports %s (the lab): production code never imports the lab", fromPath, from.name, toPath)
	case from.lab:
		if to.layer < ceiling {
			return fmt.Sprintf("%s (the lab) imports %s (%s): the lab imports %s and below", fromPath, toPath, to.name, "layer "+l.LabCeiling)
		}
		return ""
	case to.layer < from.layer:
		return fmt.Sprintf("%s (%s) imports %s (%s), a layer above it: imports only run down", fromPath, from.name, toPath, to.name)
	}
	return ""
}

// CheckLinked returns the lab and test-support packages among the
// production binary's dependencies (deps: every package it links, module
// packages relative to the module).
func (l Layering) CheckLinked(deps []string) []Violation {
	var out []Violation
	for _, d := range deps {
		if p, ok := l.place(d); ok && (p.lab || p.test) {
			out = append(out, Violation{From: l.Production, To: d, Message: fmt.Sprintf("the production binary %s links %s (%s)", l.Production, d, p.name)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].To < out[j].To })
	return out
}
