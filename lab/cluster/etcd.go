package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EtcdOptions configure StartEtcdCluster.
type EtcdOptions struct {
	// Members is the cluster size; zero means 3.
	Members int
	// Dir holds certificates, member data and (unless LogDir is set) logs.
	// Empty: a fresh temporary directory that Stop removes.
	Dir string
	// LogDir receives one log file per member. Empty: Dir/logs.
	LogDir string
	// BinDir holds the etcd binary. Empty: FindBinaries.
	BinDir string
	// ReadyTimeout bounds the wait for the members to become healthy. Zero:
	// 2 minutes.
	ReadyTimeout time.Duration
	// Logger receives progress at debug level. Nil: discarded.
	Logger *slog.Logger
}

// EtcdMember is one member of an EtcdCluster.
type EtcdMember struct {
	// Name is the member name, "member-<i>".
	Name string
	// ClientURL is the member's client endpoint, https://127.0.0.1:<port>.
	ClientURL string
	// PeerURL is the member's peer endpoint, https://127.0.0.1:<port>.
	PeerURL string
	// DataDir holds the member's data; it survives StopMember.
	DataDir string
}

// EtcdCluster is a running multi-member etcd cluster on loopback. Clients
// and peers speak TLS and must present a certificate signed by CAFile, the
// way kubeadm sets up a control plane's etcd.
type EtcdCluster struct {
	// Members are the members in index order.
	Members []EtcdMember
	// CAFile is the etcd CA (kubeadm: /etc/kubernetes/pki/etcd/ca.crt).
	CAFile string
	// ClientCertFile and ClientKeyFile are a client certificate for health
	// checks (kubeadm: pki/etcd/healthcheck-client.crt/.key).
	ClientCertFile, ClientKeyFile string
	// APIServerCertFile and APIServerKeyFile are the client certificate the
	// API server presents (kubeadm: pki/apiserver-etcd-client.crt/.key).
	APIServerCertFile, APIServerKeyFile string
	// Dir holds the cluster's files; LogDir the member logs.
	Dir, LogDir string

	bins      Binaries
	logger    *slog.Logger
	readyWait time.Duration
	removeDir bool
	args      [][]string // command line per member

	mu      sync.Mutex
	procs   []*process // nil where a member is stopped
	stopped bool
}

// StartEtcdCluster starts an n-member etcd cluster and returns when every
// member reports healthy. On error everything started is stopped.
func StartEtcdCluster(ctx context.Context, opts EtcdOptions) (*EtcdCluster, error) {
	e, err := startEtcdCluster(ctx, opts)
	if err != nil {
		if e != nil {
			err = errors.Join(err, e.Stop())
		}
		return nil, fmt.Errorf("start lab etcd cluster: %w", err)
	}
	return e, nil
}

