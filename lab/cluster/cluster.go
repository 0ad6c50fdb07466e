package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Names and values the lab cluster uses.
const (
	// KwokNodeAnnotation marks a Node that kwok manages; its value is
	// KwokNodeAnnotationValue. Nodes without it are left alone by kwok.
	KwokNodeAnnotation      = "kwok.x-k8s.io/node"
	KwokNodeAnnotationValue = "fake"

	// AdminUser is the user of the admin token, in group system:masters.
	AdminUser = "lab-admin"

	serviceCIDR       = "10.96.0.0/16"
	serviceClusterIP  = "10.96.0.1"
	podCIDR           = "10.244.0.0/16"
	defaultReadyWait  = 3 * time.Minute
	pollInterval      = 200 * time.Millisecond
	probeNodeName     = "lab-probe"
	fieldManager      = "mcp-patch-lab"
	defaultNodeCPU    = "64"
	defaultNodeMemory = "512Gi"
	defaultNodePods   = "110"
)

// Options configure Start. The zero value starts the whole control plane
// with one probe node that is removed once it has proven kwok works.
type Options struct {
	// Nodes are created as kwok nodes and are Ready when Start returns.
	// Empty means no nodes (a probe node is created and deleted).
	Nodes []Node
	// WithoutScheduler leaves kube-scheduler out: pods stay Pending unless
	// they name a node. Zero value: the scheduler runs.
	WithoutScheduler bool
	// WithoutControllerManager leaves kube-controller-manager out: no
	// Deployments, ReplicaSets, PDB status, garbage collection or default
	// service accounts (the ServiceAccount admission plugin is then turned
	// off so pods can still be created). Zero value: it runs.
	WithoutControllerManager bool
	// Etcd, when set, is the etcd cluster the API server stores its data in
	// (over client TLS, with the cluster's API-server client certificate),
	// instead of a private single-member etcd. The cluster does not own it:
	// Stop leaves it running. Stopping its members is how a test takes
	// quorum away from the API server.
	Etcd *EtcdCluster
	// APIServerFlags are appended to kube-apiserver's command line after the
	// lab's own, so they can add (e.g. --oidc-issuer-url=...) or override.
	APIServerFlags []string
	// Tokens are extra static bearer tokens the API server accepts, besides
	// the admin token.
	Tokens []Token
	// Dir is where certificates, kubeconfigs, etcd data and (unless LogDir
	// is set) logs live. Empty: a fresh temporary directory that Stop removes.
	Dir string
	// LogDir receives one log file per component. Empty: Dir/logs.
	LogDir string
	// BinDir holds the control-plane binaries. Empty: FindBinaries.
	BinDir string
	// ReadyTimeout bounds the wait for each component and for the nodes to
	// become ready. Zero: 3 minutes (the machine may be busy).
	ReadyTimeout time.Duration
	// Logger receives progress at debug level and build progress at info
	// level. Nil: discarded.
	Logger *slog.Logger
}

// Node describes a kwok node to create.
type Node struct {
	// Name is the node name, e.g. the host name "gpu-03".
	Name string
	// Labels are added to the standard kubernetes.io/hostname, os and arch
	// labels.
	Labels map[string]string
	// Annotations are added to the kwok annotation.
	Annotations map[string]string
	// Capacity is merged over the default cpu 64, memory 512Gi, pods 110;
	// allocatable equals capacity. Example: {"nvidia.com/gpu": "8"}.
	Capacity map[corev1.ResourceName]string
	// Taints are set on the node spec.
	Taints []corev1.Taint
}

// Token is a static bearer token and the identity it authenticates as.
type Token struct {
	// Token is the bearer token; it must not contain a comma.
	Token string
	// User is the user name; UID is derived from it.
	User string
	// Groups are the user's groups, e.g. system:masters.
	Groups []string
}

