package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "github.com/mcp-patch/mcp-patch"

// goList runs go list in the module with args and decodes its JSON stream.
func goList(t *testing.T, args ...string) []struct {
	ImportPath string
	Imports    []string
	Standard   bool
} {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-json=ImportPath,Imports,Standard"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []struct {
		ImportPath string
		Imports    []string
		Standard   bool
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Standard   bool
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list %s: %v", strings.Join(args, " "), err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// rel is path relative to the module, and whether it is the module's.
func rel(path string) (string, bool) {
	if r, ok := strings.CutPrefix(path, module+"/"); ok {
		return r, true
	}
	return "", false
}

// TestImportsRunDown: every package of the module imports (in its non-test
// files) only packages of its own layer or below; no production package
// imports the lab or the test support; the known exceptions still occur.
func TestImportsRunDown(t *testing.T) {
	var graph []Package
	for _, p := range goList(t, "./...") {
		path, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		pkg := Package{Path: path}
		for _, imp := range p.Imports {
			if r, ok := rel(imp); ok {
				pkg.Imports = append(pkg.Imports, r)
			}
		}
		graph = append(graph, pkg)
	}
	if len(graph) < 20 {
		t.Fatalf("go list ./... found %d module packages: not the module", len(graph))
	}
	for _, v := range Project.Check(graph) {
		t.Error(v.Message)
	}
	for _, e := range Project.Exceptions {
		t.Logf("known exception %s -> %s: %s", e.From, e.To, e.Why)
	}
}

// TestProductionBinaryLinksNoLab: go list -deps of the production binary
// holds no lab or test-support package.
func TestProductionBinaryLinksNoLab(t *testing.T) {
	var deps []string
	for _, p := range goList(t, "-deps", "./"+Project.Production) {
		if r, ok := rel(p.ImportPath); ok {
			deps = append(deps, r)
		}
	}
	if len(deps) < 10 {
		t.Fatalf("go list -deps ./%s found %d module packages: not the binary", Project.Production, len(deps))
	}
	for _, v := range Project.CheckLinked(deps) {
		t.Error(v.Message)
	}
}

func TestCheck(t *testing.T) {
	l := Layering{
		Layers: []Layer{
			{Name: "bin", Packages: []string{"cmd/..."}},
			{Name: "top", Packages: []string{"top"}},
			{Name: "mid", Packages: []string{"mid", "mid/..."}},
			{Name: "low", Packages: []string{"low", "mid/low"}},
		},
		Lab:         []string{"lab/..."},
		LabCeiling:  "mid",
		LabBinaries: []string{"cmd/labbin"},
		TestSupport: []string{"ts/..."},
		Production:  "cmd/prod",
	}
	for name, tc := range map[string]struct {
		exceptions []Exception
		pkgs       []Package
		want       []Violation
	}{
		"down and sideways": {pkgs: []Package{{Path: "top", Imports: []string{"mid", "low"}}, {Path: "mid", Imports: []string{"mid/x", "low"}}}},
		"up": {pkgs: []Package{{Path: "low", Imports: []string{"top"}}}, want: []Violation{{From: "low", To: "top",
			Message: "low (layer low) imports top (layer top), a layer above it: imports only run down"}}},
		"an exact name beats its prefix": {pkgs: []Package{{Path: "mid/low", Imports: []string{"mid/x"}}}, want: []Violation{{From: "mid/low", To: "mid/x",
			Message: "mid/low (layer low) imports mid/x (layer mid), a layer above it: imports only run down"}}},
		"production imports the lab": {pkgs: []Package{{Path: "top", Imports: []string{"lab/x"}}}, want: []Violation{{From: "top", To: "lab/x",
			Message: "top (layer top) imports lab/x (the lab): production code never imports the lab"}}},
		"the lab's binary links the lab": {pkgs: []Package{{Path: "cmd/labbin", Imports: []string{"lab/x", "top"}}}},
		"the lab above its ceiling": {pkgs: []Package{{Path: "lab/x", Imports: []string{"top", "mid", "lab/y"}}}, want: []Violation{{From: "lab/x", To: "top",
			Message: "lab/x (the lab) imports top (layer top): the lab imports layer mid and below"}}},
		"production imports test support": {pkgs: []Package{{Path: "low", Imports: []string{"ts/fake"}}}, want: []Violation{{From: "low", To: "ts/fake",
			Message: "low (layer low) imports ts/fake (test support): only tests and test support may"}}},
		"the lab imports test support": {pkgs: []Package{{Path: "lab/x", Imports: []string{"ts/fake"}}}, want: []Violation{{From: "lab/x", To: "ts/fake",
			Message: "lab/x (the lab) imports ts/fake (test support): only tests and test support may"}}},
		"test support imports anything but binaries": {pkgs: []Package{{Path: "ts/a", Imports: []string{"lab/x", "top", "ts/b", "cmd/prod"}}}, want: []Violation{{From: "ts/a", To: "cmd/prod",
			Message: "ts/a (test support) imports cmd/prod (layer bin): test support never imports a binary"}}},
		"unplaced": {pkgs: []Package{{Path: "stray", Imports: []string{"low"}}}, want: []Violation{{From: "stray",
			Message: "stray is in no layer: add it to internal/layers.Project and to the picture in docs/ARCHITECTURE.md"}}},
		"an exception that occurs": {exceptions: []Exception{{From: "low", To: "top"}}, pkgs: []Package{{Path: "low", Imports: []string{"top"}}}},
		"an exception that no longer occurs": {exceptions: []Exception{{From: "low", To: "top"}}, pkgs: []Package{{Path: "low"}}, want: []Violation{{From: "low", To: "top",
			Message: "the exception low -> top no longer occurs: remove it from internal/layers.Project.Exceptions"}}},
	} {
		t.Run(name, func(t *testing.T) {
			l := l
			l.Exceptions = tc.exceptions
			if diff := cmp.Diff(tc.want, l.Check(tc.pkgs)); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckLinked(t *testing.T) {
	l := Layering{Layers: []Layer{{Name: "bin", Packages: []string{"cmd/..."}}, {Name: "low", Packages: []string{"low"}}},
		Lab: []string{"lab/..."}, TestSupport: []string{"ts/..."}, Production: "cmd/prod"}
	want := []Violation{
		{From: "cmd/prod", To: "lab/x", Message: "the production binary cmd/prod links lab/x (the lab)"},
		{From: "cmd/prod", To: "ts/y", Message: "the production binary cmd/prod links ts/y (test support)"},
	}
	if diff := cmp.Diff(want, l.CheckLinked([]string{"cmd/prod", "low", "ts/y", "lab/x"})); diff != "" {
		t.Errorf("CheckLinked (-want +got):\n%s", diff)
	}
}
