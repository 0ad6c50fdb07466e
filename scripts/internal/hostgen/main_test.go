package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hostDir is scripts/host seen from this package.
var hostDir = filepath.Join("..", "..", "host")

// TestScriptsAreCurrent fails when a host script's copy of a lib part is not
// lib/NAME.sh as it is now (someone edited the copy, or the lib without
// running the generator), or when a lib part is used by no script.
func TestScriptsAreCurrent(t *testing.T) {
	all, err := assembleAll(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 13 {
		t.Fatalf("assembled %d scripts, want the 13 host steps at least", len(all))
	}
	for _, s := range all {
		if d := cmp.Diff(string(s.want), string(s.have)); d != "" {
			t.Errorf("scripts/host/%s is not current with scripts/host/lib (run `go generate ./scripts`; edit the helpers in lib/, not in the copy) (-want +have):\n%s", s.name, d)
		}
	}
}

// TestEveryScriptHasCommon: the result protocol lives in lib/common.sh, so
// every host step must carry it.
func TestEveryScriptHasCommon(t *testing.T) {
	all, err := assembleAll(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if !strings.Contains(string(s.want), beginLine("common")) {
			t.Errorf("%s has no common block", s.name)
		}
	}
}

func TestAssemble(t *testing.T) {
	lib := map[string]string{
		"a":     "a1\na2\n",
		"b":     "b1\n",
		"empty": "",
		"nonl":  "x",
		"inner": "# ---- a: begin\n",
	}
	get := func(name string) ([]byte, error) {
		s, ok := lib[name]
		if !ok {
			return nil, fs.ErrNotExist
		}
		return []byte(s), nil
	}
	tests := []struct {
		name, in, want, err string
		used                []string
	}{
		{
			name: "stale copy replaced, body kept, markers canonical",
			in:   "#!/bin/sh\nbody1\n# ---- a: begin (old words) ----\nold\n# ---- a: end ----\nbody2\n",
			want: "#!/bin/sh\nbody1\n" + beginLine("a") + "a1\na2\n" + endLine("a") + "body2\n",
			used: []string{"a"},
		},
		{
			name: "current script unchanged",
			in:   "x\n" + beginLine("a") + "a1\na2\n" + endLine("a") + beginLine("b") + "b1\n" + endLine("b") + "y\n",
			want: "x\n" + beginLine("a") + "a1\na2\n" + endLine("a") + beginLine("b") + "b1\n" + endLine("b") + "y\n",
			used: []string{"a", "b"},
		},
		{
			name: "empty block filled",
			in:   "# ---- b: begin\n# ---- b: end\n",
			want: beginLine("b") + "b1\n" + endLine("b"),
			used: []string{"b"},
		},
		{name: "no markers", in: "only body\nno newline", want: "only body\nno newline"},
		{name: "no end", in: "# ---- a: begin\nx\n", err: "block a has no end marker"},
		{name: "end without begin", in: "x\n# ---- a: end ----\n", err: "line 2: end of block a, which is not open"},
		{name: "other end", in: "# ---- a: begin\n# ---- b: end\n", err: "end of block b, which is not open"},
		{name: "nested", in: "# ---- a: begin\n# ---- b: begin\n# ---- b: end\n# ---- a: end\n", err: "block b begins inside block a"},
		{name: "unknown lib", in: "# ---- zz: begin\n# ---- zz: end\n", err: "block zz: file does not exist"},
		{name: "empty lib", in: "# ---- empty: begin\n# ---- empty: end\n", err: "lib/empty.sh is empty"},
		{name: "lib without final newline", in: "# ---- nonl: begin\n# ---- nonl: end\n", err: "lib/nonl.sh does not end in a newline"},
		{name: "lib holding a marker", in: "# ---- inner: begin\n# ---- inner: end\n", err: "lib/inner.sh holds a marker line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, used, err := assemble([]byte(tt.in), get)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want it to say %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, string(got)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.used, used); d != "" {
				t.Errorf("used (-want +got):\n%s", d)
			}
		})
	}
}

// TestWriteAll runs the generator on a copy: it rewrites only the stale
// script, keeps its mode, and a second run changes nothing. A broken
// script or an unused lib part writes nothing at all.
func TestWriteAll(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("lib/common.sh", "new helper\n", 0o644)
	write("stale.sh", "#!/bin/sh\n# ---- common: begin\nold helper\n# ---- common: end ----\nbody\n", 0o755)
	current := "#!/bin/sh\n" + beginLine("common") + "new helper\n" + endLine("common")
	write("current.sh", current, 0o755)

	changed, err := writeAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"stale.sh"}, changed); d != "" {
		t.Errorf("changed (-want +got):\n%s", d)
	}
	got, err := os.ReadFile(filepath.Join(dir, "stale.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "#!/bin/sh\n" + beginLine("common") + "new helper\n" + endLine("common") + "body\n"; string(got) != want {
		t.Errorf("stale.sh = %q, want %q", got, want)
	}
	if st, err := os.Stat(filepath.Join(dir, "stale.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("stale.sh mode %v (%v), want 0755", st.Mode(), err)
	}
	if changed, err := writeAll(dir); err != nil || len(changed) != 0 {
		t.Errorf("second run changed %v (%v)", changed, err)
	}

	write("lib/orphan.sh", "nobody\n", 0o644)
	write("lib/common.sh", "newer helper\n", 0o644)
	if _, err := writeAll(dir); err == nil || !strings.Contains(err.Error(), "no script uses lib/orphan.sh") {
		t.Errorf("err = %v, want the unused lib part named", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "current.sh")); string(got) != current {
		t.Errorf("current.sh was rewritten although the run failed")
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 3 {
		t.Errorf("left %d entries (%v), want lib/, stale.sh, current.sh", len(entries), err)
	}

	if _, err := writeAll(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no scripts in") {
		t.Errorf("err = %v, want no scripts", err)
	}
}
