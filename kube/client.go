// Package kube is the Kubernetes side of mcp-patch: it loads clients the way
// kubectl does, takes the node inventory (control plane, GPU servers, SSH
// addresses, canary) and finds where the round-critical things live (the
// Postgres primaries, the API VIP holder, the canary).
//
// Its subpackages own the other cluster concerns: kube/drain (preview,
// cordon ownership, eviction), kube/gate (the checks that decide when the next
// node may start), kube/gpucheck (smoke pod and model completion) and
// kube/windowlock (the Lease that keeps two windows from running at once).
//
// This package reads the cluster and never changes it. It must not know about
// rounds, approvals, SSH or the intent repo; callers pass plain values in.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrContextNotFound is returned by Load when the requested kubeconfig
// context does not exist in the loaded files.
var ErrContextNotFound = errors.New("kubeconfig context not found")

// ErrNoConfig is returned by Load when no kubeconfig was found and the
// process does not run inside a cluster.
var ErrNoConfig = errors.New("no kubeconfig and not running in a cluster")

// ErrAPIUnreachable is returned by Load when the API server named by the
// configuration does not answer.
var ErrAPIUnreachable = errors.New("API server unreachable")

// LoadOptions say where the cluster credentials come from. The zero value
// follows kubectl: $KUBECONFIG (a path list), else ~/.kube/config, else the
// in-cluster service account, using the current context.
type LoadOptions struct {
	// Kubeconfig is an explicit kubeconfig path (kubectl's --kubeconfig).
	// Empty: $KUBECONFIG, then ~/.kube/config, then in-cluster.
	Kubeconfig string
	// Context picks a kubeconfig context (kubectl's --context). Empty: the
	// file's current-context.
	Context string
	// RequestTimeout bounds every API request made with the returned
	// clients. Zero: 30s.
	RequestTimeout time.Duration
	// PingTimeout bounds the reachability check Load makes. Zero: 10s.
	PingTimeout time.Duration
	// QPS and Burst are the client-side rate limit. Zero: 50 and 100, enough
	// for inventory of a few thousand nodes without throttling to a crawl.
	QPS   float32
	Burst int
}

// Clients are the handles every function in kube and its subpackages
// accepts. Build them with Load, or fill them from any rest.Config.
type Clients struct {
	Config  *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Context is the kubeconfig context in use; empty for in-cluster.
	Context string
	// Host is the API server URL.
	Host string
	// ServerVersion is the API server's gitVersion, read by the ping.
	ServerVersion string
}

// Load builds clients with kubectl's loading rules and proves the API server
// answers. A context that does not exist, a missing kubeconfig and an API
// server that is down each get an error naming what was tried.
func Load(ctx context.Context, opts LoadOptions) (*Clients, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: opts.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)

	sources := strings.Join(rules.GetLoadingPrecedence(), ", ")
	if opts.Kubeconfig != "" {
		sources = opts.Kubeconfig
	}
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig from %s: %w", sources, err)
	}
	contextName := raw.CurrentContext
	if opts.Context != "" {
		contextName = opts.Context
		if _, ok := raw.Contexts[opts.Context]; !ok {
			names := make([]string, 0, len(raw.Contexts))
			for n := range raw.Contexts {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("load kubeconfig from %s: context %q: %w (known contexts: %s)",
				sources, opts.Context, ErrContextNotFound, listOrNone(names))
		}
	}

	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, fmt.Errorf("load kubeconfig (looked in %s): %w", sources, ErrNoConfig)
		}
		return nil, fmt.Errorf("load kubeconfig from %s (context %q): %w", sources, contextName, err)
	}
	if len(raw.Contexts) == 0 {
		contextName = "" // in-cluster
	}
	return NewClients(ctx, cfg, contextName, opts)
}

// NewClients builds the clients from a ready rest.Config (tests, embedding)
// and pings the API server like Load does. The config is copied.
func NewClients(ctx context.Context, cfg *rest.Config, contextName string, opts LoadOptions) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = orDuration(opts.RequestTimeout, 30*time.Second)
	cfg.QPS = opts.QPS
	if cfg.QPS == 0 {
		cfg.QPS = 50
	}
	cfg.Burst = opts.Burst
	if cfg.Burst == 0 {
		cfg.Burst = 100
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build Kubernetes client for %s: %w", cfg.Host, err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build dynamic client for %s: %w", cfg.Host, err)
	}
	version, err := Ping(ctx, kc, orDuration(opts.PingTimeout, 10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to API server %s (context %q): %w", cfg.Host, contextName, err)
	}
	return &Clients{Config: cfg, Kube: kc, Dynamic: dc, Context: contextName, Host: cfg.Host, ServerVersion: version}, nil
}

// Ping asks the API server for its version within timeout and returns its
// gitVersion. A transport failure or a 5xx wraps ErrAPIUnreachable; an
// authentication or authorization failure is returned as it is.
func Ping(ctx context.Context, kc kubernetes.Interface, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rc := kc.Discovery().RESTClient()
	if rc == nil {
		// Fake clientsets have no REST client; nothing to ping.
		return "", nil
	}
	var status int
	body, err := rc.Get().AbsPath("/version").Do(ctx).StatusCode(&status).Raw()
	if err != nil {
		if status == http.StatusUnauthorized || status == http.StatusForbidden {
			return "", fmt.Errorf("read /version: credentials rejected (HTTP %d): %w", status, err)
		}
		return "", fmt.Errorf("%w: read /version: %w", ErrAPIUnreachable, err)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("read /version: %w", err)
	}
	return v.GitVersion, nil
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
