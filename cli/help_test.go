package cli

import (
	"encoding/json"

	"github.com/google/jsonschema-go/jsonschema"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcp-patch/mcp-patch/tools"
)

// helpEnv fixes what help texts would otherwise take from the machine.
var helpEnv = map[string]string{"MCP_PATCH_LAB_DIR": "/var/lib/mcp-patch-lab"}

// commandPaths lists every command of the CLI (the root included) as its
// arguments after "mcp-patch".
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	a := &app{stdio: IO{Getenv: func(k string) string { return helpEnv[k] }}, g: &globals{logLevel: "info"}}
	root := a.rootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden {
			return
		}
		out = append(out, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(root, nil)
	if len(out) < 30 {
		t.Fatalf("only %d commands found", len(out))
	}
	return out
}

// Every command answers --help with exit 0 on stdout, naming each of its
// flags; the texts match the golden files (go test ./cli -run TestHelp -update).
func TestHelpEverywhere(t *testing.T) {
	for _, path := range commandPaths(t) {
		name := strings.Join(append([]string{"mcp-patch"}, path...), " ")
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", helpEnv, append(append([]string{}, path...), "--help")...)
			if code != ExitOK {
				t.Fatalf("exit %d, want 0\nstderr: %s", code, errOut)
			}
			if errOut != "" {
				t.Errorf("help wrote to stderr: %s", errOut)
			}
			if !strings.Contains(out, "Usage:") || !strings.Contains(out, "--help") {
				t.Errorf("help lacks its usage:\n%s", out)
			}
			golden := filepath.Join("testdata", "help", strings.Join(append([]string{"mcp-patch"}, path...), "_")+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cli -run TestHelpEverywhere -update)", err)
			}
			if diff := cmp.Diff(string(want), out); diff != "" {
				t.Errorf("help changed (-golden +got); rerun with -update if deliberate:\n%s", diff)
			}
		})
	}
	// No golden file is left over from a command that went away.
	files, _ := filepath.Glob(filepath.Join("testdata", "help", "*.txt"))
	known := map[string]bool{}
	for _, path := range commandPaths(t) {
		known[strings.Join(append([]string{"mcp-patch"}, path...), "_")+".txt"] = true
	}
	for _, f := range files {
		if !known[filepath.Base(f)] {
			t.Errorf("%s is the help of no command; remove it", f)
		}
	}
}

// `tool NAME --help` shows a flag for each scalar input property with the
// schema's description, and says which are required.
func TestToolHelpFromSchema(t *testing.T) {
	for _, tl := range tools.Builtin().All() {
		s := tl.Spec()
		t.Run(s.Name, func(t *testing.T) {
			code, out, errOut := run(t, "", helpEnv, "tool", s.Name, "--help")
			if code != ExitOK {
				t.Fatalf("exit %d\n%s", code, errOut)
			}
			if !strings.Contains(out, s.Title) {
				t.Errorf("help lacks the title %q", s.Title)
			}
			sch := tl.InputSchema()
			required := map[string]bool{}
			for _, r := range sch.Required {
				required[r] = true
			}
			for name, p := range sch.Properties {
				flag := "--" + strings.ReplaceAll(name, "_", "-")
				line := lineWith(out, flag+" ")
				switch schemaType(p) {
				case "string", "boolean", "integer", "number":
				default:
					continue
				}
				if line == "" {
					t.Errorf("no %s flag for property %s:\n%s", flag, name, out)
					continue
				}
				// The schema's description, or argHelp's for an argument
				// tools/list leaves undescribed; an enum says enough alone.
				want := p.Description
				if want == "" {
					want = argHelp[name]
				}
				if want == "" && len(p.Enum) == 0 {
					t.Errorf("%s: no help: the schema has no description and argHelp none", flag)
				}
				if want != "" && !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
					t.Errorf("%s: help lacks %q", flag, want)
				}
				if required[name] && !strings.Contains(line, "(required)") {
					t.Errorf("%s: not marked required: %q", flag, line)
				}
			}
		})
	}
}

