package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/mcp-patch/mcp-patch/config"
)

func configPage(root string) ([]byte, error) {
	raw, err := config.Schema()
	if err != nil {
		return nil, fmt.Errorf("config schema: %w", err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("read the config schema: %w", err)
	}
	defaults, err := json.Marshal(config.DefaultConfig())
	if err != nil {
		return nil, fmt.Errorf("config defaults: %w", err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("home directory: %w", err)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("host name: %w", err)
	}
	var values map[string]any
	if err := json.Unmarshal(defaults, &values); err != nil {
		return nil, fmt.Errorf("config defaults: %w", err)
	}
	comments, err := goFieldComments(filepath.Join(root, "config"))
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	for path, key := range fieldKeys(reflect.TypeOf(config.Config{}), "") {
		docs[path] = comments[key]
	}
	return renderConfig(&s, values, docs, machine{home: home, host: host}), nil
}

// fieldKeys maps each field's dotted JSON path below t ("serve.http",
// "notify.webhooks[].url") to its Go name, "Type.Field".
func fieldKeys(t reflect.Type, prefix string) map[string]string {
	out := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[prefix+name] = t.Name() + "." + f.Name
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct:
			maps.Copy(out, fieldKeys(ft, prefix+name+"."))
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			maps.Copy(out, fieldKeys(ft.Elem(), prefix+name+"[]."))
		}
	}
	return out
}

// goFieldComments are the doc comments of the struct fields declared in
// the package in dir, by "Type.Field", each on one line.
func goFieldComments(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("read the config's field comments: %w", err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, fld := range st.Fields.List {
				if fld.Doc == nil {
					continue
				}
				for _, id := range fld.Names {
					out[ts.Name.Name+"."+id.Name] = strings.Join(strings.Fields(fld.Doc.Text()), " ")
				}
			}
			return false
		})
	}
	return out, nil
}

// machine is what a default may hold of the machine it was taken on, to
// be written as a reader's own.
type machine struct{ home, host string }

func (m machine) general(v string) string {
	switch {
	case m.host != "" && v == m.host:
		return "this machine's host name"
	case m.home != "" && strings.HasPrefix(v, m.home+"/"):
		return "`~" + strings.TrimPrefix(v, m.home) + "`"
	}
	return "`" + v + "`"
}

// renderConfig is the configuration reference: the top-level fields, then
// a section per object, each field with its type, default and description
// (the schema's, else docs's by dotted path: the Go field's comment). Pure.
func renderConfig(s *jsonschema.Schema, defaults map[string]any, docs map[string]string, m machine) []byte {
	var b strings.Builder
	b.WriteString(header("Configuration", "the config file's JSON Schema (`mcp-patch config schema`) and its defaults (config.DefaultConfig)"))
	b.WriteString("One file (`--config`, YAML or JSON; `mcp-patch init` writes one with every field commented out at its default), then the environment, then flags: ")
	b.WriteString("a flag wins over the environment, which wins over the file. Unknown fields are errors. `mcp-patch config show` prints the effective values. ")
	b.WriteString("Durations are Go duration text (`90s`, `10m`, `48h`). A default shown as `~/...` is under the home directory of the user the server runs as. ")
	b.WriteString("A description is the schema's; where the schema has none, it is the comment of the field in the Go struct (config.Config), which names the field as Go does.\n\n")
	var sections []string
	b.WriteString("## Top level\n\n")
	b.WriteString(fieldTable(s, defaults, docs, "", m, &sections))
	for _, name := range sections {
		p, _ := s.Properties.Get(name)
		fmt.Fprintf(&b, "\n## %s\n\n", name)
		if d := strings.TrimSpace(p.Description); d != "" {
			b.WriteString(d + "\n\n")
		}
		sub, _ := defaults[name].(map[string]any)
		b.WriteString(fieldTable(p, sub, docs, name+".", m, nil))
		// Arrays of objects (notify.webhooks) get their item fields below.
		for pair := p.Properties.Oldest(); pair != nil; pair = pair.Next() {
			if it := pair.Value.Items; it != nil && it.Properties != nil && it.Properties.Len() > 0 {
				fmt.Fprintf(&b, "\nEach entry of `%s%s`:\n\n", name+".", pair.Key)
				b.WriteString(fieldTable(it, nil, docs, name+"."+pair.Key+"[].", m, nil))
			}
		}
	}
	return []byte(b.String())
}

// fieldTable is one object's fields as a table; objects are named in
// sections (when it is not nil) instead of being rows.
func fieldTable(s *jsonschema.Schema, defaults map[string]any, docs map[string]string, prefix string, m machine, sections *[]string) string {
	var b strings.Builder
	b.WriteString("| field | type | default | description |\n|---|---|---|---|\n")
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		name, p := pair.Key, pair.Value
		if sections != nil && p.Type == "object" && p.Properties != nil && p.Properties.Len() > 0 {
			*sections = append(*sections, name)
			fmt.Fprintf(&b, "| `%s` | object | | [below](#%s) |\n", prefix+name, anchor(name))
			continue
		}
		def := ""
		if v, ok := defaults[name]; ok {
			def = defaultWords(v, m)
		}
		desc := p.Description
		if strings.TrimSpace(desc) == "" {
			desc = docs[prefix+name]
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", prefix+name, cell(configType(p)), cell(def), cell(desc))
	}
	return b.String()
}

// configType is a field's type and constraints in short.
func configType(p *jsonschema.Schema) string {
	t := p.Type
	if t == "array" && p.Items != nil {
		t = "list of " + configType(p.Items)
	}
	var c []string
	if len(p.Enum) > 0 {
		c = append(c, oneOf(p.Enum))
	}
	if p.Minimum != "" && p.Maximum != "" {
		c = append(c, fmt.Sprintf("%s to %s", p.Minimum, p.Maximum))
	}
	if p.Pattern != "" && t == "string" {
		c = append(c, "a duration")
	}
	if len(c) == 0 {
		return t
	}
	return t + ", " + strings.Join(c, ", ")
}

// defaultWords is a default value as the page shows it; zero values show
// as nothing.
func defaultWords(v any, m machine) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		if x == "" {
			return ""
		}
		return m.general(x)
	case bool:
		if !x {
			return ""
		}
		return "`true`"
	case float64:
		if x == 0 {
			return ""
		}
		return fmt.Sprintf("`%g`", x)
	case []any:
		if len(x) == 0 {
			return ""
		}
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = defaultWords(e, m)
		}
		return strings.Join(parts, ", ")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return "`" + string(b) + "`"
}
