// Package config owns mcp-patch's one configuration struct: its defaults,
// validation, loading from a file, the environment and flags, and the JSON
// Schema published by `mcp-patch config schema`. It must not open
// connections or touch the hosts, the cluster or the intent repository.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/invopop/jsonschema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Duration is a time.Duration written as Go duration text ("90s", "48h").
type Duration time.Duration

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "90s"-style text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"90s\" or \"48h\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// JSONSchema describes Duration for invopop/jsonschema.
func (Duration) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Pattern: `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`,
		Description: "Go duration text, for example 90s, 5m or 48h"}
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Mode limits what the server offers.
type Mode string

// Modes.
const (
	ModeNormal             Mode = "normal"              // every tool; destructive ones need a signed approval
	ModeReadOnly           Mode = "read-only"           // only read-only tools are offered
	ModeDisableDestructive Mode = "disable-destructive" // destructive tools are listed but always refuse
)

// Config is the whole configuration. Zero values are replaced by
// DefaultConfig's before validation; units are in each field's comment.
type Config struct {
	// IntentRepo is the path of the intent repository's working copy (git).
	IntentRepo string `json:"intent_repo,omitempty" jsonschema:"description=Path of the intent repository working copy (env MCP_PATCH_INTENT_REPO)"`
	// Environment names the environment of the intent repository's
	// environments.yaml this server serves; empty: the repository has one
	// environment (no environments.yaml). A DNS-1123 label.
	Environment string `json:"environment,omitempty" jsonschema:"description=Environment of the intent repository's environments.yaml this server serves (empty: the repository has one environment; env MCP_PATCH_ENVIRONMENT)"`
	// Kubeconfig is an explicit kubeconfig path; empty follows kubectl's rules (KUBECONFIG, ~/.kube/config, in-cluster).
	Kubeconfig string `json:"kubeconfig,omitempty" jsonschema:"description=Kubeconfig path; empty follows kubectl's loading rules"`
	// Context is the kubeconfig context; empty means the current context.
	Context string `json:"context,omitempty" jsonschema:"description=Kubeconfig context; empty means the current one"`
	// StateDir holds the server's own state: used approval nonces, audit spill. Default ~/.local/state/mcp-patch.
	StateDir string `json:"state_dir,omitempty" jsonschema:"description=Server state directory (used approval nonces)"`
	// Identity names this server in the window Lease and cordon annotations. Default: hostname.
	Identity string `json:"identity,omitempty" jsonschema:"description=Server identity for the window lock and cordon records; default is the hostname"`
	// NodeName is the cluster node this server runs on: a server never
	// runs a destructive step on it (a drain would evict the server, a
	// reboot stop it mid-step); a leader hands leadership over instead.
	// In the cluster it comes from the downward API (spec.nodeName, env
	// MCP_PATCH_NODE_NAME); empty (the default) on an admin host that is
	// not a node. A Kubernetes node name (DNS-1123 subdomain).
	NodeName string `json:"node_name,omitempty" jsonschema:"description=Cluster node this server runs on; it never runs a destructive step on that node and a leader hands leadership over instead (env MCP_PATCH_NODE_NAME; set from spec.nodeName by the downward API in the cluster; empty on an admin host that is not a node)"`
	// Mode is normal, read-only or disable-destructive.
	Mode Mode `json:"mode,omitempty" jsonschema:"enum=normal,enum=read-only,enum=disable-destructive"`

	Serve     Serve     `json:"serve"`
	SSH       SSH       `json:"ssh"`
	Approvals Approvals `json:"approvals"`
	Git       Git       `json:"git"`
	Kube      Kube      `json:"kube"`
	Notify    Notify    `json:"notify"`
	Verify    Verify    `json:"verify"`
	// LeaderElection lets two or more servers of one cluster elect one
	// leader; off (the default), this server is the only one and acts
	// alone.
	LeaderElection LeaderElection `json:"leader_election"`
}

