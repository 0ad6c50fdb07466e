package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/tools"
)

// listTools asks a server holding every built-in tool for tools/list, over
// an in-memory session, as a client does: what the page shows is what a
// client is sent. initialize and tools/list open nothing (no cluster, SSH
// or intent repository).
func listTools(ctx context.Context) ([]*mcp.Tool, error) {
	d := &tools.Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := tools.NewServer(tools.Builtin(), d, "docs")
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		return nil, fmt.Errorf("connect the server: %w", err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "gendocs", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		return nil, fmt.Errorf("connect a client: %w", err)
	}
	defer cs.Close()
	var all []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		all = append(all, t)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all, nil
}

func toolsPage() ([]byte, error) {
	ts, err := listTools(context.Background())
	if err != nil {
		return nil, err
	}
	return renderTools(ts)
}

// renderTools is the tools reference for a tools/list answer. Pure.
func renderTools(ts []*mcp.Tool) ([]byte, error) {
	var b strings.Builder
	b.WriteString(header("Tools", "the tool registry (tools.Builtin), as tools/list sends it"))
	fmt.Fprintf(&b, "mcp-patch offers %d tools over MCP. Each is also a command, `mcp-patch tool NAME`, whose flags are the tool's arguments ([CLI reference](cli.md#mcp-patch-tool)); `--read-only` offers only the read-only ones. ", len(ts))
	b.WriteString("A destructive tool first answers `approval_required` with a request a person signs ([approvals](../approvals.md)).\n\n")
	b.WriteString("| tool | title | kind |\n|---|---|---|\n")
	for _, t := range ts {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s |\n", t.Name, anchor(t.Name), cell(t.Title), kindWords(t.Annotations))
	}
	b.WriteString("\n")
	shared, err := sharedOutput(ts)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		fmt.Fprintf(&b, "## %s\n\n", t.Name)
		fmt.Fprintf(&b, "**%s**: %s.\n\n", t.Title, kindWords(t.Annotations))
		b.WriteString(strings.TrimSpace(t.Description) + "\n\n")
		a, err := json.Marshal(t.Annotations)
		if err != nil {
			return nil, fmt.Errorf("tool %s: annotations: %w", t.Name, err)
		}
		fmt.Fprintf(&b, "Annotations: `%s`\n\n", a)
		rows, err := argumentRows(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
		}
		if len(rows) == 0 {
			b.WriteString("No arguments.\n\n")
		} else {
			b.WriteString("| argument | type | required | description |\n|---|---|---|---|\n")
			for _, r := range rows {
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.name, cell(r.typ), yes(r.required), cell(r.description))
			}
			b.WriteString("\n")
		}
		if out, err := json.Marshal(t.OutputSchema); err != nil {
			return nil, fmt.Errorf("tool %s: output schema: %w", t.Name, err)
		} else if string(out) != shared {
			fmt.Fprintf(&b, "Output schema:\n\n```json\n%s\n```\n\n", indentJSON(out))
		} else {
			b.WriteString("Output: [the shared result](#the-shared-result).\n\n")
		}
	}
	b.WriteString("## The shared result\n\n")
	b.WriteString("Every tool's output schema is this one: the contract every result keeps (`status`, `reasons`, `next_action`, `next_call`, `approval`), the tool's own payload beside it.\n\n")
	fmt.Fprintf(&b, "```json\n%s\n```\n", indentJSON([]byte(shared)))
	return []byte(b.String()), nil
}

// sharedOutput is the output schema most tools declare, as compact JSON.
func sharedOutput(ts []*mcp.Tool) (string, error) {
	count := map[string]int{}
	best := ""
	for _, t := range ts {
		b, err := json.Marshal(t.OutputSchema)
		if err != nil {
			return "", fmt.Errorf("tool %s: output schema: %w", t.Name, err)
		}
		count[string(b)]++
		if count[string(b)] > count[best] {
			best = string(b)
		}
	}
	return best, nil
}

func indentJSON(b []byte) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(b)
	}
	return string(out)
}

