package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
)

// serve starts accepting on the host's listener (bound at creation or
// by listen after a boot).
func (h *Host) serve() {
	h.mu.Lock()
	l := h.listener
	h.setPowerLocked(PowerUp)
	h.mu.Unlock()
	if l != nil {
		h.fleet.wg.Add(1)
		go h.acceptLoop(l)
	}
}

// listen binds the host's port again after a boot (same port, same key).
func (h *Host) listen() error {
	var l net.Listener
	var err error
	for i := 0; i < 50; i++ {
		l, err = net.Listen("tcp", h.Addr())
		if err == nil {
			break
		}
		if !h.fleet.sleep(100 * time.Millisecond) {
			return errors.New("fleet closed")
		}
	}
	if err != nil {
		return fmt.Errorf("listen on %s: %w", h.Addr(), err)
	}
	h.mu.Lock()
	h.listener = l
	h.mu.Unlock()
	h.fleet.wg.Add(1)
	go h.acceptLoop(l)
	return nil
}

func (h *Host) acceptLoop(l net.Listener) {
	defer h.fleet.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		h.fleet.wg.Add(1)
		go func() {
			defer h.fleet.wg.Done()
			h.handleConn(c)
		}()
	}
}

func (h *Host) serverConfig() *ssh.ServerConfig {
	f := h.fleet
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if !slices.Contains(f.opts.Users, meta.User()) {
				return nil, fmt.Errorf("user %s not allowed", meta.User())
			}
			k := key.Marshal()
			for _, a := range f.authorized {
				if bytes.Equal(a, k) {
					return &ssh.Permissions{Extensions: map[string]string{"user": meta.User()}}, nil
				}
			}
			return nil, errors.New("key not authorized")
		},
		ServerVersion: "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5",
	}
	h.mu.Lock()
	cfg.AddHostKey(h.hostKey)
	h.mu.Unlock()
	return cfg
}

func (h *Host) handleConn(nc net.Conn) {
	nc.SetDeadline(time.Now().Add(15 * time.Second))
	sc, chans, reqs, err := ssh.NewServerConn(nc, h.serverConfig())
	if err != nil {
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	h.mu.Lock()
	if h.power != PowerUp && h.power != PowerShuttingDown {
		h.mu.Unlock()
		sc.Close()
		return
	}
	h.conns[sc] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.conns, sc)
		h.mu.Unlock()
		sc.Close()
	}()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	for nch := range chans {
		switch nch.ChannelType() {
		case "session":
			ch, creqs, err := nch.Accept()
			if err != nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.handleSession(sc, ch, creqs)
			}()
		case "direct-tcpip":
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.handleDirect(nch)
			}()
		default:
			nch.Reject(ssh.UnknownChannelType, "unknown channel type")
		}
	}
	wg.Wait()
}

// session is one exec (or shell) on the host: a /bin/sh in its own process
// group, whose group is signalled when the client asks or goes away.
type session struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done bool
}

func (s *session) kill(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil || s.done {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, sig)
}

var signals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE, "HUP": syscall.SIGHUP, "ILL": syscall.SIGILL,
	"INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE, "QUIT": syscall.SIGQUIT, "SEGV": syscall.SIGSEGV,
	"TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}

func signalName(sig syscall.Signal) string {
	for n, s := range signals {
		if s == sig {
			return n
		}
	}
	return "KILL"
}

