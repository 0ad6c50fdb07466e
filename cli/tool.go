package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mcp-patch/mcp-patch/tools"
)

// runTool is `mcp-patch tool NAME`: the CLI twin of an MCP tool, with the
// same input and output.
func runTool(ctx context.Context, g *globals, args []string, stdio IO) int {
	reg := tools.Builtin()
	if len(args) == 0 || args[0] == "--list" || args[0] == "-list" {
		tw := tabwriter.NewWriter(stdio.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOOL\tKIND\tTITLE")
		for _, t := range reg.All() {
			s := t.Spec()
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Kind, s.Title)
		}
		tw.Flush()
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	name := args[0]
	t := reg.Get(name)
	if t == nil {
		fmt.Fprintf(stdio.Stderr, "mcp-patch: unknown tool %q (mcp-patch tool --list)\n", name)
		return ExitUsage
	}
	fs := subFlags("tool "+name, g, stdio)
	jsonArg := fs.String("json", "", "the tool's input as JSON, or - to read it from stdin")
	format := fs.String("o", "json", "output format: json or table")
	in := t.NewInput()
	fields := bindFields(fs, in)
	fs.Usage = func() {
		s := t.Spec()
		fmt.Fprintf(stdio.Stderr, "mcp-patch tool %s — %s (%s)\n\n%s\n\nFlags:\n", s.Name, s.Title, s.Kind, s.Description)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	g.record(fs)
	if fs.NArg() > 0 {
		fmt.Fprintf(stdio.Stderr, "mcp-patch: tool %s: unexpected arguments %q\n", name, fs.Args())
		return ExitUsage
	}
	if *format != "json" && *format != "table" {
		fmt.Fprintf(stdio.Stderr, "mcp-patch: -o %q: want json or table\n", *format)
		return ExitUsage
	}
	raw, err := assembleInput(*jsonArg, stdio.Stdin, fs, fields)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcp-patch: tool %s: %v\n", name, err)
		return ExitUsage
	}
	d, cleanup, code := g.depsFor(ctx, stdio)
	if code != ExitOK {
		return code
	}
	defer cleanup()
	progress := func(done, total float64, msg string) {
		if total > 0 {
			fmt.Fprintf(stdio.Stderr, "[%s %.0f/%.0f] %s\n", name, done, total, msg)
		} else {
			fmt.Fprintf(stdio.Stderr, "[%s] %s\n", name, msg)
		}
	}
	out, res := t.CallJSON(ctx, d, raw, progress)
	if *format == "table" {
		err = writeTable(stdio.Stdout, out)
	} else {
		err = writeJSON(stdio.Stdout, out)
	}
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch:", err)
		return ExitNotOK
	}
	switch res.Status {
	case tools.StatusOK:
		return ExitOK
	case tools.StatusInProgress:
		return ExitInProgress
	}
	return ExitNotOK
}

// field is one top-level input field exposed as a flag.
type field struct {
	name string // json name
	kind reflect.Kind
	val  flag.Value
}

type sliceFlag struct{ v *[]string }

func (s sliceFlag) String() string {
	if s.v == nil {
		return ""
	}
	return strings.Join(*s.v, ",")
}
func (s sliceFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s.v = append(*s.v, p)
		}
	}
	return nil
}

// bindFields turns the input struct's scalar fields into flags named after
// their JSON names with dashes (dry_run → --dry-run).
func bindFields(fs *flag.FlagSet, in any) []field {
	v := reflect.ValueOf(in).Elem()
	var out []field
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(v.Field(i))
				continue
			}
			if !f.IsExported() {
				continue
			}
			jname := strings.Split(f.Tag.Get("json"), ",")[0]
			if jname == "" || jname == "-" {
				continue
			}
			flagName := strings.ReplaceAll(jname, "_", "-")
			if fs.Lookup(flagName) != nil {
				continue
			}
			help := f.Tag.Get("jsonschema")
			fv := v.Field(i)
			switch fv.Kind() {
			case reflect.String:
				fs.StringVar(fv.Addr().Interface().(*string), flagName, "", help)
			case reflect.Bool:
				fs.BoolVar(fv.Addr().Interface().(*bool), flagName, false, help)
			case reflect.Int:
				fs.IntVar(fv.Addr().Interface().(*int), flagName, 0, help)
			case reflect.Float64:
				fs.Float64Var(fv.Addr().Interface().(*float64), flagName, 0, help)
			case reflect.Slice:
				if fv.Type().Elem().Kind() != reflect.String {
					continue
				}
				fs.Var(sliceFlag{fv.Addr().Interface().(*[]string)}, flagName, help+" (comma-separated or repeated)")
			default:
				continue
			}
			out = append(out, field{name: jname, kind: fv.Kind(), val: fs.Lookup(flagName).Value})
		}
	}
	walk(v)
	return out
}