// Cluster is a running control plane. Stop ends it.
type Cluster struct {
	// Kubeconfig is the path of an admin kubeconfig (static token).
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// Server is the API server URL, https://127.0.0.1:<port>.
	Server string
	// CAFile is the CA that signed the API server's serving certificate.
	CAFile string
	// AdminToken is the bearer token of AdminUser (system:masters).
	AdminToken string
	// EtcdEndpoint is the plain-HTTP client URL of the cluster's private
	// etcd; empty when Options.Etcd was given.
	EtcdEndpoint string
	// Binaries are the executables the cluster runs.
	Binaries Binaries
	// Dir holds the cluster's files; LogDir its component logs.
	Dir, LogDir string

	client    kubernetes.Interface
	dynamic   dynamic.Interface
	logger    *slog.Logger
	readyWait time.Duration
	removeDir bool
	// noControllerManager: the cluster runs without kube-controller-manager.
	noControllerManager bool

	mu       sync.Mutex
	procs    []*process // in start order
	stopped  bool
	stopErrs error
}

// Start brings up a control plane and returns when the API server is ready,
// every requested node is Ready and (with the controller manager) the
// default service account exists. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := start(ctx, opts)
	if err != nil {
		if c != nil {
			// The logs may go with the directory; keep their ends in the
			// error unless it already quotes the component that died.
			var exited *exitedError
			if tails := c.LogTails(15); tails != "" && !errors.As(err, &exited) {
				err = fmt.Errorf("%w\n%s", err, tails)
			}
			err = errors.Join(err, c.Stop())
		}
		return nil, fmt.Errorf("start lab cluster: %w", err)
	}
	return c, nil
}

