// Package table prints a tool's structured output as a person reads it:
// scalars as "key: value" lines, lists of objects as aligned tables,
// nested objects indented. It is what `mcp-patch tool NAME -o table`
// prints, and it links nothing but the standard library, so the quick
// host-side preview (lab/cmd/lab-preview) prints with the very same code.
package table

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Write prints a readable view: scalars as "key: value" lines, lists of
// objects as aligned tables, nested objects indented.
func Write(w io.Writer, v any) error {
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
