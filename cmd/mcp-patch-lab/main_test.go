package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/cli"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Exit codes, as the CLI says them.
const (
	ExitOK    = cli.ExitOK
	ExitNotOK = cli.ExitNotOK
	ExitUsage = cli.ExitUsage
)

func TestMain(m *testing.M) {
	// The lab tests start fleets in this process: their hosts' commands
	// link to this test binary, which plays them as mcp-patch-lab does.
	if code, ran := fleet.HostCommandMain(os.Args); ran {
		os.Exit(code)
	}
	flag.Parse()
	os.Exit(m.Run())
}

// run is this binary's program in the test's process, with env as its
// whole environment.
func run(t *testing.T, stdin string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string { return env[k] }
	code := cli.RunWith(context.Background(), args, cli.IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: getenv}, labCommand)
	return code, out.String(), errb.String()
}

// TestLabHelp: every lab command answers --help with exit 0 on stdout; the
// texts match the golden files (go test ./cmd/mcp-patch-lab -run TestLabHelp
// -update), and `mcp-patch lab --help` is the production CLI's golden
// (it runs this binary).
func TestLabHelp(t *testing.T) {
	env := map[string]string{"MCP_PATCH_LAB_DIR": "/var/lib/mcp-patch-lab"}
	root := labCommand(cli.Env{Stdio: cli.IO{Getenv: func(k string) string { return env[k] }}})
	paths := [][]string{{"lab"}}
	for _, c := range root.Commands() {
		paths = append(paths, []string{"lab", c.Name()})
	}
	if len(paths) < 6 {
		t.Fatalf("lab has %d commands: %v", len(paths), paths)
	}
	for _, path := range paths {
		name := "mcp-patch_" + strings.Join(path, "_") + ".txt"
		t.Run(strings.Join(path, " "), func(t *testing.T) {
			code, out, errOut := run(t, "", env, append(path, "--help")...)
			if code != ExitOK || errOut != "" {
				t.Fatalf("exit %d, stderr: %s", code, errOut)
			}
			golden := filepath.Join("testdata", "help", name)
			if len(path) == 1 {
				golden = filepath.Join("..", "..", "cli", "testdata", "help", name)
			}
			if *update && len(path) > 1 {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/mcp-patch-lab -run TestLabHelp -update)", err)
			}
			if diff := cmp.Diff(string(want), out); diff != "" {
				t.Errorf("help changed (-golden +got); rerun with -update if deliberate:\n%s", diff)
			}
		})
	}
}