func start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var bins Binaries
	if opts.BinDir != "" {
		bins = Binaries{Dir: opts.BinDir}
		if err := bins.check(); err != nil {
			return nil, err
		}
	} else {
		var err error
		if bins, err = FindBinaries(ctx, logger); err != nil {
			return nil, err
		}
	}

	c := &Cluster{Binaries: bins, logger: logger, readyWait: opts.ReadyTimeout, noControllerManager: opts.WithoutControllerManager}
	if c.readyWait == 0 {
		c.readyWait = defaultReadyWait
	}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "mcp-patch-lab-cluster-")
		if err != nil {
			return nil, fmt.Errorf("create cluster dir: %w", err)
		}
		c.Dir, c.removeDir = dir, true
	} else {
		c.Dir = opts.Dir
	}
	c.LogDir = opts.LogDir
	if c.LogDir == "" {
		c.LogDir = filepath.Join(c.Dir, "logs")
	}
	for _, d := range []string{c.Dir, c.LogDir, filepath.Join(c.Dir, "pki"), filepath.Join(c.Dir, "etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return c, fmt.Errorf("create %s: %w", d, err)
		}
	}

	ports, err := freePorts(3)
	if err != nil {
		return c, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if opts.Etcd == nil {
		c.EtcdEndpoint = "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	}

	files, err := c.writeFiles(opts)
	if err != nil {
		return c, err
	}

	started := time.Now()
	if opts.Etcd == nil {
		if err := c.startEtcd(ctx, etcdClient, etcdPeer); err != nil {
			return c, err
		}
		logger.Debug("etcd ready", "after", time.Since(started))
	}
	if err := c.startAPIServer(ctx, opts, files, apiPort); err != nil {
		return c, err
	}
	logger.Debug("kube-apiserver ready", "after", time.Since(started))

	if !opts.WithoutControllerManager {
		if _, err := c.run("kube-controller-manager", nil,
			"--kubeconfig="+files.kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			"--service-account-private-key-file="+files.saKey,
			"--root-ca-file="+files.caCert,
			"--cluster-cidr="+podCIDR,
			"--service-cluster-ip-range="+serviceCIDR,
		); err != nil {
			return c, err
		}
	}
	if !opts.WithoutScheduler {
		if _, err := c.run("kube-scheduler", nil,
			"--kubeconfig="+files.kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
		); err != nil {
			return c, err
		}
	}
	stages, err := filepath.Glob(filepath.Join(bins.StagesDir(), "*.yaml"))
	if err != nil {
		return c, fmt.Errorf("list kwok stages: %w", err)
	}
	sort.Strings(stages)
	kwokArgs := []string{
		"--kubeconfig=" + files.kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + KwokNodeAnnotationValue,
		"--cidr=" + podCIDR,
		"--node-ip=10.0.0.1",
		"--node-lease-duration-seconds=40",
	}
	for _, s := range stages {
		kwokArgs = append(kwokArgs, "--config="+s)
	}
	labStages, err := writeLabStages(filepath.Join(c.Dir, "stages"))
	if err != nil {
		return c, err
	}
	for _, s := range labStages {
		kwokArgs = append(kwokArgs, "--config="+s)
	}
	// kwok also reads ~/.kwok/kwok.yaml when it exists; a private HOME keeps
	// the operator's own kwok settings out of the lab.
	if _, err := c.run("kwok", []string{"HOME=" + c.Dir}, kwokArgs...); err != nil {
		return c, err
	}

	nodes := opts.Nodes
	if len(nodes) == 0 {
		nodes = []Node{{Name: probeNodeName}}
	}
	for _, n := range nodes {
		if err := c.CreateNode(ctx, n); err != nil {
			return c, err
		}
	}
	for _, n := range nodes {
		if err := c.WaitNodeReady(ctx, n.Name); err != nil {
			return c, err
		}
	}
	logger.Debug("nodes ready", "nodes", len(nodes), "after", time.Since(started))
	if len(opts.Nodes) == 0 {
		if err := c.client.CoreV1().Nodes().Delete(ctx, probeNodeName, metav1.DeleteOptions{}); err != nil {
			return c, fmt.Errorf("delete probe node: %w", err)
		}
	}
	if !opts.WithoutControllerManager {
		err := c.poll(ctx, "default service account", func(ctx context.Context) (bool, error) {
			_, err := c.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return c, err
		}
	}
	logger.Debug("lab cluster ready", "server", c.Server, "after", time.Since(started))
	return c, nil
}

func (o Options) validate() error {
	seen := map[string]bool{}
	for i, n := range o.Nodes {
		if n.Name == "" {
			return fmt.Errorf("options: Nodes[%d]: name is empty", i)
		}
		if seen[n.Name] {
			return fmt.Errorf("options: Nodes[%d]: name %q appears twice", i, n.Name)
		}
		seen[n.Name] = true
		for r, q := range n.Capacity {
			if _, err := resource.ParseQuantity(q); err != nil {
				return fmt.Errorf("options: node %s: capacity %s=%q: %w", n.Name, r, q, err)
			}
		}
	}
	for i, t := range o.Tokens {
		if t.Token == "" || t.User == "" {
			return fmt.Errorf("options: Tokens[%d]: token and user are required", i)
		}
		if strings.ContainsAny(t.Token+t.User+strings.Join(t.Groups, ""), ",\"\n") {
			return fmt.Errorf("options: Tokens[%d]: token, user and groups must not contain commas, quotes or newlines", i)
		}
	}
	if o.ReadyTimeout < 0 {
		return errors.New("options: ReadyTimeout is negative")
	}
	return nil
}

// clusterFiles are the paths writeFiles produced.
type clusterFiles struct {
	caCert, servingCert, servingKey, saKey, saPub, tokens, kubeconfig string
}

// writeFiles writes the PKI, token file and admin kubeconfig, and builds the
// admin client.
func (c *Cluster) writeFiles(opts Options) (clusterFiles, error) {
	pki := filepath.Join(c.Dir, "pki")
	var f clusterFiles
	ca, err := newAuthority("mcp-patch-lab-ca", filepath.Join(pki, "ca.crt"))
	if err != nil {
		return f, err
	}
	f.caCert = filepath.Join(pki, "ca.crt")
	c.CAFile = f.caCert
	f.servingCert, f.servingKey, err = ca.issue(certRequest{
		commonName: "kube-apiserver",
		dnsNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ips:        append([]net.IP{net.ParseIP(serviceClusterIP)}, loopbackIPs...),
		server:     true,
	}, filepath.Join(pki, "apiserver"))
	if err != nil {
		return f, err
	}
	if f.saKey, f.saPub, err = writeSigningKey(pki); err != nil {
		return f, err
	}

	c.AdminToken, err = randomToken()
	if err != nil {
		return f, err
	}
	tokens := append([]Token{{Token: c.AdminToken, User: AdminUser, Groups: []string{"system:masters"}}}, opts.Tokens...)
	var csv strings.Builder
	for _, t := range tokens {
		// token,user,uid,"group1,group2"
		fmt.Fprintf(&csv, "%s,%s,%s,\"%s\"\n", t.Token, t.User, t.User, strings.Join(t.Groups, ","))
	}
	f.tokens = filepath.Join(pki, "tokens.csv")
	if err := os.WriteFile(f.tokens, []byte(csv.String()), 0o600); err != nil {
		return f, fmt.Errorf("write token file: %w", err)
	}

	f.kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	c.Kubeconfig = f.kubeconfig
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: ca.certPEM}
	kc.AuthInfos[AdminUser] = &clientcmdapi.AuthInfo{Token: c.AdminToken}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: AdminUser, Namespace: metav1.NamespaceDefault}
	kc.CurrentContext = "lab"
	if err := clientcmd.WriteToFile(*kc, f.kubeconfig); err != nil {
		return f, fmt.Errorf("write admin kubeconfig: %w", err)
	}
	c.Config, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return f, fmt.Errorf("load admin kubeconfig: %w", err)
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if c.client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return f, fmt.Errorf("build admin client: %w", err)
	}
	// The dynamic client lists every resource the server serves (the
	// lab's settle check and reset), v1 Endpoints among them: their
	// deprecation warning says nothing about the lab, so it is not printed.
	dc := rest.CopyConfig(c.Config)
	dc.WarningHandler = rest.NoWarnings{}
	if c.dynamic, err = dynamic.NewForConfig(dc); err != nil {
		return f, fmt.Errorf("build admin dynamic client: %w", err)
	}
	return f, nil
}