// LeaderElection configures the election of one leader among the servers
// of a cluster on a coordination.k8s.io Lease (client-go's leaderelection).
// Only the leader runs destructive steps, each fenced just before it acts;
// a follower answers read-only tools and refuses destructive ones, naming
// the leader. The Lease lives in kube.lease_namespace, beside the window
// Lease, and names this server by identity.
type LeaderElection struct {
	// Enabled turns the election on. Default false: one server.
	Enabled bool `json:"enabled,omitempty" jsonschema:"description=Elect one leader among the servers of this cluster; only the leader runs destructive steps (default false: this server acts alone)"`
	// LeaseName is the leader Lease in kube.lease_namespace. Default
	// mcp-patch-leader; never the window Lease's name.
	LeaseName string `json:"lease_name,omitempty" jsonschema:"description=Name of the leader Lease in kube.lease_namespace (default mcp-patch-leader)"`
	// LeaseDuration is how long a candidate waits, without seeing the
	// leader renew, before it takes the Lease over (whole seconds, the
	// Lease keeps seconds). Default 15s.
	LeaseDuration Duration `json:"lease_duration,omitempty"`
	// RenewDeadline is how long the leader keeps trying to renew before
	// it gives leadership up. Default 10s; shorter than lease_duration.
	RenewDeadline Duration `json:"renew_deadline,omitempty"`
	// RetryPeriod is the pause between attempts to take or renew the
	// Lease. Default 2s; renew_deadline must exceed 1.2 times it.
	RetryPeriod Duration `json:"retry_period,omitempty"`
}

// DefaultLeaderLease is the leader Lease's default name.
const DefaultLeaderLease = "mcp-patch-leader"

// windowLeaseName is kube/windowlock's Lease, which the leader Lease must
// not share.
const windowLeaseName = "mcp-patch-window"

// validate reports the election's problems through bad.
func (l LeaderElection) validate(bad func(field, format string, a ...any)) {
	for name, d := range map[string]Duration{"leader_election.lease_duration": l.LeaseDuration,
		"leader_election.renew_deadline": l.RenewDeadline, "leader_election.retry_period": l.RetryPeriod} {
		if d <= 0 {
			bad(name, "must be positive")
		}
	}
	if d := l.LeaseDuration.D(); d > 0 && (d < time.Second || d%time.Second != 0) {
		bad("leader_election.lease_duration", "%s is not a whole number of seconds (the Lease keeps seconds)", d)
	}
	if l.RenewDeadline > 0 && l.RenewDeadline >= l.LeaseDuration {
		bad("leader_election.renew_deadline", "%s is not shorter than leader_election.lease_duration %s: another server could take over while this one still leads", l.RenewDeadline.D(), l.LeaseDuration.D())
	}
	if l.RetryPeriod > 0 && float64(l.RenewDeadline) <= 1.2*float64(l.RetryPeriod) {
		bad("leader_election.retry_period", "%s is too long for leader_election.renew_deadline %s (it must exceed 1.2 retry periods)", l.RetryPeriod.D(), l.RenewDeadline.D())
	}
	if errs := validation.IsDNS1123Subdomain(l.LeaseName); len(errs) > 0 {
		bad("leader_election.lease_name", "%q is not a Lease name: %s", l.LeaseName, strings.Join(errs, "; "))
	}
	if l.LeaseName == windowLeaseName {
		bad("leader_election.lease_name", "%q is the window Lease: the leader needs a Lease of its own", l.LeaseName)
	}
}

// Serve configures the MCP transports.
type Serve struct {
	// HTTP is the listen address for streamable HTTP ("127.0.0.1:8765"); empty means stdio.
	HTTP string `json:"http,omitempty" jsonschema:"description=Listen address for streamable HTTP; empty serves stdio"`
	// TokenFile holds the bearer token HTTP clients must send.
	TokenFile string `json:"token_file,omitempty"`
	// TokenEnv names an environment variable holding the bearer token. Default MCP_PATCH_TOKEN.
	TokenEnv string `json:"token_env,omitempty"`
	// TLSCert and TLSKey enable HTTPS; both or neither. Required for a non-loopback address.
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
	// MemoryLimitMiB is a soft limit on the server's Go memory
	// (runtime/debug.SetMemoryLimit). Default 16; 0 turns it off.
	MemoryLimitMiB int `json:"memory_limit_mib,omitempty" jsonschema:"minimum=0,maximum=1048576,description=Soft limit on the server's Go memory in MiB (default 16; 0: none): the garbage collector collects more often near it, which keeps serve near 60 MiB resident at 1000 nodes; past it the server runs on with at most half its CPU in the collector, so raise it for fleets of several thousand nodes. The GOMEMLIMIT environment variable wins."`
	// MaxSessions caps the live MCP sessions of the HTTP server in all;
	// a new session past it closes the oldest idle one. A stateless
	// request (protocol 2026-07-28 and later) counts as a session while it
	// is in flight. Default 256; 0: no cap.
	MaxSessions int `json:"max_sessions,omitempty" jsonschema:"minimum=0,maximum=100000,description=Most live MCP sessions over HTTP in all (default 256; 0: no cap); a stateless request counts as one while in flight: a new session or stateless request past it closes the session idle the longest; one is refused (503) only while every session has a request in flight"`
	// MaxSessionsPerToken caps the live sessions of one bearer token,
	// its stateless requests in flight counted with them. Default 128;
	// 0: no cap.
	MaxSessionsPerToken int `json:"max_sessions_per_token,omitempty" jsonschema:"minimum=0,maximum=100000,description=Most live MCP sessions over HTTP for one bearer token (default 128; 0: no cap); a stateless request counts as one while in flight; past it the token's own session idle the longest is closed"`
	// SessionIdleMinutes closes an MCP session no request touched for
	// this many minutes. Default 30.
	SessionIdleMinutes int `json:"session_idle_minutes,omitempty" jsonschema:"minimum=1,maximum=10080,description=Minutes without a request after which an MCP session over HTTP is closed (default 30)"`
}

