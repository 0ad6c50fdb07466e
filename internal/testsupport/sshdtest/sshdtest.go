// Package sshdtest starts real OpenSSH servers (/usr/sbin/sshd) on 127.0.0.1
// for tests and benchmarks of the host package, with generated host keys,
// an authorized_keys file and a free port, all in a temp dir; it also runs
// a real ssh-agent and prepares test users and sudo rules. Everything it
// starts or changes is undone through t.Cleanup (processes ended by pid).
// Outside its temp dirs it touches only: the test user it creates, the
// sudoers drop-in it writes, /run/sshd (created when missing, as sshd
// needs it) and, when sudo is missing, `apt-get install sudo`. It must not
// be imported by production code.
package sshdtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHDPath is the OpenSSH server binary the helpers run.
const SSHDPath = "/usr/sbin/sshd"

// Options shape a test sshd. Zero values are usable.
type Options struct {
	// AuthorizedKeys may log in (for every user: one shared file).
	AuthorizedKeys []ssh.PublicKey
	// HostKeyTypes are ssh-keygen -t values; nil means ["ed25519"].
	HostKeyTypes []string
	// AllowTCPForwarding enables direct-tcpip (jump host, tunnels).
	AllowTCPForwarding bool
	// LogLevel is sshd's LogLevel; empty means INFO (which logs each
	// "Accepted publickey" line Server.Count relies on).
	LogLevel string
	// ExtraConfig lines are appended to sshd_config.
	ExtraConfig []string
}

// Server is one running sshd.
type Server struct {
	Host     string // always 127.0.0.1
	Port     int
	Dir      string          // temp dir holding config, keys and log
	HostKeys []ssh.PublicKey // in HostKeyTypes order
	LogFile  string

	t      testing.TB
	cmd    *exec.Cmd
	exited chan struct{}
}

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Start runs one sshd and stops it (and every process under it) at cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	return StartMany(t, 1, opts)[0]
}

// StartMany runs n sshds that share one config file, host keys and
// authorized_keys and differ only by port (passed with -p), so starting
// hundreds for a benchmark is cheap.
func StartMany(t testing.TB, n int, opts Options) []*Server {
	t.Helper()
	if _, err := os.Stat(SSHDPath); err != nil {
		t.Fatalf("sshdtest: OpenSSH server is required (apt-get install openssh-server): %v", err)
	}
	ensurePrivsepDir(t)
	dir := TempDir(t, "sshdtest-")
	cfgPath, hostKeys := writeConfig(t, dir, opts)

	ports := FreePorts(t, n)
	servers := make([]*Server, n)
	for i := range n {
		servers[i] = &Server{Host: "127.0.0.1", Dir: dir, HostKeys: hostKeys, t: t}
		servers[i].LogFile = filepath.Join(dir, fmt.Sprintf("sshd-%d.log", i))
	}
	for attempt := 0; ; attempt++ {
		var pending []*Server
		for i, s := range servers {
			if s.cmd == nil {
				s.Port = ports[i]
				s.launch(cfgPath)
				pending = append(pending, s)
			}
		}
		failed := 0
		for _, s := range pending {
			if err := s.waitListening(10 * time.Second); err != nil {
				if attempt >= 4 {
					t.Fatalf("sshdtest: %v", err)
				}
				s.cmd = nil // port taken meanwhile: try another
				failed++
			}
		}
		if failed == 0 {
			return servers
		}
		fresh := FreePorts(t, failed)
		for i, s := range servers {
			if s.cmd == nil {
				ports[i], fresh = fresh[0], fresh[1:]
			}
		}
	}
}