func (c *Cluster) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := c.run("etcd", nil,
		"--name=lab",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+c.EtcdEndpoint,
		"--advertise-client-urls="+c.EtcdEndpoint,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=lab="+peer,
		// The data is thrown away with the cluster; fsync would only make
		// the shared disk the bottleneck.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	return c.poll(ctx, "etcd health", func(ctx context.Context) (bool, error) {
		if done, err := p.exited(); done {
			return false, p.exitError(err)
		}
		body, code, err := httpGet(ctx, http.DefaultClient, c.EtcdEndpoint+"/health", "")
		return err == nil && code == http.StatusOK && strings.Contains(body, `"health":"true"`), nil
	})
}

func (c *Cluster) startAPIServer(ctx context.Context, opts Options, f clusterFiles, port int) error {
	var etcdArgs []string
	if e := opts.Etcd; e != nil {
		etcdArgs = []string{
			"--etcd-servers=" + strings.Join(e.Endpoints(), ","),
			"--etcd-cafile=" + e.CAFile,
			"--etcd-certfile=" + e.APIServerCertFile,
			"--etcd-keyfile=" + e.APIServerKeyFile,
		}
	} else {
		etcdArgs = []string{"--etcd-servers=" + c.EtcdEndpoint}
	}
	args := append(etcdArgs,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		// The endpoint reconciler would publish the advertise address as the
		// kubernetes service's endpoint, and refuses a loopback one.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file="+f.servingCert,
		"--tls-private-key-file="+f.servingKey,
		"--client-ca-file="+f.caCert,
		"--token-auth-file="+f.tokens,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+f.saPub,
		"--service-account-signing-key-file="+f.saKey,
		"--service-cluster-ip-range="+serviceCIDR,
		"--allow-privileged=true",
		"--cert-dir="+filepath.Join(c.Dir, "pki"),
		"--profiling=false",
	)
	if opts.WithoutControllerManager {
		// Without the controller manager nobody creates the default service
		// account, and this plugin would refuse every pod.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	args = append(args, authorizationArgs()...)
	args = append(args, opts.APIServerFlags...)
	p, err := c.run("kube-apiserver", nil, args...)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(f.caCert)
	if err != nil {
		return fmt.Errorf("read lab CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	var last string
	err = c.poll(ctx, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		if done, err := p.exited(); done {
			return false, p.exitError(err)
		}
		body, code, err := httpGet(ctx, hc, c.Server+"/readyz", c.AdminToken)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("HTTP %d: %s", code, body)
		return code == http.StatusOK, nil
	})
	var exited *exitedError
	if err != nil && !errors.As(err, &exited) {
		return fmt.Errorf("%w (last answer: %s)", err, last)
	}
	return err
}

// run starts one component whose binary has the component's name.
func (c *Cluster) run(name string, env []string, args ...string) (*process, error) {
	p, err := startProcess(c.logger, name, c.Binaries.Path(name), args, env, filepath.Join(c.LogDir, name+".log"))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// Stop ends every component, newest first, and removes the cluster
// directory when Start created it. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.stopErrs
	}
	c.stopped = true
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		errs = append(errs, c.procs[i].stop())
	}
	if c.removeDir {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	c.stopErrs = errors.Join(errs...)
	if c.stopErrs != nil {
		c.stopErrs = fmt.Errorf("stop lab cluster: %w", c.stopErrs)
	}
	return c.stopErrs
}

// Client returns the admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Dynamic returns the admin dynamic client.
func (c *Cluster) Dynamic() dynamic.Interface { return c.dynamic }

// PIDs maps each running component to its process id.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, p := range c.procs {
		if done, _ := p.exited(); !done {
			out[p.name] = p.pid()
		}
	}
	return out
}