func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// The help of a flag names the enum's values and the default.
func TestFlagHelpNamesAllowedValues(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	sch := enumSchema()
	fields := bindSchemaFlags(fs, sch)
	if len(fields) != 3 {
		t.Fatalf("fields %+v, want kind, count and tags (the object is --json only)", fields)
	}
	for flag, want := range map[string]string{
		"kind":  "what it is (one of: lesson, question) (default \"lesson\") (required)",
		"count": "how many",
		"tags":  "labels (comma-separated or repeated)",
	} {
		if got := fs.Lookup(flag).Usage; got != want {
			t.Errorf("--%s usage %q, want %q", flag, got, want)
		}
	}
	if err := fs.Parse([]string{"--kind", "question", "--count", "3", "--tags", "a,b", "--tags", "c"}); err != nil {
		t.Fatal(err)
	}
	raw, err := assembleInput(`{"count":1,"extra":{"x":1}}`, nil, fs, fields)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"count":3,"extra":{"x":1},"kind":"question","tags":["a","b","c"]}`, string(raw)); diff != "" {
		t.Errorf("input (-want +got):\n%s", diff)
	}
}

// Unknown and misplaced flags, missing and extra arguments, unknown
// commands: exit 2, the reason and the command's usage on stderr, nothing on
// stdout.
func TestUsageErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"lab down with a lab up flag":  {[]string{"lab", "down", "--control-planes", "9"}, "unknown flag: --control-planes"},
		"serve with a tool flag":       {[]string{"serve", "--node", "cp-1"}, "unknown flag: --node"},
		"tool flag of another tool":    {[]string{"tool", "read_intent", "--node", "cp-1"}, "unknown flag: --node"},
		"approve without a file":       {[]string{"approve"}, "approve takes one request file"},
		"lab fault without a name":     {[]string{"lab", "fault", "--node", "cp-1"}, "takes one fault name"},
		"unknown command":              {[]string{"srve"}, `unknown command "srve"`},
		"unknown lab command":          {[]string{"lab", "nope"}, `unknown command "nope" for "mcp-patch lab"`},
		"extra argument":               {[]string{"version", "now"}, "takes no arguments"},
		"config alone":                 {[]string{"config"}, "needs a command"},
		"bad output format":            {[]string{"tool", "read_intent", "-o", "yaml"}, `-o "yaml"`},
		"flag value of the wrong type": {[]string{"tool", "run_verify", "--timeout-seconds", "soon"}, "invalid argument"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, "", helpEnv, tc.args...)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, ExitUsage, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "Usage:\n  mcp-patch") {
				t.Errorf("stderr lacks %q or the usage:\n%s", tc.want, errOut)
			}
			if out != "" {
				t.Errorf("stdout: %s", out)
			}
		})
	}
}

// The completion scripts generate, and bash accepts the one for bash.
func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash": "__start_mcp-patch",
		"zsh":  "#compdef mcp-patch",
		"fish": "complete -c mcp-patch",
	} {
		t.Run(shell, func(t *testing.T) {
			code, out, errOut := run(t, "", nil, "completion", shell)
			if code != ExitOK || !strings.Contains(out, marker) {
				t.Fatalf("exit %d, marker %q missing\n%s\n%s", code, marker, errOut, out[:min(len(out), 300)])
			}
			if sh, err := exec.LookPath(shell); err == nil {
				cmd := exec.Command(sh, "-n")
				cmd.Stdin = strings.NewReader(out)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s -n rejects the script: %v\n%s", shell, err, b)
				}
			}
		})
	}
	// Completing a tool name goes through the binary's __complete command.
	code, out, _ := run(t, "", nil, "__complete", "tool", "read_")
	if code != ExitOK || !strings.Contains(out, "read_intent") {
		t.Errorf("completing tool read_: exit %d\n%s", code, out)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := run(t, "", nil, args...)
		if code != ExitOK || !strings.HasPrefix(out, "mcp-patch ") || !strings.Contains(out, "go1.") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

func enumSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:     "object",
		Required: []string{"kind"},
		Properties: map[string]*jsonschema.Schema{
			"kind":  {Type: "string", Description: "what it is", Enum: []any{"lesson", "question"}, Default: json.RawMessage(`"lesson"`)},
			"count": {Type: "integer", Description: "how many"},
			"tags":  {Types: []string{"null", "array"}, Description: "labels", Items: &jsonschema.Schema{Type: "string"}},
			"extra": {Type: "object", Description: "set through --json"},
		},
	}
}
