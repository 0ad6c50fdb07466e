package intent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const fixtures = "../testdata/fixtures"

// offlineEnv points kubectl at a closed port on loopback, so the examples'
// live checks meet a real refusal instead of whatever cluster is around.
func offlineEnv(t *testing.T) map[string]string {
	t.Helper()
	home := t.TempDir()
	kubeconfig := filepath.Join(home, "kubeconfig")
	writeFile(t, kubeconfig, `apiVersion: v1
kind: Config
clusters:
- name: closed
  cluster: {server: "https://127.0.0.1:1"}
contexts:
- name: closed
  context: {cluster: closed, user: nobody}
current-context: closed
users:
- name: nobody
  user: {token: none}
`)
	return map[string]string{"HOME": home, "KUBECONFIG": kubeconfig, "MCP_PATCH_REQUEST_TIMEOUT": "3s"}
}

func TestExampleVerifyScriptsWithoutACluster(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl is needed to exercise the live-check path: %v", err)
	}
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)
	components := []struct {
		name string
		want VerifySummary
	}{
		{"admission-webhook", VerifySummary{Result: "pass", Passed: 3, Skipped: 1}},
		{"control-plane", VerifySummary{Result: "pass", Passed: 5, Skipped: 1}},
		{"gpu-fleet", VerifySummary{Result: "pass", Passed: 4, Skipped: 2}},
		{"os-layer", VerifySummary{Result: "pass", Passed: 7, Skipped: 1}},
		{"postgres", VerifySummary{Result: "pass", Passed: 3, Skipped: 1}},
	}
	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			env := offlineEnv(t)
			res, err := r.RunVerify(t.Context(), c.name, time.Minute, env)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Passed || res.ExitCode != 0 || res.TimedOut || res.Summary == nil {
				t.Fatalf("result %+v\n%s", res, res.Output)
			}
			if diff := cmp.Diff(c.want, *res.Summary); diff != "" {
				t.Errorf("summary (-want +got):\n%s\n%s", diff, res.Output)
			}
			if strings.Contains(res.Output, "FAIL") {
				t.Errorf("output has a failure:\n%s", res.Output)
			}

			env["MCP_PATCH_VERIFY_REQUIRE_LIVE"] = "1"
			res, err = r.RunVerify(t.Context(), c.name, time.Minute, env)
			if err != nil {
				t.Fatal(err)
			}
			if res.Passed || res.ExitCode != 3 || res.Summary == nil || res.Summary.Result != "live_checks_missing" {
				t.Errorf("with live checks required: %+v\n%s", res, res.Output)
			}
		})
	}
}

func TestOSLayerVerifyCatchesBrokenSettings(t *testing.T) {
	dir := newExampleRepo(t)
	p := filepath.Join(dir, "os-layer", "settings.yaml")
	s := readFile(t, p)
	s = strings.Replace(s, "soak_hours: 48", "soak_hours: 12", 1)
	s = strings.Replace(s, "kernel.panic: \"10\"", "kernel.panic: \"0\"", 1)
	s = strings.Replace(s, ", cri-tools]", "]", 1)
	writeFile(t, p, s)
	r := openRepo(t, dir, nil)
	res, err := r.RunVerify(t.Context(), "os-layer", time.Minute, offlineEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed || res.ExitCode != 1 || res.Summary == nil || res.Summary.Failed != 3 {
		t.Fatalf("%+v\n%s", res, res.Output)
	}
	for _, want := range []string{
		"FAIL  P8 kernel.soak_hours is '12', want an integer of at least 48",
		"FAIL  P6 kernel.held_packages lacks: cri-tools",
		"FAIL  P4 kernel.panic_reboot_seconds='10' and node.sysctls kernel.panic='0' must be equal and above 0",
	} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Output)
		}
	}
}

// TestOSLayerVerifyAsANode runs the host checks against a /proc tree made
// of real /proc/net/bonding captures and this machine's real apt-mark.
func TestOSLayerVerifyAsANode(t *testing.T) {
	tests := []struct {
		name    string
		bonding string
		want    []string
	}{
		{"both slaves up", "net/proc-net-bonding_8023ad-lacp_2x10G_telegraf.txt", []string{"ok    P3 bond bond0 has 2 slaves up (at least 2)"}},
		{"one slave down", "net/proc-net-bonding-bond0_8023ad-lacp-fast_one-slave-down_centos.txt", []string{"FAIL  P3 bond bond0 has 1 slaves up, want at least 2"}},
	}
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := t.TempDir()
			for name, value := range map[string]string{"kernel/panic": "10", "net/ipv4/ip_forward": "1",
				"net/bridge/bridge-nf-call-iptables": "1", "vm/max_map_count": "262144", "fs/inotify/max_user_instances": "128"} {
				writeFile(t, filepath.Join(proc, "sys", name), value+"\n")
			}
			capture, err := os.ReadFile(filepath.Join(fixtures, tt.bonding))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(proc, "net", "bonding", "bond0"), string(capture))
			env := offlineEnv(t)
			env["MCP_PATCH_VERIFY_HOST"] = "1"
			env["MCP_PATCH_PROC_ROOT"] = proc
			res, err := r.RunVerify(t.Context(), "os-layer", time.Minute, env)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string{
				"ok    P3 sysctl kernel.panic = 10",
				"FAIL  P3 sysctl fs.inotify.max_user_instances is '128', want '8192'",
			}, tt.want...)
			for _, w := range want {
				if !strings.Contains(res.Output, w) {
					t.Errorf("output lacks %q:\n%s", w, res.Output)
				}
			}
			if res.Passed || res.ExitCode != 1 {
				t.Errorf("a node with a wrong sysctl passed: %+v", res)
			}
		})
	}
}

