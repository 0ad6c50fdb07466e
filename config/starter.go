package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/invopop/jsonschema"
	"sigs.k8s.io/yaml"
)

// Starter writes c as a commented YAML config file for a person to edit:
// every field of the schema in the struct's order, with its description
// (units and defaults included) as a comment. Fields set in set (dotted
// paths such as "intent_repo" or "ssh.inventory") are written as values;
// every other field is written commented out at its value in c, so the file
// loads as c's values for set and the defaults for the rest.
func Starter(c Config, set map[string]bool) ([]byte, error) {
	r := &jsonschema.Reflector{DoNotReference: true, AllowAdditionalProperties: false, RequiredFromJSONSchemaTags: true}
	s := r.Reflect(&Config{})
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var values map[string]any
	if err := json.Unmarshal(raw, &values); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# mcp-patch configuration (mcp-patch config schema prints its JSON Schema;\n")
	b.WriteString("# mcp-patch config show the effective values). Lines starting with \"# \" and a\n")
	b.WriteString("# field name show the default: uncomment and edit to change it.\n")
	if err := writeStarter(&b, s, values, set, "", 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeStarter(b *bytes.Buffer, s *jsonschema.Schema, values map[string]any, set map[string]bool, prefix string, depth int) error {
	indent := strings.Repeat("  ", depth)
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		name, p := pair.Key, pair.Value
		path := prefix + name
		b.WriteString("\n")
		if d := strings.TrimSpace(p.Description); d != "" {
			for _, line := range wrapWords(d, 76-len(indent)) {
				fmt.Fprintf(b, "%s# %s\n", indent, line)
			}
		}
		if len(p.Enum) > 0 {
			vals := make([]string, len(p.Enum))
			for i, v := range p.Enum {
				vals[i] = fmt.Sprint(v)
			}
			fmt.Fprintf(b, "%s# one of: %s\n", indent, strings.Join(vals, ", "))
		}
		v, has := values[name]
		if p.Type == "object" && p.Properties != nil && p.Properties.Len() > 0 {
			fmt.Fprintf(b, "%s%s:\n", indent, name)
			sub, _ := v.(map[string]any)
			if sub == nil {
				sub = map[string]any{}
			}
			if err := writeStarter(b, p, sub, set, path+".", depth+1); err != nil {
				return err
			}
			continue
		}
		comment := "# "
		if set[path] {
			comment = ""
		}
		if !has {
			fmt.Fprintf(b, "%s%s%s:\n", indent, comment, name)
			continue
		}
		y, err := yaml.Marshal(map[string]any{name: v})
		if err != nil {
			return fmt.Errorf("starter config %s: %w", path, err)
		}
		for _, line := range strings.Split(strings.TrimRight(string(y), "\n"), "\n") {
			fmt.Fprintf(b, "%s%s%s\n", indent, comment, line)
		}
	}
	return nil
}

func wrapWords(text string, width int) []string {
	var lines []string
	var cur string
	for _, w := range strings.Fields(text) {
		if cur != "" && len(cur)+1+len(w) > width {
			lines = append(lines, cur)
			cur = w
			continue
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}