// SSH configures how hosts are reached.
type SSH struct {
	// User is the login user; non-root users run steps through sudo -n. Default root.
	User string `json:"user,omitempty" jsonschema:"description=Login user for every node (default root; anyone else runs the steps through sudo -n); the inventory file's defaults and nodes override it"`
	// Port is the default SSH port. Default 22.
	Port int `json:"port,omitempty" jsonschema:"minimum=1,maximum=65535,description=SSH port for every node (default 22); the inventory file's defaults and nodes override it"`
	// KnownHosts are OpenSSH known_hosts files; unknown or changed keys are refused. Default ~/.ssh/known_hosts.
	KnownHosts []string `json:"known_hosts,omitempty"`
	// KeyFiles are private keys to offer; the agent (SSH_AUTH_SOCK) is used as well when set.
	// When neither they, the inventory's identity_files nor ~/.ssh/config's
	// IdentityFile name a file, ssh's default identities (~/.ssh/id_rsa,
	// id_ecdsa, id_ed25519 ...) are tried.
	KeyFiles []string `json:"key_files,omitempty"`
	// OpenSSHConfig is the OpenSSH client configuration whose Host blocks
	// give each node the HostName, Port, User, IdentityFile, IdentityAgent and ProxyJump
	// the inventory leaves unsaid. Default ~/.ssh/config (none when it does
	// not exist); "none" reads none.
	OpenSSHConfig string `json:"openssh_config,omitempty" jsonschema:"description=OpenSSH client configuration read for each node's HostName; Port; User; IdentityFile; IdentityAgent and ProxyJump beneath the inventory (default ~/.ssh/config of the user mcp-patch runs as; none when missing; 'none' reads none). Match blocks and ProxyCommand are not followed"`
	// Jump is an optional bastion: the name of a node in the inventory file
	// (ssh.inventory) through whose SSH connection the nodes are reached.
	Jump string `json:"jump,omitempty" jsonschema:"description=Bastion for every node: the name of a node in the inventory file (ssh.inventory); an inventory entry's jump field overrides it and jump: - there connects directly"`
	// Inventory is a YAML file mapping node names to addresses, ports,
	// users, jump hosts, key files and host key aliases (examples/inventory.yaml,
	// docs/getting-started.md, "SSH inventory"). Each field: the node's own,
	// else the file's defaults, else ~/.ssh/config (OpenSSHConfig), else
	// this section's user, port and jump. Nodes it does not name are reached
	// at their InternalIP.
	Inventory string `json:"inventory,omitempty" jsonschema:"description=YAML file mapping node names to SSH targets: 'defaults' (user; port; jump; identity_files) and 'nodes' (NAME: address; port; user; jump; identity_files; host_key_alias). A node's own field wins; then the file's defaults; then ~/.ssh/config (ssh.openssh_config); then ssh.user / ssh.port / ssh.jump. Cluster nodes it does not name are reached at their InternalIP. See examples/inventory.yaml and docs/getting-started.md (SSH inventory)"`
	// Concurrency bounds fan-out across hosts. Default 50.
	Concurrency int `json:"concurrency,omitempty" jsonschema:"minimum=1,maximum=1000"`
	// DialTimeout bounds a connection attempt. Default 10s.
	DialTimeout Duration `json:"dial_timeout,omitempty"`
	// CommandTimeout bounds one host step. Default 10m.
	CommandTimeout Duration `json:"command_timeout,omitempty"`
	// RebootTimeout bounds how long a trial boot waits for the host before it calls for console access. Default 15m.
	RebootTimeout Duration `json:"reboot_timeout,omitempty"`
	// DpkgLockTimeout is how long download, install and autoremove wait for another apt or dpkg holding dpkg's lock before refusing with the holder's pid and command (the holder is never touched). Default 2m, at most 2h.
	DpkgLockTimeout Duration `json:"dpkg_lock_timeout,omitempty"`
}

