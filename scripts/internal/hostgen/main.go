// Command hostgen assembles the host steps (scripts/host/*.sh) from their own
// bodies and the shared shell in scripts/host/lib/*.sh.
//
// Each script is sent alone over SSH (`sudo sh -s < inspect.sh`) and must stay
// runnable by hand, so it carries its own copy of each helper it needs,
// between the lines
//
//	# ---- NAME: begin (copied from lib/NAME.sh by go generate; edit it there) ----
//	# ---- NAME: end ----
//
// Everything outside those markers is the script's own body and is kept as
// it is. hostgen replaces what lies between them with lib/NAME.sh, so the
// helpers have one source. Run it through `go generate ./scripts`; the test
// of this package fails when a script is not current.
//
// It owns the markers and the copies, nothing else: it never edits a body.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

func main() {
	dir := flag.String("dir", "host", "the folder holding the scripts (*.sh) and lib/")
	flag.Parse()
	changed, err := writeAll(*dir)
	for _, name := range changed {
		fmt.Fprintf(os.Stderr, "hostgen: rewrote %s\n", filepath.Join(*dir, name))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostgen: %v\n", err)
		os.Exit(1)
	}
}

// markerRE matches a begin or end line; the name is a lib file's base name.
var markerRE = regexp.MustCompile(`^# ---- ([a-z][a-z0-9-]*): (begin|end)\b`)

func beginLine(name string) string {
	return "# ---- " + name + ": begin (copied from lib/" + name + ".sh by go generate; edit it there) ----\n"
}

func endLine(name string) string { return "# ---- " + name + ": end ----\n" }

// assemble returns script with the text between each begin/end marker pair
// replaced by lib(name), and the marker lines in their canonical form. It
// also returns the names it used. A marker without its partner, a nested
// block, a lib part that is missing, empty, lacks its final newline or holds
// a marker itself is an error: nothing is assembled.
func assemble(script []byte, lib func(name string) ([]byte, error)) ([]byte, []string, error) {
	var out bytes.Buffer
	var used []string
	open := "" // the block being skipped, "" outside one
	lines := strings.SplitAfter(string(script), "\n")
	for i, l := range lines {
		m := markerRE.FindStringSubmatch(l)
		switch {
		case m == nil && open != "":
			continue // the old copy: replaced below
		case m == nil:
			out.WriteString(l)
		case m[2] == "begin" && open != "":
			return nil, nil, fmt.Errorf("line %d: block %s begins inside block %s", i+1, m[1], open)
		case m[2] == "begin":
			part, err := lib(m[1])
			if err != nil {
				return nil, nil, fmt.Errorf("line %d: block %s: %w", i+1, m[1], err)
			}
			if err := checkPart(part); err != nil {
				return nil, nil, fmt.Errorf("line %d: lib/%s.sh %w", i+1, m[1], err)
			}
			out.WriteString(beginLine(m[1]))
			out.Write(part)
			open = m[1]
			used = append(used, m[1])
		case open != m[1]:
			return nil, nil, fmt.Errorf("line %d: end of block %s, which is not open", i+1, m[1])
		default:
			out.WriteString(endLine(m[1]))
			open = ""
		}
	}
	if open != "" {
		return nil, nil, fmt.Errorf("block %s has no end marker", open)
	}
	return out.Bytes(), used, nil
}

func checkPart(part []byte) error {
	switch {
	case len(part) == 0:
		return errors.New("is empty")
	case part[len(part)-1] != '\n':
		return errors.New("does not end in a newline")
	}
	for _, l := range strings.Split(string(part), "\n") {
		if markerRE.MatchString(l) {
			return fmt.Errorf("holds a marker line %q", l)
		}
	}
	return nil
}

// script is one host script as it is on disk and as it should be.
type script struct {
	name       string // base name, e.g. "trial_boot.sh"
	have, want []byte
	mode       fs.FileMode
}

// assembleAll assembles every dir/*.sh from dir/lib/. A lib part that no
// script uses is an error too: it would be edited in vain.
func assembleAll(dir string) ([]script, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.sh"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no scripts in %s", dir)
	}
	libDir := filepath.Join(dir, "lib")
	parts, err := filepath.Glob(filepath.Join(libDir, "*.sh"))
	if err != nil {
		return nil, err
	}
	unused := map[string]bool{}
	for _, p := range parts {
		unused[strings.TrimSuffix(filepath.Base(p), ".sh")] = true
	}
	lib := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(libDir, name+".sh")) }
	var all []script
	var errs []error
	for _, n := range names {
		st, err := os.Stat(n)
		if err != nil {
			return nil, err
		}
		have, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		want, used, err := assemble(have, lib)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			continue
		}
		for _, u := range used {
			delete(unused, u)
		}
		all = append(all, script{name: filepath.Base(n), have: have, want: want, mode: st.Mode().Perm()})
	}
	if len(errs) == 0 && len(unused) > 0 {
		var list []string
		for u := range unused {
			list = append(list, "lib/"+u+".sh")
		}
		sort.Strings(list)
		errs = append(errs, fmt.Errorf("%s: no script uses %s", dir, strings.Join(list, ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return all, nil
}

// writeAll rewrites the scripts that are not current (nothing when any
// script or lib part is in error) and returns their names.
func writeAll(dir string) ([]string, error) {
	all, err := assembleAll(dir)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, s := range all {
		if bytes.Equal(s.have, s.want) {
			continue
		}
		if err := writeAtomic(filepath.Join(dir, s.name), s.want, s.mode); err != nil {
			return changed, err
		}
		changed = append(changed, s.name)
	}
	return changed, nil
}

func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	err = errors.Join(err, f.Chmod(mode), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", path, err), os.Remove(tmp))
	}
	return nil
}
