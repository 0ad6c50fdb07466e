package steps

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/scripts"
)

func scriptNames(t testing.TB) []string {
	t.Helper()
	names, err := fs.Glob(scripts.Host, "host/*.sh")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded scripts: %v", err)
	}
	return names
}

// TestShellcheck runs the real shellcheck on every host script and fails
// on any finding, info level included.
func TestShellcheck(t *testing.T) {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Fatal("shellcheck is needed")
	}
	for _, name := range scriptNames(t) {
		t.Run(name, func(t *testing.T) {
			src, _ := scripts.Host.ReadFile(name)
			cmd := exec.Command("shellcheck", "-s", "sh", "-S", "style", "-")
			cmd.Stdin = strings.NewReader(string(src))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("shellcheck %s: %v\n%s", name, err, out)
			}
		})
	}
}

// block returns a shared helper block of a script (its copy of
// scripts/host/lib/NAME.sh; scripts/internal/hostgen keeps the copies
// current), so tests run the very code the node runs.
func block(src, name string) (string, bool) {
	b := strings.Index(src, "# ---- "+name+": begin")
	e := strings.Index(src, "# ---- "+name+": end")
	if b < 0 || e < b {
		return "", false
	}
	return src[b:e], true
}

// TestScriptHeaders: every script reads as a runbook and is strict.
func TestScriptHeaders(t *testing.T) {
	for _, name := range scriptNames(t) {
		src, _ := scripts.Host.ReadFile(name)
		s := string(src)
		if !strings.HasPrefix(s, "#!/bin/sh\n# "+strings.TrimPrefix(name, "host/")+" — ") {
			t.Errorf("%s: header must start with '#!/bin/sh' and '# <name> — <summary>'", name)
		}
		for _, must := range []string{"\nset -eu\n", "Output:", "Exit status:", "\nSTEP=" + strings.TrimSuffix(strings.TrimPrefix(name, "host/"), ".sh") + "\n"} {
			if !strings.Contains(s, must) {
				t.Errorf("%s lacks %q", name, must)
			}
		}
	}
}

// TestScriptsRefuseBadInputWithOneJSON runs each script with an input it
// must refuse and checks the one JSON object and exit code 2.
func TestScriptsRefuseBadInputWithOneJSON(t *testing.T) {
	r := &LocalRunner{}
	cases := map[string]map[string]string{
		"inspect":        {"TARGET_KERNEL": "5.15; rm -rf /"},
		"install":        {"ACTION": "start", "ROUND": "r1", "EXPECTED_PLAN_DIGEST": "sha256:nothex"},
		"trial_boot":     {"ACTION": "prepare", "ROUND": "r1", "OLD_ENTRY": "a'b", "NEW_ENTRY": "c"},
		"promote":        {"ROUND": "../etc"},
		"verify":         {"TARGET_KERNEL": "6.8.0-45-generic", "EXPECTED_SYSCTLS": "kernel.panic=10,=x"},
		"gpu_check":      {"EXPECTED_GPUS": "eight"},
		"kernel":         {"BOOT_ID_FILE": "relative/path"},
		"autoremove":     {"ACTION": "purge-everything"},
		"snapshot":       {"ROUND": "r1", "ROLE": "master"},
		"fallback_drill": {"ACTION": "arm", "ROUND": "r1", "DRILL_KERNEL": "6.8; reboot"},
		"rollback":       {"ACTION": "prepare", "ROUND": "r1", "OLD_ENTRY": "x", "OLD_KERNEL": "6.8; reboot"},
		"simulate":       nil,
		"preflight":      {"GRUB_CFG": "relative/grub.cfg"},
		"download":       nil,
	}
	for _, name := range scriptNames(t) {
		step := strings.TrimSuffix(strings.TrimPrefix(name, "host/"), ".sh")
		env, ok := cases[step]
		if !ok {
			t.Errorf("no bad-input case for %s", step)
			continue
		}
		if env == nil {
			continue // no input to get wrong
		}
		t.Run(step, func(t *testing.T) {
			src, _ := scripts.Host.ReadFile(name)
			out, err := r.RunScript(ctxT(t), testNode, src, env)
			if err != nil {
				t.Fatal(err)
			}
			var res map[string]json.RawMessage
			if err := decodeOne(out.Stdout, &res); err != nil {
				t.Fatalf("%v\nstdout: %s", err, out.Stdout)
			}
			var status string
			_ = json.Unmarshal(res["status"], &status)
			if status != StatusBadInput || out.ExitCode != 2 {
				t.Errorf("status %q exit %d; stdout %s", status, out.ExitCode, out.Stdout)
			}
		})
	}
}