// Approvals configures signed approvals.
type Approvals struct {
	// AllowedSigners is the allowed_signers file (git's format) listing who may approve.
	AllowedSigners string `json:"allowed_signers,omitempty"`
	// TTL is how long an approval request the server issues stays valid.
	// Default 30m; at most MaxLifetime.
	TTL Duration `json:"ttl,omitempty"`
	// MaxLifetime is the longest an approval or statement may be valid,
	// from the issue time signed in it to its expiry. Longer ones are
	// refused whenever they are presented (early or late), and so are issue
	// times in the future; `mcp-patch approve` refuses to sign them.
	// Default 24h; at most 168h (7 days).
	// NonceConfigMap is the ConfigMap, in kube.lease_namespace, where every
	// server records the nonces of used approvals and statements, so that
	// none is used twice in the cluster. Default mcp-patch-used-nonces.
	NonceConfigMap string   `json:"nonce_configmap,omitempty" jsonschema:"description=ConfigMap (in kube.lease_namespace) holding used approval nonces for every server of the cluster"`
	MaxLifetime    Duration `json:"max_lifetime,omitempty" jsonschema:"description=Longest validity of a signed approval or statement from its issue time (default 24h; at most 168h)"`
	// AllowLabOnly accepts keys whose allowed_signers line is labelled
	// lab-only. Only the lab sets it; production refuses them.
	AllowLabOnly bool `json:"allow_lab_only,omitempty"`
	// Inbox is the directory where the server leaves each approval request
	// it issues, and its round's status, for `mcp-patch approvals`; a
	// person's approval signed from there (`mcp-patch approve ID`) is
	// picked up at the step's next call. The servers of several
	// environments on one admin host name one directory here, so one
	// inbox lists them all. Default <state_dir>/inbox.
	Inbox string `json:"inbox,omitempty" jsonschema:"description=Directory of pending approval requests, shared by the servers of every environment (default <state_dir>/inbox)"`
}

// Verify configures how the intent repository's verify.sh scripts run. The
// intent repository is trusted code: its scripts run as the server's user.
type Verify struct {
	// PassEnv names the variables of the server's environment a verify.sh
	// sees besides PATH, HOME and LANG; nothing else of it reaches the
	// script. Default [KUBECONFIG].
	PassEnv []string `json:"pass_env,omitempty" jsonschema:"description=Environment variables passed to verify.sh besides PATH/HOME/LANG (default KUBECONFIG)"`
	// InReadOnly lets verify.sh run when the server is --read-only. Off by
	// default: a script is code the read-only promise cannot vouch for.
	InReadOnly bool `json:"in_read_only,omitempty" jsonschema:"description=Run verify.sh even in read-only mode (default false)"`
}

// Git configures how findings are committed to the intent repository.
type Git struct {
	AuthorName  string `json:"author_name,omitempty"`
	AuthorEmail string `json:"author_email,omitempty"`
	// Branch is the working branch; default mcp-patch/round-<round id>. Never a protected branch.
	Branch string `json:"branch,omitempty"`
	// Protected branches are never committed to. Default main, master.
	Protected []string `json:"protected,omitempty"`
	// Remote, when set, is pushed to after each commit (over SSH, known_hosts checked).
	Remote string `json:"remote,omitempty"`
	// PushRequired: no destructive step runs past a record of the round
	// that is not on Remote. Before each one the working branch is pushed
	// (a no-op when the remote has it); a push that fails refuses the
	// step, and every answer says the record is not pushed. Implied by
	// leader_election: another server resumes from what the remote holds.
	PushRequired bool `json:"push_required,omitempty" jsonschema:"description=Refuse destructive steps while the round's record is not pushed to git.remote (implied by leader_election.enabled)"`
}