func (h *Host) handleSession(sc *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var extraEnv []string
	s := &session{}
	exited := make(chan struct{})
	started := false
	for {
		var req *ssh.Request
		var ok bool
		select {
		case req, ok = <-reqs:
		case <-exited:
			return
		}
		if !ok {
			// The client closed the channel or the connection dropped: as
			// sshd does, hang up on the session's processes.
			s.kill(syscall.SIGHUP)
			if started {
				go func() {
					select {
					case <-exited:
					case <-time.After(5 * time.Second):
						s.kill(syscall.SIGKILL)
					}
				}()
			}
			return
		}
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			if ssh.Unmarshal(req.Payload, &kv) == nil && (kv.Name == "LANG" || strings.HasPrefix(kv.Name, "LC_")) {
				extraEnv = append(extraEnv, kv.Name+"="+kv.Value)
				req.Reply(true, nil)
				continue
			}
			req.Reply(false, nil)
		case "exec", "shell":
			if started {
				req.Reply(false, nil)
				continue
			}
			command := ""
			if req.Type == "exec" {
				var p struct{ Command string }
				if err := ssh.Unmarshal(req.Payload, &p); err != nil {
					req.Reply(false, nil)
					continue
				}
				command = p.Command
			}
			// Answer first, as sshd does: a command that exits at once must
			// not close the channel before the client has its reply.
			req.Reply(true, nil)
			started = true
			if err := h.startCommand(s, ch, command, extraEnv, exited); err != nil {
				fmt.Fprintf(ch.Stderr(), "lab host %s: %v\n", h.Name, err)
				ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{255}))
				return
			}
		case "signal":
			var p struct{ Signal string }
			if ssh.Unmarshal(req.Payload, &p) == nil {
				if sig, ok := signals[p.Signal]; ok {
					s.kill(sig)
				}
			}
			if req.WantReply {
				req.Reply(true, nil)
			}
		default:
			// pty-req, x11-req, subsystem, ...: not offered.
			req.Reply(false, nil)
		}
	}
}

func (h *Host) startCommand(s *session, ch ssh.Channel, command string, extraEnv []string, exited chan struct{}) error {
	args := []string{"-c", command}
	if command == "" {
		args = []string{"-i"}
	}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = append(h.Env(), extraEnv...)
	cmd.Dir = h.Path("/root")
	cmd.Stdout = ch
	cmd.Stderr = ch.Stderr()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := os.WriteFile(h.Path("/proc/uptime"), []byte(uptimeNow(h)), 0o644); err != nil {
		return err
	}
	h.mu.Lock()
	if h.power != PowerUp && h.power != PowerShuttingDown {
		h.mu.Unlock()
		return errors.New("host is going down")
	}
	s.mu.Lock()
	err = cmd.Start()
	s.cmd = cmd
	s.mu.Unlock()
	if err == nil {
		h.sessions[s] = struct{}{}
		h.fleet.commands.Add(1)
	}
	h.mu.Unlock()
	if err != nil {
		return err
	}
	go func() {
		io.Copy(stdin, ch)
		stdin.Close()
	}()
	go func() {
		werr := cmd.Wait()
		s.mu.Lock()
		s.done = true
		s.mu.Unlock()
		h.mu.Lock()
		delete(h.sessions, s)
		h.mu.Unlock()
		status := 0
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
					Signal     string
					CoreDumped bool
					Error      string
					Lang       string
				}{Signal: signalName(ws.Signal())}))
				ch.Close()
				close(exited)
				return
			}
			status = ee.ExitCode()
		} else if werr != nil {
			status = 255
		}
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
		ch.Close()
		close(exited)
	}()
	return nil
}

func uptimeNow(h *Host) string {
	st, err := h.m.View()
	if err != nil {
		return "0.00 0.00\n"
	}
	return machine.UptimeLine(st, time.Now())
}

// handleDirect serves a direct-tcpip channel: a TCP connection from the
// host to a loopback address (mapped by SetForward, e.g. 127.0.0.1:2379
// to the lab's etcd member of this host).
func (h *Host) handleDirect(nch ssh.NewChannel) {
	var p struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(nch.ExtraData(), &p); err != nil {
		nch.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
		return
	}
	target := net.JoinHostPort(p.Host, strconv.Itoa(int(p.Port)))
	h.mu.Lock()
	if to, ok := h.forwards[target]; ok {
		target = to
	}
	h.mu.Unlock()
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	if ip := net.ParseIP(host); (ip == nil && host != "localhost") || (ip != nil && !ip.IsLoopback()) {
		nch.Reject(ssh.Prohibited, "lab hosts forward to loopback addresses only")
		return
	}
	conn, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nch.Accept()
	if err != nil {
		conn.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		io.Copy(conn, ch)
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	go func() {
		defer wg.Done()
		io.Copy(ch, conn)
		ch.CloseWrite()
	}()
	wg.Wait()
	ch.Close()
	conn.Close()
}