// kindWords says what a tool may change, from its annotations as the
// protocol reads them (destructive and open-world unless said otherwise).
func kindWords(a *mcp.ToolAnnotations) string {
	if a == nil {
		return "destructive, open world"
	}
	var w []string
	switch {
	case a.ReadOnlyHint:
		w = append(w, "read-only")
	case a.DestructiveHint != nil && !*a.DestructiveHint:
		w = append(w, "writes, not destructive")
	default:
		w = append(w, "destructive (needs a signed approval)")
	}
	if a.IdempotentHint {
		w = append(w, "idempotent")
	}
	if a.OpenWorldHint == nil || *a.OpenWorldHint {
		w = append(w, "open world")
	}
	return strings.Join(w, ", ")
}

// argument is one row of a tool's argument table.
type argument struct {
	name, typ, description string
	required               bool
}

// schemaNode is the part of a JSON Schema the argument tables show.
type schemaNode struct {
	Type        any                    `json:"type"`
	Description string                 `json:"description"`
	Properties  map[string]*schemaNode `json:"properties"`
	Required    []string               `json:"required"`
	Items       *schemaNode            `json:"items"`
	Enum        []any                  `json:"enum"`
	Pattern     string                 `json:"pattern"`
	Minimum     *float64               `json:"minimum"`
	Maximum     *float64               `json:"maximum"`
	MinLength   *int                   `json:"minLength"`
	MaxLength   *int                   `json:"maxLength"`
	MaxItems    *int                   `json:"maxItems"`
	Default     any                    `json:"default"`
}

// argumentRows flattens an input schema into rows, nested objects as
// dotted names, sorted by name within each object. Pure.
func argumentRows(schema any) ([]argument, error) {
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	var s schemaNode
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	var rows []argument
	var walk func(prefix string, s *schemaNode, required bool)
	walk = func(prefix string, s *schemaNode, parentRequired bool) {
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			p := s.Properties[n]
			req := parentRequired && slices.Contains(s.Required, n)
			rows = append(rows, argument{name: prefix + n, typ: typeWords(p), description: p.Description, required: req})
			if len(p.Properties) > 0 {
				walk(prefix+n+".", p, req)
			}
		}
	}
	walk("", &s, true)
	return rows, nil
}

// typeWords is a schema's type with its constraints, in short.
func typeWords(s *schemaNode) string {
	t := typeName(s.Type)
	if t == "array" && s.Items != nil {
		t = "array of " + typeWords(s.Items)
	}
	var c []string
	if len(s.Enum) > 0 {
		c = append(c, oneOf(s.Enum))
	}
	if s.Minimum != nil && s.Maximum != nil {
		c = append(c, fmt.Sprintf("%g to %g", *s.Minimum, *s.Maximum))
	} else if s.Minimum != nil {
		c = append(c, fmt.Sprintf("at least %g", *s.Minimum))
	} else if s.Maximum != nil {
		c = append(c, fmt.Sprintf("at most %g", *s.Maximum))
	}
	if s.MinLength != nil && *s.MinLength > 0 {
		c = append(c, fmt.Sprintf("at least %d characters", *s.MinLength))
	}
	if s.MaxLength != nil {
		c = append(c, fmt.Sprintf("at most %d characters", *s.MaxLength))
	}
	if s.MaxItems != nil {
		c = append(c, fmt.Sprintf("at most %d items", *s.MaxItems))
	}
	if s.Pattern != "" {
		c = append(c, "matching `"+s.Pattern+"`")
	}
	if s.Default != nil {
		c = append(c, fmt.Sprintf("default `%v`", s.Default))
	}
	if len(c) == 0 {
		return t
	}
	return t + ", " + strings.Join(c, ", ")
}

// oneOf names a schema's enum values as code.
func oneOf(values []any) string {
	vals := make([]string, len(values))
	for i, v := range values {
		vals[i] = fmt.Sprintf("`%v`", v)
	}
	return "one of " + strings.Join(vals, ", ")
}

func typeName(t any) string {
	switch v := t.(type) {
	case string:
		return v
	case []any:
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprint(x)
		}
		return strings.Join(s, " or ")
	case nil:
		return "any"
	}
	return fmt.Sprint(t)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

// cell makes text fit one Markdown table cell: one line, pipes escaped.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
