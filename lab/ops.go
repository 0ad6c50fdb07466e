package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// The lab's operations side: a webhook receiver that stands for the team's
// chat or pager (every notice the server sends lands there), and, when its
// binary is at hand, a real Alertmanager the alert gate reads.

// Notice is one webhook delivery the lab's receiver accepted.
type Notice struct {
	Kind  string `json:"kind"`
	Round string `json:"round"`
	Node  string `json:"node"`
	Why   string `json:"why"`
	Tool  string `json:"tool"`
}

// Receiver is the lab's webhook receiver on loopback. Down makes it
// unreachable (connections refused) until Up.
type Receiver struct {
	mu      sync.Mutex
	addr    string
	srv     *http.Server
	notices []Notice
}

func startReceiver() (*Receiver, error) {
	r := &Receiver{addr: "127.0.0.1:0"}
	if err := r.Up(); err != nil {
		return nil, err
	}
	return r, nil
}

// URL is where the server sends its notices.
func (r *Receiver) URL() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "http://" + r.addr + "/notify"
}

// Up (re)starts the receiver on its address.
func (r *Receiver) Up() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	r.addr = ln.Addr().String()
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return nil
}

// Down closes the receiver: every send is refused until Up.
func (r *Receiver) Down() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv == nil {
		return nil
	}
	err := r.srv.Close()
	r.srv = nil
	return err
}