func (s *Server) launch(cfgPath string) {
	t := s.t
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	defer logf.Close()
	cmd := sshdCommand(t, s.Dir, cfgPath, s.Port)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = s.Dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("sshdtest: start sshd: %v", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(s.exited)
	t.Cleanup(func() { stopTree(cmd.Process.Pid, s.exited) })
}

// sshdCommand is the command line that runs one sshd. As root it runs sshd
// in a private mount namespace where root's ~/.bashrc reads as an empty
// file: root's shell is bash, which sources ~/.bashrc for every command sshd
// runs, and that file belongs to the machine, not to the test. On a machine
// whose .bashrc runs `pyenv init`, every command paid about 1 s for it, and a
// test that ended a login in the middle of `pyenv rehash` left its lock
// behind, so every later login waited 60 s and a whole CI run failed on
// timeouts. Nothing outside that namespace sees the cover.
func sshdCommand(t testing.TB, dir, cfgPath string, port int) *exec.Cmd {
	t.Helper()
	args := []string{"-D", "-e", "-f", cfgPath, "-p", strconv.Itoa(port)}
	cover := machineStartupFiles()
	unshare, err := exec.LookPath("unshare")
	if len(cover) == 0 || os.Geteuid() != 0 || err != nil {
		return exec.Command(SSHDPath, args...)
	}
	empty := filepath.Join(dir, "empty-startup-file")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	// sh -c SCRIPT sh EMPTY FILE... -- SSHD ARGS...
	const script = `empty=$1; shift
while [ "$1" != -- ]; do mount --bind "$empty" "$1" || exit 1; shift; done
shift; exec "$@"`
	argv := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", empty}
	argv = append(argv, cover...)
	argv = append(argv, "--", SSHDPath)
	argv = append(argv, args...)
	return exec.Command(unshare, argv...)
}

// machineStartupFiles are the start-up files of root's shell that bash
// reads for a command sshd runs and that exist here (test users get
// /bin/sh, which reads none).
func machineStartupFiles() []string {
	u, err := user.LookupId("0")
	if err != nil || u.HomeDir == "" {
		return nil
	}
	var out []string
	for _, name := range []string{".bashrc"} {
		p := filepath.Join(u.HomeDir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			out = append(out, p)
		}
	}
	return out
}

// waitListening waits for sshd's "Server listening" line, or for it to exit.
func (s *Server) waitListening(limit time.Duration) error {
	want := fmt.Sprintf("Server listening on 127.0.0.1 port %d.", s.Port)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if strings.Contains(s.Log(), want) {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("sshd on port %d exited at start: %s", s.Port, s.Log())
		case <-time.After(5 * time.Millisecond):
		}
	}
	stopTree(s.cmd.Process.Pid, s.exited)
	return fmt.Errorf("sshd on port %d not listening after %s: %s", s.Port, limit, s.Log())
}

// Log returns what sshd has logged so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.LogFile)
	return string(b)
}

// Count returns how many log lines contain substr, e.g. "Accepted publickey"
// (one per handshake that authenticated).
func (s *Server) Count(substr string) int {
	n := 0
	for _, line := range strings.Split(s.Log(), "\n") {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// PID is the listening sshd's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop ends the listener and every connection it serves.
func (s *Server) Stop() { stopTree(s.cmd.Process.Pid, s.exited) }

// ConnectionPIDs are the per-connection sshd processes under the listener
// (monitor and network child of each connection).
func (s *Server) ConnectionPIDs() []int {
	var pids []int
	for _, p := range descendants(s.cmd.Process.Pid) {
		if comm(p) == "sshd" {
			pids = append(pids, p)
		}
	}
	return pids
}

// SignalConnections sends sig to every per-connection sshd process, which
// with SIGKILL breaks each open connection as a crash or a network cut
// would; the listener keeps accepting new ones.
func (s *Server) SignalConnections(sig syscall.Signal) ([]int, error) {
	pids := s.ConnectionPIDs()
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("signal sshd %d: %w", p, err))
		}
	}
	return pids, errors.Join(errs...)
}

// KnownHostsLines returns one known_hosts line per host key, in the
// "[127.0.0.1]:port" form OpenSSH uses for non-22 ports.
func (s *Server) KnownHostsLines() string {
	var b strings.Builder
	for _, k := range s.HostKeys {
		fmt.Fprintf(&b, "[%s]:%d %s", s.Host, s.Port, ssh.MarshalAuthorizedKey(k))
	}
	return b.String()
}

// WriteKnownHosts writes a known_hosts file listing every key of servers.
func WriteKnownHosts(t testing.TB, path string, servers ...*Server) {
	t.Helper()
	var b strings.Builder
	for _, s := range servers {
		b.WriteString(s.KnownHostsLines())
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatalf("sshdtest: write known_hosts: %v", err)
	}
}