// PushRequired says whether destructive steps wait for the round's record
// to be on git.remote (git.push_required, or leader election).
func (c *Config) PushRequired() bool {
	return c.Git.Remote != "" && (c.Git.PushRequired || c.LeaderElection.Enabled)
}

// Kube configures the Kubernetes side.
type Kube struct {
	// LeaseNamespace holds the window lock Lease. Default kube-system.
	LeaseNamespace string `json:"lease_namespace,omitempty"`
	// LeaseDuration is how long one renewal of the window Lease holds (its
	// leaseDurationSeconds, so whole seconds): another server may take the
	// window once it lapses, and nothing destructive starts unless the
	// Lease was renewed within it. Default 60s.
	LeaseDuration Duration `json:"lease_duration,omitempty"`
	// LeaseRenew is the period between renewals of the window Lease while
	// this server holds a window; a renewal that keeps failing until the
	// Lease would lapse stops the window. Default 20s; shorter than
	// lease_duration.
	LeaseRenew Duration `json:"lease_renew,omitempty"`
	// EtcdEndpoints, when set, are dialled directly for the etcd gate; else through SSH to control-plane nodes.
	EtcdEndpoints []string `json:"etcd_endpoints,omitempty"`
	// EtcdCA, EtcdCert, EtcdKey are client TLS files for etcd (kubeadm's healthcheck-client).
	EtcdCA   string `json:"etcd_ca,omitempty"`
	EtcdCert string `json:"etcd_cert,omitempty"`
	EtcdKey  string `json:"etcd_key,omitempty"`
	// DrainTimeout bounds one drain. Default 10m.
	DrainTimeout Duration `json:"drain_timeout,omitempty"`
	// EvictRetry is the pause between eviction retries blocked by a PDB. Default 5s; never zero.
	EvictRetry Duration `json:"evict_retry,omitempty"`
	// SmokeImage runs the GPU smoke pod; it needs the CUDA user-space tools.
	SmokeImage string `json:"smoke_image,omitempty"`
	// GateSettle is how long a red gate may be waited on (answering
	// in_progress) before it fails and stops the round. Default 5m.
	GateSettle Duration `json:"gate_settle,omitempty"`
	// OIDCCAFile is a PEM bundle trusted when fetching the OIDC issuer's
	// discovery document (besides the system roots).
	OIDCCAFile string `json:"oidc_ca_file,omitempty"`
	// PrometheusURL or AlertmanagerURL (one, or neither) adds the alert
	// check to the gate: red while alerts the intent's alerts section
	// counts fire. Base URL, without /api.
	PrometheusURL   string `json:"prometheus_url,omitempty"`
	AlertmanagerURL string `json:"alertmanager_url,omitempty"`
	// AlertsTokenFile holds a bearer token sent to Prometheus/Alertmanager.
	AlertsTokenFile string `json:"alerts_token_file,omitempty"`
	// EtcdTunnel reaches each control-plane node's etcd (127.0.0.1:2379)
	// through SSH instead of dialling etcd_endpoints directly.
	EtcdTunnel bool `json:"etcd_tunnel,omitempty"`
}

// Notify configures the webhooks that tell people what the round needs.
type Notify struct {
	Webhooks []Webhook `json:"webhooks,omitempty"`
}

// NotifyEvents are the event names a webhook may subscribe to.
var NotifyEvents = []string{"approval_needed", "round_stopped", "window_closed", "node_rolled_back", "round_closed"}

// Webhook is one receiver. Exactly one of URL, URLFile and URLEnv is set
// (a Slack webhook URL is a secret: prefer the file or the environment).
type Webhook struct {
	// Name identifies the hook in the journal and the metrics.
	Name string `json:"name" jsonschema:"required"`
	// Format is json (the event as JSON) or slack (a Slack-compatible {"text": ...}). Default json.
	Format  string `json:"format,omitempty" jsonschema:"enum=json,enum=slack"`
	URL     string `json:"url,omitempty"`
	URLFile string `json:"url_file,omitempty"`
	URLEnv  string `json:"url_env,omitempty"`
	// HMACSecretFile or HMACSecretEnv, when set, signs each body (header X-Mcp-Patch-Signature).
	HMACSecretFile string `json:"hmac_secret_file,omitempty"`
	HMACSecretEnv  string `json:"hmac_secret_env,omitempty"`
	// Events limits the hook to these events; empty means every event.
	Events []string `json:"events,omitempty"`
	// Timeout bounds one attempt. Default 10s.
	Timeout Duration `json:"timeout,omitempty"`
	// Attempts bounds the tries of one delivery. Default 4.
	Attempts int `json:"attempts,omitempty" jsonschema:"minimum=1,maximum=20"`
	// Backoff is the pause after the first failed try, doubled after each. Default 2s.
	Backoff Duration `json:"backoff,omitempty"`
}

