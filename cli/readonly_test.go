package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/tools"
)

const roRound = "2026-11"

// plannedRepo is the example intent repository with round 2026-11 planned
// (its journal: a plan over two nodes, an inspection in flight) and
// committed, so the working copy is clean.
func plannedRepo(t testing.TB) string {
	t.Helper()
	repo := exampleRepo(t)
	order, err := round.PlanOrder([]round.NodeInfo{{Name: "cp-1", ControlPlane: true}, {Name: "gpu-1", GPU: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := round.Open(filepath.Join(repo, "rounds", roRound))
	if err != nil {
		t.Fatal(err)
	}
	_, perr := j.Plan(order, 48*time.Hour, round.Meta{})
	_, serr := j.StartStep(round.StepInspect, "cp-1", round.Meta{})
	if err := errors.Join(perr, serr, j.Close()); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-qm", "round planned")
	return repo
}

// repoFiles is every file of the repository, .git included, with its
// bytes and mode, and git's status of it (read without refreshing the
// index, so that looking writes nothing either).
func repoFiles(t *testing.T, repo string) string {
	t.Helper()
	b := treeFiles(t, repo)
	cmd := exec.Command("git", "status", "--porcelain", "--untracked-files=all")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git status: %v\n%s", err, out)
	}
	return b + "status:" + string(out)
}

// treeFiles is every entry under dir with its mode and, for a file, its
// bytes ("" for a directory that does not exist).
func treeFiles(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return filepath.SkipAll
		}
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			fmt.Fprintf(&b, "%s %s\n", strings.TrimPrefix(p, dir), info.Mode())
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %s %d %x\n", strings.TrimPrefix(p, dir), info.Mode(), len(data), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// readOnlyCalls is every read-only tool with arguments that reach its
// work: a node where it takes one, os-layer for run_verify.
func readOnlyCalls() map[string]map[string]any {
	calls := map[string]map[string]any{}
	for _, tl := range tools.Builtin().All() {
		if tl.Spec().Kind != tools.ReadOnly {
			continue
		}
		args := map[string]any{}
		if p := tl.InputSchema().Properties; p != nil {
			if _, ok := p["node"]; ok {
				args["node"] = "cp-1"
			}
			if _, ok := p["component"]; ok {
				args["component"] = "os-layer"
			}
		}
		calls[tl.Spec().Name] = args
	}
	return calls
}

// The repro of "a --read-only CLI call leaves journal.jsonl and
// state.json modified": every read-only tool, each as the first call of
// a fresh mcp-patch process (the real binary, `tool NAME`), with and
// without --read-only, against a round's intent repository: the working
// copy's files stay byte-identical and git status clean, and the round's
// journal is never left locked.
func TestReadOnlyCLIFirstCallWritesNothing(t *testing.T) {
	repo := plannedRepo(t)
	before := repoFiles(t, repo)
	calls := readOnlyCalls()
	if len(calls) < 8 {
		t.Fatalf("only %d read-only tools: %v", len(calls), calls)
	}
	for _, mode := range [][]string{{"--read-only"}, nil} {
		// One state directory for every --read-only call, with a file in it:
		// it stays byte-identical (the audit of reads goes to the log).
		state := t.TempDir()
		if err := os.WriteFile(filepath.Join(state, "audit.jsonl"), []byte("{\"tool\":\"earlier\"}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stateBefore := treeFiles(t, state)
		for name, args := range calls {
			b, _ := json.Marshal(args)
			argv := append([]string{"--intent-repo", repo, "--state-dir", state, "--kubeconfig", filepath.Join(t.TempDir(), "none")}, mode...)
			cmd := exec.Command(binary, append(argv, "tool", name, "--json", string(b))...)
			cmd.Env = append(os.Environ(), "KUBECONFIG=", "SSH_AUTH_SOCK=")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("%s %v: %v", name, mode, err)
			}
			if after := repoFiles(t, repo); after != before {
				t.Fatalf("%s %v as a process's first call changed the intent repository:\n%s\noutput: %.600s",
					name, mode, diffLines(before, after), out)
			}
			if after := treeFiles(t, state); mode != nil && after != stateBefore {
				t.Fatalf("%s %v as a process's first call wrote into the state directory:\n%s\noutput: %.600s",
					name, mode, diffLines(stateBefore, after), out)
			}
		}
	}
	j, err := round.Open(filepath.Join(repo, "rounds", roRound))
	if err != nil {
		t.Fatalf("a writer after the read-only calls: %v", err)
	}
	j.Close()
}

// The same sweep over MCP: a fresh `mcp-patch serve` (the real binary,
// stdio) per read-only tool, that tool its first call, with and without
// --read-only: nothing in the intent repository changes.
func TestReadOnlyMCPFirstCallWritesNothing(t *testing.T) {
	repo := plannedRepo(t)
	before := repoFiles(t, repo)
	for _, mode := range [][]string{{"--read-only"}, nil} {
		state := t.TempDir()
		stateBefore := treeFiles(t, state)
		for name, args := range readOnlyCalls() {
			argv := append([]string{"serve", "--intent-repo", repo, "--state-dir", state, "--kubeconfig", filepath.Join(t.TempDir(), "none")}, mode...)
			cmd := exec.Command(binary, argv...)
			cmd.Env = append(os.Environ(), "KUBECONFIG=", "SSH_AUTH_SOCK=")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				cancel()
				t.Fatalf("%s %v: connect: %v", name, mode, err)
			}
			_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
			cs.Close()
			cancel()
			if err != nil {
				t.Fatalf("%s %v: protocol error %v", name, mode, err)
			}
			if after := repoFiles(t, repo); after != before {
				t.Fatalf("%s %v as a server's first call changed the intent repository:\n%s", name, mode, diffLines(before, after))
			}
			if after := treeFiles(t, state); mode != nil && after != stateBefore {
				t.Fatalf("%s %v as a server's first call wrote into the state directory:\n%s", name, mode, diffLines(stateBefore, after))
			}
		}
	}
}

// The repro of "a --read-only server takes the journal's exclusive lock":
// a --read-only server that has read the round (round_status) leaves the
// journal to the read-write server, which opens it and records while the
// read-only one keeps answering from it.
func TestReadOnlyServerLeavesTheJournalToTheWriter(t *testing.T) {
	repo := plannedRepo(t)
	cmd := exec.Command(binary, "serve", "--read-only", "--intent-repo", repo, "--state-dir", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	status := func() string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "round_status", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("round_status on the read-only server: %v %+v", err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		return string(b)
	}
	first := status()
	j, err := round.Open(filepath.Join(repo, "rounds", roRound))
	if err != nil {
		t.Fatalf("the read-write side beside a --read-only server: %v", err)
	}
	defer j.Close()
	if _, err := j.FinishStep(round.StepInspect, "cp-1", round.Meta{}); err != nil {
		t.Fatal(err)
	}
	if second := status(); second == first {
		t.Fatalf("the read-only server did not follow the writer:\nbefore %s\nafter  %s", first, second)
	}
}

func diffLines(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out strings.Builder
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			fmt.Fprintf(&out, "- %.300s\n+ %.300s\n", x, y)
		}
	}
	return out.String()
}