// assembleInput merges --json (or stdin) with the flags a person set; flags win.
func assembleInput(jsonArg string, stdin io.Reader, fs *flag.FlagSet, fields []field) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if jsonArg != "" {
		var b []byte
		if jsonArg == "-" {
			var err error
			if b, err = io.ReadAll(io.LimitReader(stdin, 1<<20)); err != nil {
				return nil, fmt.Errorf("read input from stdin: %w", err)
			}
		} else {
			b = []byte(jsonArg)
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, fmt.Errorf("--json is not a JSON object: %w", err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, f := range fields {
		if !set[strings.ReplaceAll(f.name, "_", "-")] {
			continue
		}
		var v any
		switch f.kind {
		case reflect.Bool:
			v, _ = strconv.ParseBool(f.val.String())
		case reflect.Int:
			v, _ = strconv.Atoi(f.val.String())
		case reflect.Float64:
			v, _ = strconv.ParseFloat(f.val.String(), 64)
		case reflect.Slice:
			v = strings.Split(f.val.String(), ",")
		default:
			v = f.val.String()
		}
		b, _ := json.Marshal(v)
		obj[f.name] = b
	}
	return json.Marshal(obj)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTable prints a readable view: scalars as "key: value" lines, lists of
// objects as aligned tables, nested objects indented.
func writeTable(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	printObject(tw, m, "")
	return tw.Flush()
}

func printObject(tw *tabwriter.Writer, m map[string]any, indent string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// status, reasons and next_action first: they are what a person reads first.
	rank := map[string]int{"status": 0, "reasons": 1, "next_action": 2}
	sort.SliceStable(keys, func(i, j int) bool {
		ri, iok := rank[keys[i]]
		rj, jok := rank[keys[j]]
		switch {
		case iok && jok:
			return ri < rj
		case iok:
			return true
		case jok:
			return false
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		switch x := m[k].(type) {
		case map[string]any:
			fmt.Fprintf(tw, "%s%s:\n", indent, k)
			printObject(tw, x, indent+"  ")
		case []any:
			if len(x) == 0 {
				fmt.Fprintf(tw, "%s%s:\t-\n", indent, k)
				continue
			}
			if objs, cols := objectRows(x); objs != nil {
				fmt.Fprintf(tw, "%s%s:\n", indent, k)
				fmt.Fprintf(tw, "%s  %s\n", indent, strings.ToUpper(strings.Join(cols, "\t")))
				for _, o := range objs {
					cells := make([]string, len(cols))
					for i, c := range cols {
						cells[i] = cell(scalar(o[c]))
					}
					fmt.Fprintf(tw, "%s  %s\n", indent, strings.Join(cells, "\t"))
				}
				continue
			}
			fmt.Fprintf(tw, "%s%s:\n", indent, k)
			for _, e := range x {
				fmt.Fprintf(tw, "%s  - %s\n", indent, scalar(e))
			}
		default:
			fmt.Fprintf(tw, "%s%s:\t%s\n", indent, k, scalar(x))
		}
	}
}

func objectRows(xs []any) ([]map[string]any, []string) {
	var rows []map[string]any
	colset := map[string]bool{}
	var cols []string
	for _, x := range xs {
		o, ok := x.(map[string]any)
		if !ok {
			return nil, nil
		}
		for k, v := range o {
			switch v.(type) {
			case map[string]any, []any:
				continue
			}
			if !colset[k] {
				colset[k] = true
				cols = append(cols, k)
			}
		}
		rows = append(rows, o)
	}
	sort.Strings(cols)
	return rows, cols
}

// cell keeps a table cell on one line and readable.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 60 {
		return string(r[:59]) + "…"
	}
	return s
}

func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case []any, map[string]any:
		b, _ := json.Marshal(x)
		return string(b)
	}
	return fmt.Sprint(v)
}