// MemoryBytes returns the resident set size of each running component.
func (c *Cluster) MemoryBytes() (map[string]int64, error) {
	out := map[string]int64{}
	for name, pid := range c.PIDs() {
		rss, err := rssBytes(pid)
		if err != nil {
			return nil, err
		}
		out[name] = rss
	}
	return out, nil
}

// LogTails returns the last n lines of every component log, for failure
// reports.
func (c *Cluster) LogTails(n int) string {
	c.mu.Lock()
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "==> %s <==\n%s\n", p.logPath, p.logTail(n))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// CreateNode creates a kwok node; it becomes Ready shortly after (see
// WaitNodeReady).
func (c *Cluster) CreateNode(ctx context.Context, n Node) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(defaultNodeCPU),
		corev1.ResourceMemory: resource.MustParse(defaultNodeMemory),
		corev1.ResourcePods:   resource.MustParse(defaultNodePods),
	}
	for r, q := range n.Capacity {
		qty, err := resource.ParseQuantity(q)
		if err != nil {
			return fmt.Errorf("create node %s: capacity %s=%q: %w", n.Name, r, q, err)
		}
		capacity[r] = qty
	}
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
	}
	for k, v := range n.Labels {
		labels[k] = v
	}
	annotations := map[string]string{KwokNodeAnnotation: KwokNodeAnnotationValue}
	for k, v := range n.Annotations {
		annotations[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: n.Taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
		},
	}
	if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	return nil
}

// WaitNodeReady waits until the node's Ready condition is True and the
// node.kubernetes.io/not-ready taint (set on every new node by admission) is
// gone, so pods can be scheduled there. The controller manager's node
// lifecycle controller removes that taint; a cluster started without it has
// WaitNodeReady remove the taint instead.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string) error {
	return c.poll(ctx, "node "+name+" Ready and untainted", func(ctx context.Context) (bool, error) {
		node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				ready = cond.Status == corev1.ConditionTrue
			}
		}
		if !ready {
			return false, nil
		}
		var keep []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				keep = append(keep, t)
			}
		}
		if len(keep) == len(node.Spec.Taints) {
			return true, nil
		}
		if c.noControllerManager {
			node.Spec.Taints = keep
			// A conflict only means someone else wrote first; try again.
			_, err := c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{FieldManager: fieldManager})
			if err != nil && !apierrors.IsConflict(err) {
				return false, fmt.Errorf("remove not-ready taint: %w", err)
			}
		}
		return false, nil
	})
}

// Kubectl runs the cluster's kubectl against the admin kubeconfig and
// returns its combined output; the first call may build kubectl (Kubectl).
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	bin, err := Kubectl(ctx, c.logger, c.Binaries)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+c.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// poll calls check every pollInterval until it reports done, returns an
// error, a component dies, or the cluster's ready timeout (or ctx) ends.
func (c *Cluster) poll(ctx context.Context, what string, check func(context.Context) (bool, error)) error {
	return pollUntil(ctx, c.readyWait, what, func(ctx context.Context) (bool, error) {
		if err := c.checkAlive(); err != nil {
			return false, err
		}
		return check(ctx)
	})
}

// checkAlive returns an error naming the first component that has exited,
// unless the cluster is being stopped.
func (c *Cluster) checkAlive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("the cluster is stopped")
	}
	for _, p := range c.procs {
		if done, err := p.exited(); done {
			return p.exitError(err)
		}
	}
	return nil
}

func pollUntil(ctx context.Context, limit time.Duration, what string, check func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		done, err := check(ctx)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// httpGet fetches url with an optional bearer token; each try is bounded.
func httpGet(ctx context.Context, hc *http.Client, url, token string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return string(body), resp.StatusCode, err
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// Holding all listeners until every port is chosen keeps them distinct.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("draw token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