// WithDefaults returns w with its zero values replaced by the defaults.
func (w Webhook) WithDefaults() Webhook {
	if w.Format == "" {
		w.Format = "json"
	}
	if w.Timeout == 0 {
		w.Timeout = Duration(10 * time.Second)
	}
	if w.Attempts == 0 {
		w.Attempts = 4
	}
	if w.Backoff == 0 {
		w.Backoff = Duration(2 * time.Second)
	}
	return w
}

func (n Notify) validate(bad func(field, format string, a ...any)) {
	names := map[string]bool{}
	for i, raw := range n.Webhooks {
		w := raw.WithDefaults()
		f := fmt.Sprintf("notify.webhooks[%d]", i)
		if w.Name == "" {
			bad(f+".name", "must not be empty")
		} else if names[w.Name] {
			bad(f+".name", "%q is used twice", w.Name)
		}
		names[w.Name] = true
		if w.Format != "json" && w.Format != "slack" {
			bad(f+".format", "%q is not json or slack", w.Format)
		}
		set := 0
		for _, v := range []string{w.URL, w.URLFile, w.URLEnv} {
			if v != "" {
				set++
			}
		}
		if set != 1 {
			bad(f+".url", "set exactly one of url, url_file and url_env")
		}
		if w.URL != "" {
			if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(f+".url", "is not an http or https URL")
			}
		}
		if w.HMACSecretFile != "" && w.HMACSecretEnv != "" {
			bad(f+".hmac_secret_file/hmac_secret_env", "set one or neither")
		}
		for _, e := range w.Events {
			if !slices.Contains(NotifyEvents, e) {
				bad(f+".events", "%q is not one of %s", e, strings.Join(NotifyEvents, ", "))
			}
		}
		if w.Timeout <= 0 || w.Backoff <= 0 {
			bad(f+".timeout/backoff", "must be positive")
		}
		if w.Attempts < 1 || w.Attempts > 20 {
			bad(f+".attempts", "%d is not 1-20", w.Attempts)
		}
	}
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// MaxApprovalLifetime is the most approvals.max_lifetime may be.
const MaxApprovalLifetime = 7 * 24 * time.Hour

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	home, _ := os.UserHomeDir()
	host, _ := os.Hostname()
	return Config{
		StateDir: filepath.Join(home, ".local", "state", "mcp-patch"),
		Identity: host,
		Mode:     ModeNormal,
		Serve:    Serve{TokenEnv: "MCP_PATCH_TOKEN", MemoryLimitMiB: 16, MaxSessions: 256, MaxSessionsPerToken: 128, SessionIdleMinutes: 30},
		SSH: SSH{
			User: "root", Port: 22,
			KnownHosts:      []string{filepath.Join(home, ".ssh", "known_hosts")},
			Concurrency:     50,
			DialTimeout:     Duration(10 * time.Second),
			CommandTimeout:  Duration(10 * time.Minute),
			RebootTimeout:   Duration(15 * time.Minute),
			DpkgLockTimeout: Duration(2 * time.Minute),
		},
		Approvals: Approvals{TTL: Duration(30 * time.Minute), MaxLifetime: Duration(24 * time.Hour), NonceConfigMap: "mcp-patch-used-nonces"},
		Git:       Git{AuthorName: "mcp-patch", AuthorEmail: "mcp-patch@localhost", Protected: []string{"main", "master"}},
		Verify:    Verify{PassEnv: []string{"KUBECONFIG"}},
		Kube: Kube{LeaseNamespace: "kube-system", LeaseDuration: Duration(60 * time.Second), LeaseRenew: Duration(20 * time.Second), DrainTimeout: Duration(10 * time.Minute), EvictRetry: Duration(5 * time.Second),
			SmokeImage: "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", GateSettle: Duration(5 * time.Minute)},
		LeaderElection: LeaderElection{LeaseName: DefaultLeaderLease, LeaseDuration: Duration(15 * time.Second),
			RenewDeadline: Duration(10 * time.Second), RetryPeriod: Duration(2 * time.Second)},
	}
}

