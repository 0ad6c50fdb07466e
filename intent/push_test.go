package intent

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPushToALocalBareRepository(t *testing.T) {
	ctx := t.Context()
	dir := newExampleRepo(t)
	bare := filepath.Join(t.TempDir(), "intent.git")
	gitCLI(t, filepath.Dir(bare), "init", "-q", "--bare", bare)
	gitCLI(t, dir, "remote", "add", "origin", bare)
	r := openRepo(t, dir, func(o *Options) { o.Remote = "origin" })

	c, err := r.RecordLesson(ctx, LessonInput{Kind: KindLesson, Component: "os-layer", Text: "pushed lesson"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Pushed || c.PushError != "" {
		t.Fatalf("commit not pushed: %+v", c)
	}
	if got := gitCLI(t, bare, "rev-parse", "refs/heads/mcp-patch/round-2025-11"); got != c.Hash {
		t.Errorf("remote branch at %s, want %s", got, c.Hash)
	}
	if out, err := gitTry(t, bare, "fsck", "--strict", "--no-progress"); err != nil || out != "" {
		t.Errorf("fsck of the remote: %v\n%s", err, out)
	}
	res, err := r.Push(ctx)
	if err != nil || !res.UpToDate || res.Hash != c.Hash {
		t.Errorf("second push: %+v, %v", res, err)
	}

	// Someone else moves the remote branch: our next push is refused (never
	// forced) and our commit stands locally.
	clone := filepath.Join(t.TempDir(), "clone")
	gitCLI(t, filepath.Dir(clone), "clone", "-q", "-b", "mcp-patch/round-2025-11", bare, clone)
	writeFile(t, filepath.Join(clone, "elsewhere.txt"), "x\n")
	gitCLI(t, clone, "add", "elsewhere.txt")
	gitCLI(t, clone, "commit", "-q", "-m", "elsewhere")
	gitCLI(t, clone, "push", "-q", "origin", "mcp-patch/round-2025-11")
	theirs := gitCLI(t, clone, "rev-parse", "HEAD")

	c2, err := r.RecordLesson(ctx, LessonInput{Kind: KindLesson, Component: "os-layer", Text: "diverged"})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Pushed || c2.PushError == "" {
		t.Errorf("non-fast-forward push should fail: %+v", c2)
	}
	if got := gitCLI(t, bare, "rev-parse", "refs/heads/mcp-patch/round-2025-11"); got != theirs {
		t.Errorf("remote branch rewritten to %s", got)
	}
	if got := gitCLI(t, dir, "rev-parse", "HEAD"); got != c2.Hash {
		t.Errorf("local commit lost")
	}

	gitCLI(t, dir, "remote", "add", "web", "https://git.example.invalid/intent.git")
	web := openRepo(t, dir, func(o *Options) { o.Remote = "web" })
	if _, err := web.Push(ctx); !errors.Is(err, ErrInvalid) {
		t.Errorf("https remote: err = %v, want ErrInvalid", err)
	}
}

// testSSHD is a real OpenSSH server on 127.0.0.1 with a generated host key.
type testSSHD struct {
	port          int
	hostPublicKey string // "ssh-ed25519 AAAA…"
	clientKey     string // private key file allowed to log in
	user          string
	log           *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func keygen(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "intent-test", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(pub))
	return f[0] + " " + f[1]
}

func startSSHD(t *testing.T) *testSSHD {
	t.Helper()
	const sshd = "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		t.Fatalf("OpenSSH server needed for this test: %v", err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &testSSHD{user: u.Username, clientKey: filepath.Join(dir, "client_ed25519"), log: &lockedBuffer{}}
	s.hostPublicKey = keygen(t, filepath.Join(dir, "host_ed25519"))
	clientPub := keygen(t, s.clientKey)
	writeFile(t, filepath.Join(dir, "authorized_keys"), clientPub+"\n")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := filepath.Join(dir, "sshd_config")
	writeFile(t, cfg, fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowUsers %s
LogLevel VERBOSE
`, s.port, filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "sshd.pid"), filepath.Join(dir, "authorized_keys"), u.Username))

	// sshd refuses to start without its privilege separation directory,
	// which a fresh machine (or container) may not have until the
	// openssh-server service first ran.
	if os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatalf("create /run/sshd: %v", err)
		}
	}
	cmd := exec.Command(sshd, "-D", "-e", "-f", cfg)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.log.add(sc.Text() + "\n")
		}
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-done
	})

	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			banner, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if strings.HasPrefix(banner, "SSH-2.0-") {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd did not come up on port %d: %v\n%s", s.port, err, s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPushOverSSH(t *testing.T) {
	srv := startSSHD(t)
	knownDir := t.TempDir()
	good := filepath.Join(knownDir, "known_hosts")
	writeFile(t, good, fmt.Sprintf("[127.0.0.1]:%d %s\n", srv.port, srv.hostPublicKey))
	wrong := filepath.Join(knownDir, "known_hosts_wrong")
	writeFile(t, wrong, fmt.Sprintf("[127.0.0.1]:%d %s\n", srv.port, keygen(t, filepath.Join(knownDir, "impostor"))))
	other := filepath.Join(knownDir, "known_hosts_other")
	writeFile(t, other, fmt.Sprintf("[127.0.0.1]:%d %s\n", srv.port+1, srv.hostPublicKey))

	tests := []struct {
		name       string
		knownHosts string
		wantPushed bool
		wantErr    string
	}{
		{"host key matches known_hosts", good, true, ""},
		{"host key differs from known_hosts", wrong, false, "key mismatch"},
		{"host not in known_hosts", other, false, "key is unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newExampleRepo(t)
			bare := filepath.Join(t.TempDir(), "intent.git")
			gitCLI(t, filepath.Dir(bare), "init", "-q", "--bare", bare)
			gitCLI(t, dir, "remote", "add", "origin", fmt.Sprintf("ssh://%s@127.0.0.1:%d%s", srv.user, srv.port, bare))
			r := openRepo(t, dir, func(o *Options) {
				o.Remote = "origin"
				o.SSH = SSHOptions{KnownHosts: []string{tt.knownHosts}, KeyFiles: []string{srv.clientKey}, DialTimeout: 5 * time.Second, PushTimeout: 30 * time.Second}
			})
			c, err := r.RecordLesson(t.Context(), LessonInput{Kind: KindLesson, Component: "control-plane", Text: "over ssh"})
			if err != nil {
				t.Fatal(err)
			}
			if c.Pushed != tt.wantPushed || !strings.Contains(c.PushError, tt.wantErr) {
				t.Fatalf("pushed=%v push_error=%q, want pushed=%v error containing %q", c.Pushed, c.PushError, tt.wantPushed, tt.wantErr)
			}
			got, err := gitTry(t, bare, "rev-parse", "--verify", "-q", "refs/heads/mcp-patch/round-2025-11")
			if tt.wantPushed && got != c.Hash {
				t.Errorf("remote branch at %q, want %s (%v)", got, c.Hash, err)
			}
			if !tt.wantPushed && err == nil {
				t.Errorf("the remote got the branch through a refused host key: %s", got)
			}
		})
	}
	if !strings.Contains(srv.log.String(), "Accepted publickey for "+srv.user) {
		t.Errorf("sshd log shows no public-key login:\n%s", srv.log)
	}
}