// TestUnexpectedFailureStillOneJSON: a command failing under set -e still
// leaves one JSON object saying where it stopped.
func TestUnexpectedFailureStillOneJSON(t *testing.T) {
	s := newSteps(t, Paths{BootIDFile: "/nonexistent/boot_id"}, "")
	_, err := s.Kernel(ctxT(t), testNode)
	var se *StepError
	if !errors.As(err, &se) || se.Status != StatusError || !strings.Contains(se.Reason, "stopped unexpectedly while reading /nonexistent/boot_id") {
		t.Fatalf("got %v", err)
	}
}

// TestREADMEListsEveryCommand: scripts/host/README.md lists the external
// commands each script calls (the set a lab host must provide). Every
// listed command must occur in the script, and every command of the whole
// vocabulary found in command position in a script must be on its line.
func TestREADMEListsEveryCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "scripts", "host", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lists := map[string]map[string]bool{}
	vocab := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^- `([a-z_]+\\.sh)`: (.+)$").FindAllStringSubmatch(string(readme), -1) {
		set := map[string]bool{}
		for _, c := range strings.Fields(m[2]) {
			set[c], vocab[c] = true, true
		}
		lists[m[1]] = set
	}
	for _, name := range scriptNames(t) {
		base := strings.TrimPrefix(name, "host/")
		listed, ok := lists[base]
		if !ok {
			t.Errorf("README lists no commands for %s", base)
			continue
		}
		src, _ := scripts.Host.ReadFile(name)
		var code strings.Builder
		for _, l := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				code.WriteString(l + "\n")
			}
		}
		for c := range listed {
			if !regexp.MustCompile(`(^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(c) + `([^A-Za-z0-9_-]|$)`).MatchString(code.String()) {
				t.Errorf("%s: README lists %s but the script does not call it", base, c)
			}
		}
		for c := range vocab {
			pos := regexp.MustCompile(`(?m)(^|[;&|(]|\$\(|\bthen|\bdo|\belse|\bif|!|command -v)[ \t]*` + regexp.QuoteMeta(c) + `([ \t;)]|$)`)
			if pos.MatchString(code.String()) && !listed[c] {
				t.Errorf("%s calls %s, which README does not list for it", base, c)
			}
		}
	}
}

// TestTruncatedScriptRunsNothing: a script cut short on its way to `sh -s`
// (a dropped connection) must not run its first half.
func TestTruncatedScriptRunsNothing(t *testing.T) {
	r := newGrubRoot(t, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg")
	src, _ := scripts.Host.ReadFile("host/trial_boot.sh")
	env, _ := merge(r.paths(), Paths{SystemdDir: "/nonexistent"}).env()
	for k, v := range map[string]string{"ACTION": "prepare", "ROUND": "r1", "OLD_ENTRY": r.oldEntry, "NEW_ENTRY": r.newEntry} {
		env[k] = v
	}
	stubs := stubDir(t, map[string]string{"update-grub": updateGrubStub})
	for _, cut := range []int{len(src) / 3, len(src) * 9 / 10, len(src) - 3} {
		out, err := (&LocalRunner{Path: stubs + ":" + DefaultPath}).RunScript(ctxT(t), testNode, src[:cut], env)
		if err != nil {
			t.Fatal(err)
		}
		if out.ExitCode == 0 || len(out.Stdout) != 0 {
			t.Errorf("cut at %d: exit %d stdout %q", cut, out.ExitCode, out.Stdout)
		}
		if _, err := os.Stat(r.dropin); !os.IsNotExist(err) {
			t.Fatalf("cut at %d: the drop-in was written", cut)
		}
		if _, err := os.Stat(filepath.Join(r.stateDir, "r1")); !os.IsNotExist(err) {
			t.Fatalf("cut at %d: state recorded", cut)
		}
	}
}