// Load reads a YAML or JSON config file over the defaults. Unknown fields are errors.
func Load(path string) (Config, error) {
	c := DefaultConfig()
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("parse config %s: %w", path, err)
	}
	return c, nil
}

// ApplyEnv overrides fields from the environment (getenv is injected).
func (c *Config) ApplyEnv(getenv func(string) string) {
	if v := getenv("MCP_PATCH_INTENT_REPO"); v != "" {
		c.IntentRepo = v
	}
	if v := getenv("MCP_PATCH_ENVIRONMENT"); v != "" {
		c.Environment = v
	}
	if v := getenv("MCP_PATCH_NODE_NAME"); v != "" {
		c.NodeName = v
	}
	if v := getenv("MCP_PATCH_STATE_DIR"); v != "" {
		c.StateDir = v
	}
	if v := getenv("MCP_PATCH_ALLOWED_SIGNERS"); v != "" {
		c.Approvals.AllowedSigners = v
	}
	if v := getenv("MCP_PATCH_INBOX"); v != "" {
		c.Approvals.Inbox = v
	}
}

// InboxDir is the approvals inbox: approvals.inbox, or <state_dir>/inbox.
func (c *Config) InboxDir() string {
	if c.Approvals.Inbox != "" {
		return c.Approvals.Inbox
	}
	if c.StateDir == "" {
		return ""
	}
	return filepath.Join(c.StateDir, "inbox")
}