// probeRepo is the example repo plus a component whose verify.sh is script.
func probeRepo(t *testing.T, script string, mod func(*Options)) (*Repo, string) {
	t.Helper()
	dir := newExampleRepo(t)
	writeFile(t, filepath.Join(dir, "probe", "intent.md"), "# probe\n\n## Why it exists\n\n## Properties it must keep\n\n- `P1` It answers.\n\n## Out of scope\n\n## Open questions\n")
	writeFile(t, filepath.Join(dir, "probe", "verify.sh"), script)
	return openRepo(t, dir, mod), dir
}

func TestRunVerifyExitCodeEnvAndOutput(t *testing.T) {
	t.Setenv("MCP_PATCH_TOKEN", "do-not-leak")
	t.Setenv("MCP_PATCH_VERIFY_FLAVOUR", "from-server")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak-either")
	r, dir := probeRepo(t, `echo "component=$MCP_PATCH_COMPONENT dir=$MCP_PATCH_INTENT_DIR pwd=$(pwd)"
echo "flavour=$MCP_PATCH_VERIFY_FLAVOUR extra=$EXTRA"
echo "token=${MCP_PATCH_TOKEN:-unset} aws=${AWS_SECRET_ACCESS_KEY:-unset}"
echo "to stderr" >&2
exit 7
`, func(o *Options) { o.VerifyPassEnv = []string{"MCP_PATCH_VERIFY_FLAVOUR"} })
	res, err := r.RunVerify(t.Context(), "probe", 10*time.Second, map[string]string{"EXTRA": "given"})
	if err != nil {
		t.Fatal(err)
	}
	want := "component=probe dir=" + dir + " pwd=" + filepath.Join(dir, "probe") + "\nflavour=from-server extra=given\ntoken=unset aws=unset\nto stderr\n"
	if res.Output != want {
		t.Errorf("output:\n%s\nwant:\n%s", res.Output, want)
	}
	if res.ExitCode != 7 || res.Passed || res.TimedOut || res.Truncated || res.Summary != nil {
		t.Errorf("%+v", res)
	}
}