// Notices are the deliveries accepted so far, in order.
func (r *Receiver) Notices() []Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Notice(nil), r.notices...)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	var n Notice
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&n); err != nil || n.Kind == "" {
		http.Error(w, "want the JSON body of an mcp-patch notice", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.notices = append(r.notices, n)
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// FindAlertmanager returns the real Alertmanager scripts/setup.sh builds
// (MCP_PATCH_ALERTMANAGER, else the cache), or "" when there is none.
func FindAlertmanager(getenv func(string) string) string {
	if p := getenv("MCP_PATCH_ALERTMANAGER"); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	p := filepath.Join(cache, "mcp-patch", "alertmanager-v0.28.1", "alertmanager")
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		return ""
	}
	return p
}

// Alertmanager is a real Alertmanager process on loopback.
type Alertmanager struct {
	bin, dir, addr string
	mu             sync.Mutex
	cmd            *exec.Cmd
	logs           *bytes.Buffer
	done           chan struct{}
}

func startAlertmanager(ctx context.Context, bin, dir string) (*Alertmanager, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := "route:\n  receiver: lab\nreceivers:\n  - name: lab\n"
	if err := os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	am := &Alertmanager{bin: bin, dir: dir, addr: ln.Addr().String()}
	ln.Close()
	if err := am.Start(ctx); err != nil {
		return nil, err
	}
	return am, nil
}

// URL is the Alertmanager's base URL.
func (a *Alertmanager) URL() string { return "http://" + a.addr }

// Start runs the process (again) on its address and waits until it is ready.
func (a *Alertmanager) Start(ctx context.Context) error {
	a.mu.Lock()
	if a.cmd != nil {
		a.mu.Unlock()
		return nil
	}
	a.logs = &bytes.Buffer{}
	cmd := exec.Command(a.bin, "--config.file="+filepath.Join(a.dir, "alertmanager.yml"),
		"--storage.path="+filepath.Join(a.dir, "data"), "--web.listen-address="+a.addr,
		"--cluster.listen-address=", "--log.level=warn")
	cmd.Stdout, cmd.Stderr = a.logs, a.logs
	if err := cmd.Start(); err != nil {
		a.mu.Unlock()
		return fmt.Errorf("start Alertmanager %s: %w", a.bin, err)
	}
	a.cmd, a.done = cmd, make(chan struct{})
	done := a.done
	go func() { cmd.Wait(); close(done) }()
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL()+"/-/ready", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("Alertmanager exited before it was ready: %s", a.logs.String())
		case <-ctx.Done():
			return fmt.Errorf("Alertmanager not ready on %s: %w", a.addr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends the process; the Alertmanager is unreachable until Start.
func (a *Alertmanager) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return nil
	}
	if err := a.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-a.done
	a.cmd = nil
	return nil
}

// Post fires (or, with endsAt in the past, resolves) one alert, as
// Prometheus would.
func (a *Alertmanager) Post(ctx context.Context, labels map[string]string, summary string, endsAt time.Time) error {
	body, err := json.Marshal([]map[string]any{{
		"labels":      labels,
		"annotations": map[string]string{"summary": summary},
		"startsAt":    time.Now().Add(-time.Minute).UTC().Format(time.RFC3339),
		"endsAt":      endsAt.UTC().Format(time.RFC3339),
	}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL()+"/api/v2/alerts", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("post alert to Alertmanager: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("post alert to Alertmanager: HTTP %d: %s", resp.StatusCode, b)
	}
	return nil
}

// The lab's own faults: the clock, the intent, the receiver, the Alertmanager.
var labFaults = []struct {
	name, description, arg string
}{
	{"window-closes", "the os-layer intent gets a daily maintenance window (UTC) that opened 30 minutes ago, and the lab clock moves to its end: " +
		"a node in progress finishes, the next drain waits for tomorrow's window", ""},
	{"alert-firing", "a critical alert fires in the lab's Alertmanager (as Prometheus would send it): the gate is red while it fires", "alertname [" + DefaultFiringAlert + "]"},
	{"alertmanager-down", "the lab's Alertmanager stops: the gate cannot read alerts (could not check) and stops", ""},
	{"webhook-down", "the lab's webhook receiver refuses connections: every notice fails after its retries and is journaled as failed; the round goes on", ""},
}

// DefaultFiringAlert is the alert alert-firing sends unless told another.
const DefaultFiringAlert = "KubePersistentVolumeFillingUp"

func labFault(name string) bool {
	for _, f := range labFaults {
		if f.name == name {
			return true
		}
	}
	return false
}

func (l *Lab) injectLab(ctx context.Context, name, arg string, clear bool) error {
	switch name {
	case "window-closes":
		if clear {
			return l.writeMaintenance("")
		}
		return l.closeMaintenanceWindow()
	case "webhook-down":
		if clear {
			return l.Receiver.Up()
		}
		return l.Receiver.Down()
	}
	if l.Alertmanager == nil {
		return fmt.Errorf("fault %s: this lab runs no Alertmanager (scripts/setup.sh builds one; MCP_PATCH_ALERTMANAGER names another)", name)
	}
	switch name {
	case "alertmanager-down":
		if clear {
			return l.Alertmanager.Start(ctx)
		}
		return l.Alertmanager.Stop()
	case "alert-firing":
		if clear {
			if l.firing == "" {
				return nil
			}
			if err := l.Alertmanager.Post(ctx, firingLabels(l.firing), "lab fault cleared", time.Now().Add(-time.Second)); err != nil {
				return err
			}
			l.firing = ""
			return nil
		}
		alert := orDefault(arg, DefaultFiringAlert)
		if err := l.Alertmanager.Post(ctx, firingLabels(alert), "lab fault: "+alert+" fires", time.Now().Add(24*time.Hour)); err != nil {
			return err
		}
		l.firing = alert
		return nil
	}
	return fmt.Errorf("unknown lab fault %q", name)
}

func firingLabels(alert string) map[string]string {
	return map[string]string{"alertname": alert, "severity": "critical", "namespace": "databases"}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var maintenanceSection = regexp.MustCompile(`(?m)^maintenance:\n(?:[ \t-].*\n?)*`)

// closeMaintenanceWindow declares a daily window around the lab's now and
// moves the lab clock to its end.
func (l *Lab) closeMaintenanceWindow() error {
	now := l.Clock.Now().UTC().Truncate(time.Minute)
	start, end := now.Add(-30*time.Minute), now.Add(30*time.Minute)
	section := fmt.Sprintf("maintenance:\n  estimated_window_minutes: 20\n  windows:\n  - {days: [mon, tue, wed, thu, fri, sat, sun], start: %q, end: %q, time_zone: UTC}\n",
		start.Format("15:04"), end.Format("15:04"))
	if err := l.writeMaintenance(section); err != nil {
		return err
	}
	l.maintenance = [2]time.Time{start, end}
	l.Clock.AdvanceTo(end.Add(time.Second))
	return nil
}

// writeMaintenance replaces the os-layer's maintenance section (""
// removes it) and commits the change, as a person editing the intent would.
func (l *Lab) writeMaintenance(section string) error {
	p := filepath.Join(l.IntentRepo, "os-layer", "settings.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	s := maintenanceSection.ReplaceAllString(string(b), "")
	if section != "" {
		s = strings.TrimRight(s, "\n") + "\n" + section
	}
	if s == string(b) {
		return nil
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		return err
	}
	return l.git("commit", "-q", "-m", "os-layer: maintenance windows", "--", "os-layer/settings.yaml")
}

func (l *Lab) git(args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = l.IntentRepo
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=lab", "GIT_AUTHOR_EMAIL=lab@mcp-patch.lab",
		"GIT_COMMITTER_NAME=lab", "GIT_COMMITTER_EMAIL=lab@mcp-patch.lab", "GIT_CONFIG_GLOBAL=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