// Validate reports every problem, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("config %s: %s", field, fmt.Sprintf(format, a...)))
	}
	switch c.Mode {
	case ModeNormal, ModeReadOnly, ModeDisableDestructive:
	default:
		bad("mode", "%q is not normal, read-only or disable-destructive", c.Mode)
	}
	if c.Environment != "" {
		if msgs := validation.IsDNS1123Label(c.Environment); len(msgs) > 0 {
			bad("environment", "%q is not an environment name (a DNS-1123 label): %s", c.Environment, strings.Join(msgs, "; "))
		}
	}
	if (c.Serve.TLSCert == "") != (c.Serve.TLSKey == "") {
		bad("serve.tls_cert/tls_key", "set both or neither")
	}
	if c.Serve.HTTP != "" {
		if _, _, err := net.SplitHostPort(c.Serve.HTTP); err != nil {
			bad("serve.http", "%q is not host:port: %v", c.Serve.HTTP, err)
		}
	}
	if c.Serve.MemoryLimitMiB < 0 || c.Serve.MemoryLimitMiB > 1<<20 {
		bad("serve.memory_limit_mib", "%d is out of range (0 to 1048576; 0: no limit)", c.Serve.MemoryLimitMiB)
	}
	if c.Serve.MaxSessions < 0 || c.Serve.MaxSessions > 100000 {
		bad("serve.max_sessions", "%d is out of range (0 to 100000; 0: no cap)", c.Serve.MaxSessions)
	}
	if c.Serve.MaxSessionsPerToken < 0 || c.Serve.MaxSessionsPerToken > 100000 {
		bad("serve.max_sessions_per_token", "%d is out of range (0 to 100000; 0: no cap)", c.Serve.MaxSessionsPerToken)
	}
	if c.Serve.SessionIdleMinutes < 1 || c.Serve.SessionIdleMinutes > 10080 {
		bad("serve.session_idle_minutes", "%d is out of range (1 to 10080 minutes)", c.Serve.SessionIdleMinutes)
	}
	if c.SSH.Port < 1 || c.SSH.Port > 65535 {
		bad("ssh.port", "%d is out of range", c.SSH.Port)
	}
	if c.SSH.Concurrency < 1 {
		bad("ssh.concurrency", "must be at least 1")
	}
	for name, d := range map[string]Duration{"ssh.dial_timeout": c.SSH.DialTimeout, "ssh.command_timeout": c.SSH.CommandTimeout,
		"ssh.reboot_timeout": c.SSH.RebootTimeout, "ssh.dpkg_lock_timeout": c.SSH.DpkgLockTimeout, "approvals.ttl": c.Approvals.TTL, "approvals.max_lifetime": c.Approvals.MaxLifetime,
		"kube.drain_timeout": c.Kube.DrainTimeout, "kube.evict_retry": c.Kube.EvictRetry,
		"kube.lease_duration": c.Kube.LeaseDuration, "kube.lease_renew": c.Kube.LeaseRenew} {
		if d <= 0 {
			bad(name, "must be positive")
		}
	}
	if d := c.Kube.LeaseDuration.D(); d > 0 && (d < time.Second || d%time.Second != 0) {
		bad("kube.lease_duration", "%s is not a whole number of seconds (the Lease keeps seconds)", d)
	}
	if c.Kube.LeaseRenew > 0 && c.Kube.LeaseRenew >= c.Kube.LeaseDuration {
		bad("kube.lease_renew", "%s is not shorter than kube.lease_duration %s: the Lease would lapse between renewals", c.Kube.LeaseRenew.D(), c.Kube.LeaseDuration.D())
	}
	if c.SSH.DpkgLockTimeout.D() > 2*time.Hour {
		bad("ssh.dpkg_lock_timeout", "%s is longer than 2h", c.SSH.DpkgLockTimeout.D())
	}
	for i, name := range c.Verify.PassEnv {
		switch {
		case !envNameRE.MatchString(name):
			bad(fmt.Sprintf("verify.pass_env[%d]", i), "%q is not an environment variable name", name)
		case name == "MCP_PATCH_COMPONENT" || name == "MCP_PATCH_INTENT_DIR":
			bad(fmt.Sprintf("verify.pass_env[%d]", i), "%s is set by run_verify itself", name)
		}
	}
	if errs := validation.IsDNS1123Subdomain(c.Approvals.NonceConfigMap); len(errs) > 0 {
		bad("approvals.nonce_configmap", "%q is not a ConfigMap name: %s", c.Approvals.NonceConfigMap, strings.Join(errs, "; "))
	}
	if c.Approvals.MaxLifetime.D() > MaxApprovalLifetime {
		bad("approvals.max_lifetime", "%s is longer than %s; approvals are meant to be fresh", c.Approvals.MaxLifetime.D(), MaxApprovalLifetime)
	}
	if c.Approvals.MaxLifetime > 0 && c.Approvals.TTL > c.Approvals.MaxLifetime {
		bad("approvals.ttl", "%s is longer than approvals.max_lifetime %s: the server would issue requests it refuses", c.Approvals.TTL.D(), c.Approvals.MaxLifetime.D())
	}
	if c.Approvals.TTL > 0 && c.Approvals.TTL.D() < time.Minute {
		bad("approvals.ttl", "%s is shorter than a minute: nobody can read and sign a request that fast", c.Approvals.TTL.D())
	}
	if c.Git.PushRequired && c.Git.Remote == "" {
		bad("git.push_required", "needs git.remote: the record is pushed there before each destructive step")
	}
	for _, p := range c.Git.Protected {
		if p == c.Git.Branch && p != "" {
			bad("git.branch", "%q is a protected branch", p)
		}
	}
	if strings.TrimSpace(c.Identity) == "" {
		bad("identity", "must not be empty")
	}
	if c.NodeName != "" {
		if msgs := validation.IsDNS1123Subdomain(c.NodeName); len(msgs) > 0 {
			bad("node_name", "%q is not a Kubernetes node name (a DNS-1123 subdomain): %s", c.NodeName, strings.Join(msgs, "; "))
		}
	}
	c.Notify.validate(bad)
	c.LeaderElection.validate(bad)
	if c.Kube.PrometheusURL != "" && c.Kube.AlertmanagerURL != "" {
		bad("kube.prometheus_url/alertmanager_url", "set one or neither: the gate reads alerts from one place")
	}
	for f, v := range map[string]string{"kube.prometheus_url": c.Kube.PrometheusURL, "kube.alertmanager_url": c.Kube.AlertmanagerURL} {
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(f, "%q is not an http or https URL", v)
		}
	}
	return errors.Join(errs...)
}

// Schema returns the JSON Schema of the config file.
func Schema() ([]byte, error) {
	r := &jsonschema.Reflector{DoNotReference: true, AllowAdditionalProperties: false, RequiredFromJSONSchemaTags: true}
	s := r.Reflect(&Config{})
	s.ID = "https://mcp-patch.invalid/config.schema.json"
	s.Title = "mcp-patch configuration"
	return json.MarshalIndent(s, "", "  ")
}