func startEtcdCluster(ctx context.Context, opts EtcdOptions) (*EtcdCluster, error) {
	n := opts.Members
	if n == 0 {
		n = 3
	}
	if n < 0 {
		return nil, fmt.Errorf("options: Members is %d", n)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bins := Binaries{Dir: opts.BinDir}
	if opts.BinDir == "" {
		var err error
		if bins, err = FindBinaries(ctx, logger); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(bins.Path("etcd")); err != nil {
		return nil, fmt.Errorf("etcd binary: %w", err)
	}
	e := &EtcdCluster{bins: bins, logger: logger, readyWait: opts.ReadyTimeout, procs: make([]*process, n)}
	if e.readyWait == 0 {
		e.readyWait = 2 * time.Minute
	}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "mcp-patch-lab-etcd-")
		if err != nil {
			return nil, fmt.Errorf("create etcd dir: %w", err)
		}
		e.Dir, e.removeDir = dir, true
	} else {
		e.Dir = opts.Dir
	}
	e.LogDir = opts.LogDir
	if e.LogDir == "" {
		e.LogDir = filepath.Join(e.Dir, "logs")
	}
	pki := filepath.Join(e.Dir, "pki")
	for _, d := range []string{e.LogDir, pki} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return e, fmt.Errorf("create %s: %w", d, err)
		}
	}

	e.CAFile = filepath.Join(pki, "ca.crt")
	ca, err := newAuthority("etcd-ca", e.CAFile)
	if err != nil {
		return e, err
	}
	e.ClientCertFile, e.ClientKeyFile, err = ca.issue(certRequest{
		commonName: "kube-etcd-healthcheck-client",
		client:     true,
	}, filepath.Join(pki, "healthcheck-client"))
	if err != nil {
		return e, err
	}
	e.APIServerCertFile, e.APIServerKeyFile, err = ca.issue(certRequest{
		commonName:   "kube-apiserver-etcd-client",
		organization: []string{"system:masters"},
		client:       true,
	}, filepath.Join(pki, "apiserver-etcd-client"))
	if err != nil {
		return e, err
	}

	ports, err := freePorts(2 * n)
	if err != nil {
		return e, err
	}
	var initial []string
	for i := range n {
		m := EtcdMember{
			Name:      "member-" + strconv.Itoa(i),
			ClientURL: "https://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			PeerURL:   "https://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
			DataDir:   filepath.Join(e.Dir, "member-"+strconv.Itoa(i)),
		}
		e.Members = append(e.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range e.Members {
		// Like kubeadm's etcd: one certificate per member for serving and
		// for peer traffic, both ways.
		cert, key, err := ca.issue(certRequest{
			commonName: m.Name,
			dnsNames:   []string{"localhost", m.Name},
			ips:        loopbackIPs,
			server:     true,
			client:     true,
		}, filepath.Join(pki, m.Name))
		if err != nil {
			return e, err
		}
		e.args = append(e.args, []string{
			"--name=" + m.Name,
			"--data-dir=" + m.DataDir,
			"--listen-client-urls=" + m.ClientURL,
			"--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=" + m.PeerURL,
			"--initial-advertise-peer-urls=" + m.PeerURL,
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--initial-cluster-token=lab-etcd",
			"--cert-file=" + cert,
			"--key-file=" + key,
			"--client-cert-auth=true",
			"--trusted-ca-file=" + e.CAFile,
			"--peer-cert-file=" + cert,
			"--peer-key-file=" + key,
			"--peer-client-cert-auth=true",
			"--peer-trusted-ca-file=" + e.CAFile,
			"--unsafe-no-fsync",
			"--log-level=warn",
		})
	}
	// A new cluster only elects a leader once a quorum runs, so all members
	// start before any is waited for.
	for i := range e.Members {
		if err := e.startMember(i); err != nil {
			return e, err
		}
	}
	for i := range e.Members {
		if err := e.waitHealthy(ctx, i); err != nil {
			return e, err
		}
	}
	return e, nil
}

// Endpoints returns the client URLs of all members, stopped or not.
func (e *EtcdCluster) Endpoints() []string {
	var out []string
	for _, m := range e.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// ClientTLS returns a TLS configuration with the CA and health-check client
// certificate, for go.etcd.io/etcd/client/v3 or plain HTTPS.
func (e *EtcdCluster) ClientTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(e.ClientCertFile, e.ClientKeyFile)
	if err != nil {
		return nil, fmt.Errorf("load etcd client certificate: %w", err)
	}
	caPEM, err := os.ReadFile(e.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("read etcd CA: no certificate in " + e.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// StopMember stops member i (SIGTERM, then SIGKILL after a grace period; a
// leader hands over leadership first); its data stays for StartMember.
func (e *EtcdCluster) StopMember(i int) error {
	return e.endMember(i, false)
}

// KillMember kills member i with SIGKILL, as a crash or power loss would: a
// leader gives no notice and the others elect after the election timeout.
// Its data stays for StartMember.
func (e *EtcdCluster) KillMember(i int) error {
	return e.endMember(i, true)
}

func (e *EtcdCluster) endMember(i int, kill bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < 0 || i >= len(e.procs) {
		return fmt.Errorf("stop etcd member %d: no such member", i)
	}
	p := e.procs[i]
	if p == nil {
		return nil
	}
	e.procs[i] = nil
	end := p.stop
	if kill {
		end = p.kill
	}
	if err := end(); err != nil {
		return fmt.Errorf("stop etcd member %d: %w", i, err)
	}
	return nil
}

// StartMember restarts a stopped member i from its data and waits until it
// answers on its client URL. (Health needs a quorum: with too few members
// running, the member runs but reports unhealthy, and StartMember still
// returns once it answers.)
func (e *EtcdCluster) StartMember(ctx context.Context, i int) error {
	if i < 0 || i >= len(e.Members) {
		return fmt.Errorf("start etcd member %d: no such member", i)
	}
	if err := e.startMember(i); err != nil {
		return err
	}
	return e.waitAnswering(ctx, i)
}

func (e *EtcdCluster) startMember(i int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return fmt.Errorf("start etcd member %d: the cluster is stopped", i)
	}
	if e.procs[i] != nil {
		if done, _ := e.procs[i].exited(); !done {
			return nil
		}
	}
	m := e.Members[i]
	p, err := startProcess(e.logger, "etcd "+m.Name, e.bins.Path("etcd"), e.args[i], nil, filepath.Join(e.LogDir, m.Name+".log"))
	if err != nil {
		return fmt.Errorf("start etcd member %d: %w", i, err)
	}
	e.procs[i] = p
	return nil
}

// StartStopped starts every member that is stopped (or has exited) from
// its data and waits until every member reports healthy.
func (e *EtcdCluster) StartStopped(ctx context.Context) error {
	for i := range e.Members {
		if !e.Running(i) {
			if err := e.startMember(i); err != nil {
				return err
			}
		}
	}
	for i := range e.Members {
		if err := e.waitHealthy(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// Running reports whether member i runs.
func (e *EtcdCluster) Running(i int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < 0 || i >= len(e.procs) || e.procs[i] == nil {
		return false
	}
	done, _ := e.procs[i].exited()
	return !done
}

// waitHealthy waits until member i's /health says healthy (it has a leader
// and a quorum).
func (e *EtcdCluster) waitHealthy(ctx context.Context, i int) error {
	return e.waitHealth(ctx, i, true)
}

// waitAnswering waits until member i answers /health at all.
func (e *EtcdCluster) waitAnswering(ctx context.Context, i int) error {
	return e.waitHealth(ctx, i, false)
}

func (e *EtcdCluster) waitHealth(ctx context.Context, i int, needHealthy bool) error {
	tlsConf, err := e.ClientTLS()
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}}
	defer hc.CloseIdleConnections()
	m := e.Members[i]
	return pollUntil(ctx, e.readyWait, "etcd "+m.Name+" health", func(ctx context.Context) (bool, error) {
		e.mu.Lock()
		p := e.procs[i]
		e.mu.Unlock()
		if p == nil {
			return false, errors.New("member is stopped")
		}
		if done, err := p.exited(); done {
			return false, p.exitError(err)
		}
		body, code, err := httpGet(ctx, hc, m.ClientURL+"/health", "")
		if err != nil {
			return false, nil
		}
		if !needHealthy {
			return true, nil
		}
		return code == http.StatusOK && strings.Contains(body, `"health":"true"`), nil
	})
}

// MemoryBytes returns the resident set size of each running member, by name.
func (e *EtcdCluster) MemoryBytes() (map[string]int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int64{}
	for i, p := range e.procs {
		if p == nil {
			continue
		}
		if done, _ := p.exited(); done {
			continue
		}
		rss, err := rssBytes(p.pid())
		if err != nil {
			return nil, err
		}
		out[e.Members[i].Name] = rss
	}
	return out, nil
}

// LogTails returns the last n lines of every member log.
func (e *EtcdCluster) LogTails(n int) string {
	var b strings.Builder
	for _, m := range e.Members {
		path := filepath.Join(e.LogDir, m.Name+".log")
		fmt.Fprintf(&b, "==> %s <==\n%s\n", path, tailFile(path, n))
	}
	return b.String()
}

// Stop ends every member and removes the directory when StartEtcdCluster
// created it. It is safe to call more than once.
func (e *EtcdCluster) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	var errs []error
	for i, p := range e.procs {
		if p != nil {
			errs = append(errs, p.stop())
			e.procs[i] = nil
		}
	}
	if e.removeDir {
		errs = append(errs, os.RemoveAll(e.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop lab etcd cluster: %w", err)
	}
	return nil
}