// TestRunVerifyEnvIsAnAllowlist: the script's whole environment is PATH,
// HOME, LANG, the names the configuration passes, the call's own variables
// and the two RunVerify sets — whatever else the server holds.
func TestRunVerifyEnvIsAnAllowlist(t *testing.T) {
	server := map[string]string{"PATH": "/opt/bin:/usr/bin:/bin", "HOME": "/home/ops", "LANG": "en_US.UTF-8",
		"KUBECONFIG": "/etc/ops/kubeconfig", "SSH_AUTH_SOCK": "/tmp/agent.sock", "DATABASE_URL": "postgres://u:p@db/x",
		"GITHUB_PAT": "ghp_x", "MCP_PATCH_CONFIG": "/etc/mcp-patch.yaml", "LC_ALL": "de_DE.UTF-8"}
	lookup := func(k string) (string, bool) { v, ok := server[k]; return v, ok }
	r, dir := probeRepo(t, "env | LC_ALL=C sort\n", func(o *Options) {
		o.LookupEnv = lookup
		o.VerifyPassEnv = []string{"KUBECONFIG", "NOT_SET_ANYWHERE", "MCP_PATCH_COMPONENT"}
	})
	res, err := r.RunVerify(t.Context(), "probe", 10*time.Second, map[string]string{"MCP_PATCH_REQUEST_TIMEOUT": "3s"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Output), "\n") {
		k, v, _ := strings.Cut(line, "=")
		if k == "PWD" || k == "SHLVL" || k == "_" || k == "OLDPWD" { // set by sh itself
			continue
		}
		names = append(names, k)
		got[k] = v
	}
	want := []string{"HOME", "KUBECONFIG", "LANG", "MCP_PATCH_COMPONENT", "MCP_PATCH_INTENT_DIR", "MCP_PATCH_REQUEST_TIMEOUT", "PATH"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("environment names (-want +got):\n%s\n%s", diff, res.Output)
	}
	if got["PATH"] != server["PATH"] || got["LANG"] != server["LANG"] || got["MCP_PATCH_COMPONENT"] != "probe" || got["MCP_PATCH_INTENT_DIR"] != dir {
		t.Errorf("values: %v", got)
	}
	// Without PATH and LANG on the server, the script still gets a usable pair.
	r2, _ := probeRepo(t, "echo \"$PATH $LANG\"\n", func(o *Options) { o.LookupEnv = func(string) (string, bool) { return "", false } })
	res, err = r2.RunVerify(t.Context(), "probe", 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(res.Output) != "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin C.UTF-8" {
		t.Errorf("defaults: %q", res.Output)
	}
}

// TestRunVerifyDisabled: a handle that may not run verify scripts (a
// read-only server) refuses before anything starts.
func TestRunVerifyDisabled(t *testing.T) {
	r, dir := probeRepo(t, "touch \"$MCP_PATCH_INTENT_DIR/ran\"\n", func(o *Options) { o.VerifyDisabled = "the server is read-only" })
	_, err := r.RunVerify(t.Context(), "probe", 10*time.Second, nil)
	if !errors.Is(err, ErrVerifyDisabled) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("RunVerify = %v, want ErrVerifyDisabled", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the script ran")
	}
}

func TestRunVerifyKeepsTheTailOfLongOutput(t *testing.T) {
	r, _ := probeRepo(t, `i=0
while [ $i -lt 5000 ]; do echo "line $i of filler text to fill the buffer"; i=$((i + 1)); done
echo '{"component":"probe","result":"pass","passed":1,"failed":0,"skipped":0}'
`, func(o *Options) { o.MaxVerifyOutputBytes = 4096 })
	res, err := r.RunVerify(t.Context(), "probe", 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Output) != 4096 || res.OutputBytes < 200_000 {
		t.Errorf("truncated=%v len=%d total=%d", res.Truncated, len(res.Output), res.OutputBytes)
	}
	if diff := cmp.Diff(&VerifySummary{Result: "pass", Passed: 1}, res.Summary); diff != "" {
		t.Errorf("summary from the tail (-want +got):\n%s", diff)
	}
	if !res.Passed {
		t.Errorf("%+v", res)
	}
}

func TestRunVerifyTimeoutKillsTheProcessGroup(t *testing.T) {
	r, dir := probeRepo(t, `echo $$ > "$MCP_PATCH_INTENT_DIR/probe/script.pid"
sleep 60 &
echo $! > "$MCP_PATCH_INTENT_DIR/probe/child.pid"
echo started
wait
`, nil)
	start := time.Now()
	res, err := r.RunVerify(t.Context(), "probe", 500*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("took %s to stop a script with a 500ms limit", elapsed)
	}
	if !res.TimedOut || res.Passed || res.ExitCode != -1 || res.Output != "started\n" {
		t.Errorf("%+v", res)
	}
	t.Logf("stopped after %d ms with a 500 ms limit", res.DurationMS)
	for _, f := range []string{"script.pid", "child.pid"} {
		pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, "probe", f))))
		if err != nil {
			t.Fatal(err)
		}
		// Reaped by us (the script) or by init (the orphaned sleep): allow
		// init a moment to reap.
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pid) {
			err := syscall.Kill(pid, 0)
			t.Errorf("%s (pid %d) still exists after the timeout: %v", f, pid, err)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// alive reports whether pid is a running process; a zombie waiting for a
// parent that does not reap (PID 1 in some containers) counts as gone.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, ok := strings.Cut(string(stat), ") ")
	return !ok || !strings.HasPrefix(after, "Z")
}

func TestRunVerifyRefusals(t *testing.T) {
	r, dir := probeRepo(t, "exit 0\n", nil)
	if err := os.Remove(filepath.Join(dir, "postgres", "verify.sh")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		component string
		timeout   time.Duration
		env       map[string]string
		want      error
	}{
		{"unknown component", "storage", time.Second, nil, ErrUnknownComponent},
		{"traversal", "../probe", time.Second, nil, ErrInvalid},
		{"no verify.sh", "postgres", time.Second, nil, ErrUnknownDocument},
		{"negative timeout", "probe", -time.Second, nil, ErrInvalid},
		{"timeout above the cap", "probe", MaxVerifyTimeout + time.Second, nil, ErrInvalid},
		{"bad variable name", "probe", time.Second, map[string]string{"A=B": "x"}, ErrInvalid},
		{"NUL in a value", "probe", time.Second, map[string]string{"A": "x\x00y"}, ErrInvalid},
		{"overriding the component", "probe", time.Second, map[string]string{"MCP_PATCH_COMPONENT": "os-layer"}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := r.RunVerify(t.Context(), tt.component, tt.timeout, tt.env); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestExampleScriptsAreShellcheckClean(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join(examplesDir, "*", "verify.sh"))
	if err != nil || len(scripts) != 6 {
		t.Fatalf("found %v (%v), want 5 component scripts and lib/verify.sh", scripts, err)
	}
	for _, s := range scripts {
		out, err := exec.Command("shellcheck", "-x", "-s", "sh", s).CombinedOutput()
		if err != nil {
			t.Errorf("shellcheck %s: %v\n%s", s, err, out)
		}
	}
}