func writeConfig(t testing.TB, dir string, opts Options) (string, []ssh.PublicKey) {
	t.Helper()
	types := opts.HostKeyTypes
	if len(types) == 0 {
		types = []string{"ed25519"}
	}
	var cfg strings.Builder
	var hostKeys []ssh.PublicKey
	for _, typ := range types {
		_, path := NewKey(t, dir, "host_"+typ, typ)
		pub, err := readPublicKey(path + ".pub")
		if err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
		hostKeys = append(hostKeys, pub)
		fmt.Fprintf(&cfg, "HostKey %s\n", path)
	}
	var ak bytes.Buffer
	for _, k := range opts.AuthorizedKeys {
		ak.Write(ssh.MarshalAuthorizedKey(k))
	}
	akPath := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(akPath, ak.Bytes(), 0o644); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	logLevel := opts.LogLevel
	if logLevel == "" {
		logLevel = "INFO"
	}
	forwarding := "no"
	if opts.AllowTCPForwarding {
		forwarding = "yes"
	}
	fmt.Fprintf(&cfg, `ListenAddress 127.0.0.1
PidFile none
AuthorizedKeysFile %s
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowTcpForwarding %s
AllowAgentForwarding no
X11Forwarding no
UseDNS no
PrintMotd no
PrintLastLog no
LogLevel %s
MaxStartups 1000:30:2000
MaxSessions 50
`, akPath, forwarding, logLevel)
	for _, l := range opts.ExtraConfig {
		cfg.WriteString(l + "\n")
	}
	path := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o644); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	return path, hostKeys
}

// NewKey generates an unencrypted key pair with the real ssh-keygen
// (typ: ed25519, rsa, ecdsa) as dir/name and dir/name.pub.
func NewKey(t testing.TB, dir, name, typ string) (ssh.Signer, string) {
	t.Helper()
	return NewKeyWithPassphrase(t, dir, name, typ, "")
}

