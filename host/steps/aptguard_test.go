package steps

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/scripts"
)

// refuse_locked names dpkg's lock holder from apt's words, and from
// /proc/locks when apt named none: apt prints "It is held by process PID
// (NAME)", "It is held by process PID" when it could not read the name, or
// "Could not get lock FILE" alone when it could not read the holder.
func TestRefuseLockedNamesTheHolder(t *testing.T) {
	src, _ := scripts.Host.ReadFile("host/download.sh")
	guard, ok := block(string(src), "apt-guard")
	if !ok {
		t.Fatal("download.sh has no apt-guard block")
	}
	common := commonBlock(t)

	admin := t.TempDir()
	front := filepath.Join(admin, "lock-frontend")
	if err := os.WriteFile(filepath.Join(admin, "lock"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(front, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("flock", front, "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := holder.Process.Kill(); err != nil {
			t.Errorf("stop the lock holder: %v", err)
		}
		if err := holder.Wait(); err == nil {
			t.Error("the lock holder ended on its own before the test did")
		}
	}()
	pid := holder.Process.Pid
	// Wait for the holder to take the lock (it shows in /proc/locks).
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), fmt.Sprintf(" %d ", pid)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flock %d did not take %s within a minute", pid, front)
		}
		time.Sleep(20 * time.Millisecond)
	}

	for _, tt := range []struct {
		name    string
		apt     string
		pid     float64
		command string
	}{
		{"apt names pid and name", "E: Could not get lock " + front + ". It is held by process 4242 (apt-get)\n", 4242, "apt-get"},
		{"apt names the pid only", "E: Could not get lock " + front + ". It is held by process 4243\n", 4243, ""},
		{"apt names no holder", "E: Could not get lock " + front + "\nE: Unable to acquire the dpkg frontend lock (" + front + "), is another process using it?\n", float64(pid), "flock " + front + " sleep 600"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "check.out")
			if err := os.WriteFile(out, []byte(tt.apt), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", strings.Replace(common, "\n", "\nexec 3>&1\n", 1)+"\n"+guard+"\nSTEP=download\nrefuse_locked \"$1\" 3", "sh", out)
			cmd.Env = append(os.Environ(), "DPKG_ADMINDIR="+admin)
			stdout, err := cmd.Output()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("refuse_locked: %v, want exit 3\n%s", err, stdout)
			}
			var res map[string]any
			if err := json.Unmarshal(stdout, &res); err != nil {
				t.Fatalf("not one JSON object: %v\n%s", err, stdout)
			}
			want := fmt.Sprintf("dpkg is locked by process %d (", int(tt.pid))
			if res["status"] != "refused" || res["lock_holder_pid"] != tt.pid || !strings.HasPrefix(res["reason"].(string), want) {
				t.Errorf("result %v; want holder %v, reason starting %q", res, tt.pid, want)
			}
			if tt.command != "" && res["lock_holder_command"] != tt.command {
				t.Errorf("holder command %q, want %q", res["lock_holder_command"], tt.command)
			}
		})
	}
}
