package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcp-patch/mcp-patch/internal/table"
	"github.com/mcp-patch/mcp-patch/tools"
)

// toolCommand is `mcp-patch tool`: one subcommand per tool of the registry,
// the CLI twin of the MCP tool with the same input and output. Its flags come
// from the tool's input schema.
func (a *app) toolCommand() *cobra.Command {
	reg := tools.Builtin()
	var list bool
	c := &cobra.Command{
		Use:   "tool NAME [flags]",
		Short: "Run one tool as a CLI command (flags from its input schema, or --json); --list lists them",
		Long: `Run one MCP tool as a CLI command: the same input (per-field flags or --json)
and the same output (JSON, or -o table). "mcp-patch tool NAME --help" shows a
tool's flags. Exit codes: 0 ok, 1 refused / failed / approval_required,
2 usage error, 3 in progress (call again).`,
		Example: `  mcp-patch tool --list
  mcp-patch tool read_intent --component os-layer -o table
  mcp-patch tool record_lesson --json '{"component":"os-layer","kind":"lesson","text":"…"}'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noArgs(cmd, args); err != nil {
				return err
			}
			if err := listTools(a.stdio.Stdout, reg); err != nil {
				return err
			}
			if !list {
				return usagef("tool needs a tool name (the list is above)")
			}
			return nil
		},
	}
	c.Flags().BoolVar(&list, "list", false, "list the tools with their kind and title")
	for _, t := range reg.All() {
		c.AddCommand(a.oneToolCommand(t))
	}
	return c
}

func listTools(w io.Writer, reg *tools.Registry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tKIND\tTITLE")
	for _, t := range reg.All() {
		s := t.Spec()
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Kind, s.Title)
	}
	return tw.Flush()
}

// globalFlagNames are taken by the root; a tool field of the same name is
// set through --json only.
var globalFlagNames = map[string]bool{"config": true, "intent-repo": true, "kubeconfig": true, "context": true,
	"state-dir": true, "allowed-signers": true, "log-level": true, "read-only": true, "disable-destructive": true,
	"json": true, "output": true, "help": true}

func (a *app) oneToolCommand(t tools.Tool) *cobra.Command {
	s := t.Spec()
	var jsonArg, format string
	var fields []schemaField
	c := &cobra.Command{
		Use:     s.Name + " [flags]",
		Aliases: aliasFor(s.Name),
		Short:   fmt.Sprintf("%s (%s)", s.Title, s.Kind),
		Long:    fmt.Sprintf("%s (%s)\n\n%s", s.Title, s.Kind, wrap(s.Description, 80)),
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "json" && format != "table" {
				return usagef("-o %q: want json or table", format)
			}
			raw, err := assembleInput(jsonArg, a.stdio.Stdin, cmd.Flags(), fields)
			if err != nil {
				return usagef("tool %s: %v", s.Name, err)
			}
			return exit(a.callTool(cmd.Context(), t, raw, format))
		},
	}
	fl := c.Flags()
	fl.SortFlags = false
	fields = bindSchemaFlags(fl, t.InputSchema())
	fl.StringVar(&jsonArg, "json", "", "the tool's whole input as a JSON object, or - to read it from stdin (flags win over it)")
	fl.StringVarP(&format, "output", "o", "json", "output format: json or table")
	return c
}

// aliasFor lets a tool be named with dashes too (read-intent).
func aliasFor(name string) []string {
	if d := strings.ReplaceAll(name, "_", "-"); d != name {
		return []string{d}
	}
	return nil
}

// callTool runs the tool on its JSON input and prints its output; it
// returns the exit code for the tool's status.
func (a *app) callTool(ctx context.Context, t tools.Tool, raw json.RawMessage, format string) int {
	stdio := a.stdio
	name := t.Spec().Name
	// One command a person runs: stderr carries only what needs their
	// attention (warnings and errors) unless --log-level asks for more.
	if !a.g.set("log-level") {
		a.g.logLevel = "warn"
	}
	d, cleanup, code := a.g.depsFor(ctx, stdio)
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
	var err error
	if format == "table" {
		err = writeTable(stdio.Stdout, out)
	} else {
		err = writeResult(stdio.Stdout, out)
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

// schemaField is one top-level input property exposed as a flag.
type schemaField struct {
	name string // the property's JSON name
	flag string // its flag name (dry_run → dry-run)
	typ  string // JSON Schema type: string, boolean, integer, number, array (of strings)
}

// bindSchemaFlags turns the input schema's scalar properties (and arrays of
// strings) into flags named after them with dashes, each with the schema's
// description, allowed values and default. Objects are set through --json.
func bindSchemaFlags(fs *pflag.FlagSet, sch *jsonschema.Schema) []schemaField {
	if sch == nil {
		return nil
	}
	required := map[string]bool{}
	for _, r := range sch.Required {
		required[r] = true
	}
	names := make([]string, 0, len(sch.Properties))
	for n := range sch.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []schemaField
	for _, name := range names {
		p := sch.Properties[name]
		flagName := strings.ReplaceAll(name, "_", "-")
		if globalFlagNames[flagName] || fs.Lookup(flagName) != nil {
			continue
		}
		typ := schemaType(p)
		help := flagHelp(name, p, required[name])
		switch typ {
		case "string":
			fs.String(flagName, "", help)
		case "boolean":
			fs.Bool(flagName, false, help)
		case "integer":
			fs.Int64(flagName, 0, help)
		case "number":
			fs.Float64(flagName, 0, help)
		case "array":
			if p.Items == nil || schemaType(p.Items) != "string" {
				continue
			}
			fs.StringSlice(flagName, nil, help+" (comma-separated or repeated)")
		default:
			continue
		}
		out = append(out, schemaField{name: name, flag: flagName, typ: typ})
	}
	return out
}

// schemaType is the property's type, ignoring "null" in a list of types.
func schemaType(p *jsonschema.Schema) string {
	if p.Type != "" {
		return p.Type
	}
	for _, t := range p.Types {
		if t != "null" {
			return t
		}
	}
	return ""
}

// argHelp says what an argument is where its input schema does not: the
// ones many tools take, which tools/list leaves undescribed rather than
// repeat in every tool (the server's instructions explain them).
var argHelp = map[string]string{
	"approval":  "the approval a person signed; omit it to get the request",
	"node":      "the Kubernetes node name",
	"component": "an intent component",
}

// flagHelp is a property's description (or argHelp's) with its allowed
// values, default and whether it is required.
func flagHelp(name string, p *jsonschema.Schema, required bool) string {
	help := p.Description
	if help == "" {
		help = argHelp[name]
	}
	if len(p.Enum) > 0 {
		vals := make([]string, len(p.Enum))
		for i, v := range p.Enum {
			vals[i] = fmt.Sprint(v)
		}
		help += " (one of: " + strings.Join(vals, ", ") + ")"
	}
	if len(p.Default) > 0 {
		help += " (default " + string(p.Default) + ")"
	}
	if required {
		help += " (required)"
	}
	return strings.TrimSpace(help)
}

// assembleInput merges --json (or stdin) with the flags a person set; flags win.
func assembleInput(jsonArg string, stdin io.Reader, fs *pflag.FlagSet, fields []schemaField) (json.RawMessage, error) {
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
	for _, f := range fields {
		if !fs.Changed(f.flag) {
			continue
		}
		var v any
		var err error
		switch f.typ {
		case "boolean":
			v, err = fs.GetBool(f.flag)
		case "integer":
			v, err = fs.GetInt64(f.flag)
		case "number":
			v, err = fs.GetFloat64(f.flag)
		case "array":
			v, err = fs.GetStringSlice(f.flag)
		default:
			v, err = fs.GetString(f.flag)
		}
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", f.flag, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", f.flag, err)
		}
		obj[f.name] = b
	}
	return json.Marshal(obj)
}

// wrap breaks text into lines of at most width characters at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	for i, para := range strings.Split(text, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		n := 0
		for j, w := range strings.Fields(para) {
			if j > 0 && n+1+len(w) > width {
				b.WriteByte('\n')
				n = 0
			} else if j > 0 {
				b.WriteByte(' ')
				n++
			}
			b.WriteString(w)
			n += len(w)
		}
	}
	return b.String()
}

// writeResult prints a tool's output as indented JSON, the contract first
// (as the MCP result has it).
func writeResult(w io.Writer, out any) error {
	b, err := tools.EncodeResult(out)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTable prints a readable view (package table, which the quick
// preview of scripts/demo.sh prints with too).
func writeTable(w io.Writer, v any) error { return table.Write(w, v) }