// NewKeyWithPassphrase is NewKey with a passphrase on the private key; the
// returned signer is the decrypted key.
func NewKeyWithPassphrase(t testing.TB, dir, name, typ, passphrase string) (ssh.Signer, string) {
	t.Helper()
	path := filepath.Join(dir, name)
	args := []string{"-q", "-t", typ, "-N", passphrase, "-C", name, "-f", path}
	if typ == "rsa" {
		args = append(args, "-b", "3072")
	}
	if out, err := exec.Command("ssh-keygen", args...).CombinedOutput(); err != nil {
		t.Fatalf("sshdtest: ssh-keygen %s: %v: %s", name, err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	var signer ssh.Signer
	if passphrase == "" {
		signer, err = ssh.ParsePrivateKey(data)
	} else {
		signer, err = ssh.ParsePrivateKeyWithPassphrase(data, []byte(passphrase))
	}
	if err != nil {
		t.Fatalf("sshdtest: parse %s: %v", path, err)
	}
	return signer, path
}

func readPublicKey(path string) (ssh.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey(data)
	return k, err
}

// TempDir makes a world-traversable temp dir (sshd reads authorized_keys as
// the login user, who may not be the test's user) removed at cleanup.
func TempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("sshdtest: find free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// ensurePrivsepDir creates sshd's privilege separation directory when
// running as root and it is missing (containers often lack /run/sshd).
func ensurePrivsepDir(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatalf("sshdtest: create /run/sshd: %v", err)
	}
}

// StartAgent runs a real `ssh-agent -D -a <sock>`, adds the given key
// files with ssh-add and returns the socket path (what SSH_AUTH_SOCK would
// hold). The agent is killed by pid at cleanup.
func StartAgent(t testing.TB, keyFiles ...string) string {
	t.Helper()
	dir := TempDir(t, "sshdtest-agent-")
	sock := filepath.Join(dir, "agent.sock")
	cmd := exec.Command("ssh-agent", "-D", "-a", sock)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("sshdtest: start ssh-agent: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { stopTree(cmd.Process.Pid, exited) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshdtest: ssh-agent socket %s did not appear: %s", sock, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, f := range keyFiles {
		add := exec.Command("ssh-add", f)
		add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
		if o, err := add.CombinedOutput(); err != nil {
			t.Fatalf("sshdtest: ssh-add %s: %v: %s", f, err, o)
		}
	}
	return sock
}

// testUserComment marks users EnsureUser created, so a leftover from an
// interrupted run is recognised and removed by the next one.
const testUserComment = "mcp-patch test user"

// EnsureUser makes sure a local login user exists (useradd, shell /bin/sh,
// no password but not locked, so key login works with UsePAM no) and
// removes it at cleanup if it is a test user (created here now or by an
// earlier, interrupted run). Requires root.
func EnsureUser(t testing.TB, name string) {
	t.Helper()
	requireRoot(t, "create test user "+name)
	if u, err := user.Lookup(name); err == nil {
		if u.Name != testUserComment {
			// A real user: never hand it sudo rights or remove it.
			t.Fatalf("sshdtest: user %s exists and is not a test user (comment %q): pick another name", name, u.Name)
		}
	} else if out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/sh", "--password", "*",
		"--comment", testUserComment, name).CombinedOutput(); err != nil {
		t.Fatalf("sshdtest: useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		var out []byte
		var err error
		for range 50 { // its last processes may still be exiting
			if out, err = exec.Command("userdel", "--remove", name).CombinedOutput(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("sshdtest: userdel %s: %v: %s", name, err, out)
	})
}

// RequireSudo makes sure sudo is installed, installing it with apt-get
// when it is missing (root only).
func RequireSudo(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("sudo"); err == nil {
		return
	}
	requireRoot(t, "install sudo")
	cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "sudo")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sshdtest: sudo is missing and apt-get install sudo failed: %v: %s", err, out)
	}
}

// SudoRule writes /etc/sudoers.d/<file> letting user run anything as root,
// with or without a password, checks it with visudo and removes it at
// cleanup. Requires root.
func SudoRule(t testing.TB, file, userName string, nopasswd bool) {
	t.Helper()
	requireRoot(t, "write a sudoers drop-in")
	RequireSudo(t)
	rule := userName + " ALL=(root) ALL\n"
	if nopasswd {
		rule = userName + " ALL=(root) NOPASSWD: ALL\n"
	}
	path := filepath.Join("/etc/sudoers.d", file)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(rule), 0o440); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	if out, err := exec.Command("visudo", "-c", "-q", "-f", tmp).CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("sshdtest: visudo rejected %q: %v: %s", rule, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		t.Fatalf("sshdtest: %v", err)
	}
	t.Cleanup(func() { os.Remove(path) })
}

func requireRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("sshdtest: %s needs root", what)
	}
}

// ProcessAlive reports whether pid exists and is not a zombie.
func ProcessAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	state, _, ok := statFields(string(data))
	return ok && state != "Z"
}

// stopTree ends pid and everything under it: SIGTERM to the root, then
// SIGKILL to whatever is left (sshd does not end its connections when the
// listener stops).
func stopTree(pid int, exited <-chan struct{}) {
	select {
	case <-exited:
		return // already reaped; the pid may belong to someone else now
	default:
	}
	kids := descendants(pid)
	syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		syscall.Kill(pid, syscall.SIGKILL)
		<-exited
	}
	all := append(kids, descendantsOfAll(kids)...)
	for _, k := range all {
		syscall.Kill(k, syscall.SIGKILL)
	}
	// Wait (bounded) until they are gone, so that what cleanup does next
	// (removing their user, say) does not find them.
	deadline := time.Now().Add(5 * time.Second)
	for _, k := range all {
		for ProcessAlive(k) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func descendantsOfAll(pids []int) []int {
	var out []int
	for _, p := range pids {
		out = append(out, descendants(p)...)
	}
	return out
}

// descendants lists every process under pid, read from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		_, ppid, ok := statFields(string(data))
		if ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// statFields parses state and ppid from /proc/<pid>/stat (the comm field
// may hold spaces and parentheses, so parse after the last ')').
func statFields(stat string) (state string, ppid int, ok bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}

func comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ReadPIDFile reads a pid written by a remote script.
func ReadPIDFile(t testing.TB, path string, wait time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		if b, err := os.ReadFile(path); err == nil {
			sc := bufio.NewScanner(bytes.NewReader(b))
			if sc.Scan() {
				if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
					return pid
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshdtest: pid file %s not written within %s", path, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
