package world

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// Role is what a lab host is in the cluster.
type Role string

// Host roles.
const (
	RoleControlPlane Role = "control-plane"
	RoleGPU          Role = "gpu"
)

// Host is one lab host that becomes a Node of the same name.
type Host struct {
	// Name is the host and node name (cp-1, gpu-canary-1, gpu-3 ...).
	Name string
	Role Role
	// Canary marks the GPU server that carries the canary label.
	Canary bool
	// Kernel is the kernel the host runs at Setup, reported as the Node's
	// kernelVersion. Empty: DefaultKernel.
	Kernel string
}

// HostProbe reports whether a host is up (booted, its kubelet would be
// running) and the kernel it booted ("" when unknown). The World polls it
// every TickInterval; package fromfleet makes them from a lab fleet.
type HostProbe func() (up bool, kernel string)

// Names are the namespaces and object names the World creates. The zero
// value of each field takes the default named beside it, which is what the
// sample intent repository (examples/intent) says.
type Names struct {
	// PostgresNamespace and PostgresCluster: postgres.namespace and
	// postgres.cluster ("databases", "platform-pg").
	PostgresNamespace, PostgresCluster string
	// CNPGNamespace holds the CloudNativePG operator Deployment
	// ("cnpg-system", Deployment "cnpg-controller-manager").
	CNPGNamespace string
	// WebhookNamespace, WebhookDeployment and WebhookConfiguration:
	// webhook.namespace, webhook.deployment, webhook.configuration
	// ("platform-admission", "policy-webhook", "policy-webhook"); the Service
	// has the Deployment's name.
	WebhookNamespace, WebhookDeployment, WebhookConfiguration string
	// GPUOperatorNamespace holds the device-plugin DaemonSet
	// ("gpu-operator", DaemonSet "nvidia-device-plugin-daemonset").
	GPUOperatorNamespace string
	// ModelNamespace and ModelName: the model Deployment and its Service, as
	// in gpu.model_endpoint.url ("inference", "llm-smoke").
	ModelNamespace, ModelName string
	// ModelID is the model name the endpoint serves (gpu.model_endpoint.model,
	// "smoke").
	ModelID string
	// ModelPort is the Service port (8000).
	ModelPort int
	// VIPLeaseNamespace and VIPLeaseName: control_plane.vip_lease
	// ("kube-system", "plndr-cp-lock").
	VIPLeaseNamespace, VIPLeaseName string
	// CanaryLabel is gpu.canary_label ("platform.example.com/patch-canary=true").
	CanaryLabel string
	// GPUNodeLabel is gpu.node_label ("nvidia.com/gpu.present=true").
	GPUNodeLabel string
	// WorkloadNamespace holds the lab's fault workloads that stand for other
	// teams' jobs (the GPU fillers, the PDB-guarded app): "workloads", not a
	// critical namespace.
	WorkloadNamespace string
}

// Defaults of Names, from examples/intent.
const (
	DefaultPostgresNamespace    = "databases"
	DefaultPostgresCluster      = "platform-pg"
	DefaultCNPGNamespace        = "cnpg-system"
	DefaultWebhookNamespace     = "platform-admission"
	DefaultWebhookDeployment    = "policy-webhook"
	DefaultWebhookConfiguration = "policy-webhook"
	DefaultGPUOperatorNamespace = "gpu-operator"
	DefaultModelNamespace       = "inference"
	DefaultModelName            = "llm-smoke"
	DefaultModelID              = "smoke"
	DefaultModelPort            = 8000
	DefaultVIPLeaseNamespace    = "kube-system"
	DefaultVIPLeaseName         = "plndr-cp-lock"
	DefaultCanaryLabel          = "platform.example.com/patch-canary=true"
	DefaultGPUNodeLabel         = "nvidia.com/gpu.present=true"
	DefaultWorkloadNamespace    = "workloads"

	// DefaultKernel is the kernel a Node reports when its Host names none.
	DefaultKernel = "5.15.0-119-generic"
	// OSImage is what every Node reports as its OS.
	OSImage = "Ubuntu 22.04.4 LTS"
	// KubeletVersion is what every Node reports as its kubelet.
	KubeletVersion = "v1.37.2"
)

func (n Names) withDefaults() Names {
	set := func(p *string, def string) {
		if *p == "" {
			*p = def
		}
	}
	set(&n.PostgresNamespace, DefaultPostgresNamespace)
	set(&n.PostgresCluster, DefaultPostgresCluster)
	set(&n.CNPGNamespace, DefaultCNPGNamespace)
	set(&n.WebhookNamespace, DefaultWebhookNamespace)
	set(&n.WebhookDeployment, DefaultWebhookDeployment)
	set(&n.WebhookConfiguration, DefaultWebhookConfiguration)
	set(&n.GPUOperatorNamespace, DefaultGPUOperatorNamespace)
	set(&n.ModelNamespace, DefaultModelNamespace)
	set(&n.ModelName, DefaultModelName)
	set(&n.ModelID, DefaultModelID)
	set(&n.VIPLeaseNamespace, DefaultVIPLeaseNamespace)
	set(&n.VIPLeaseName, DefaultVIPLeaseName)
	set(&n.CanaryLabel, DefaultCanaryLabel)
	set(&n.GPUNodeLabel, DefaultGPUNodeLabel)
	set(&n.WorkloadNamespace, DefaultWorkloadNamespace)
	if n.ModelPort == 0 {
		n.ModelPort = DefaultModelPort
	}
	return n
}

// Options configure Setup.
type Options struct {
	// Cluster is the started lab control plane. Required.
	Cluster *cluster.Cluster
	// Hosts are the lab hosts: at least one control-plane host. Their order
	// is kept: the i-th control-plane host runs etcd member i.
	Hosts []Host
	// Etcd is the lab's multi-member etcd standing for the control-plane
	// hosts' etcd (member i ↔ i-th control-plane host). Nil: no etcd
	// members are stopped or started, and the etcd mirror pods stay Ready.
	Etcd *cluster.EtcdCluster
	// Probes report each host's power, by host name; the World polls them
	// every TickInterval. Hosts without a probe are up unless SetHostUp says
	// otherwise.
	Probes map[string]HostProbe
	// PrimaryNode is the control-plane host that holds the Postgres primary
	// and the API VIP at Setup. Empty: the last control-plane host (the one
	// the round patches last).
	PrimaryNode string
	// Names of namespaces and objects. Zero fields take the intent's names.
	Names Names
	// PostgresInstances is the CNPG Cluster's spec.instances, one instance
	// per control-plane host in host order. Zero: 3 (at most the number of
	// control-plane hosts).
	PostgresInstances int
	// GPUsPerServer is each GPU server's nvidia.com/gpu capacity. Zero: 8.
	GPUsPerServer int
	// ModelGPUs is how many GPUs the model pod on each GPU server requests;
	// the rest stay free for the GPU smoke pod. Zero: half of GPUsPerServer.
	ModelGPUs int
	// WebhookReplicas is the webhook Deployment's replicas. Zero: 2.
	WebhookReplicas int
	// SwitchoverDelay is how long a CNPG switchover or failover stays "in
	// progress" before the new primary takes over. Zero: 2s.
	SwitchoverDelay time.Duration
	// VIPLeaseDuration is the kube-vip Lease's leaseDurationSeconds; the
	// holder renews it every third of it, and another control-plane node
	// takes it over once it has expired while its holder is down. Zero: 15s.
	VIPLeaseDuration time.Duration
	// TickInterval is how often the World polls the probes and re-checks
	// timed transitions besides reacting to cluster events. Zero: 250ms.
	TickInterval time.Duration
	// BackupAge is how old the CNPG Cluster's lastSuccessfulBackup is said
	// to be. Zero: 1h.
	BackupAge time.Duration
	// RestartsOnReboot makes a rebooted host's pods that stayed on it
	// (DaemonSet pods, static-pod mirrors) count one container restart, as
	// a real kubelet reports after a reboot. False: restart counts stay.
	RestartsOnReboot bool
	// ModelAddr is the loopback address the completion endpoint listens on.
	// Empty: 127.0.0.1 on a free port.
	ModelAddr string
	// ReadyTimeout bounds Setup's waits (nodes Ready, workloads running).
	// Zero: 6 minutes (a loaded 2-core machine has taken over 3 to run
	// a reset lab's workloads).
	ReadyTimeout time.Duration
	// Logger receives the World's events (switchovers, hosts going down,
	// faults). Nil: discarded.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.Names = o.Names.withDefaults()
	if o.PrimaryNode == "" {
		for _, h := range o.Hosts {
			if h.Role == RoleControlPlane {
				o.PrimaryNode = h.Name
			}
		}
	}
	if o.PostgresInstances == 0 {
		o.PostgresInstances = min(3, len(o.controlPlanes()))
	}
	if o.GPUsPerServer == 0 {
		o.GPUsPerServer = 8
	}
	if o.ModelGPUs == 0 {
		o.ModelGPUs = o.GPUsPerServer / 2
	}
	if o.WebhookReplicas == 0 {
		o.WebhookReplicas = 2
	}
	if o.SwitchoverDelay == 0 {
		o.SwitchoverDelay = 2 * time.Second
	}
	if o.VIPLeaseDuration == 0 {
		o.VIPLeaseDuration = 15 * time.Second
	}
	if o.TickInterval == 0 {
		o.TickInterval = 250 * time.Millisecond
	}
	if o.BackupAge == 0 {
		o.BackupAge = time.Hour
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 6 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) controlPlanes() []Host {
	var out []Host
	for _, h := range o.Hosts {
		if h.Role == RoleControlPlane {
			out = append(out, h)
		}
	}
	return out
}

func (o Options) gpuServers() []Host {
	var out []Host
	for _, h := range o.Hosts {
		if h.Role == RoleGPU {
			out = append(out, h)
		}
	}
	return out
}

// validate checks options after defaults.
func (o Options) validate() error {
	if o.Cluster == nil {
		return errors.New("world options: Cluster is required")
	}
	cps := o.controlPlanes()
	if len(cps) == 0 {
		return errors.New("world options: Hosts: at least one control-plane host is required")
	}
	seen := map[string]bool{}
	canaries := 0
	for i, h := range o.Hosts {
		switch {
		case h.Name == "":
			return fmt.Errorf("world options: Hosts[%d]: name is empty", i)
		case seen[h.Name]:
			return fmt.Errorf("world options: Hosts[%d]: name %q appears twice", i, h.Name)
		case h.Role != RoleControlPlane && h.Role != RoleGPU:
			return fmt.Errorf("world options: host %s: role %q: want %q or %q", h.Name, h.Role, RoleControlPlane, RoleGPU)
		case h.Canary && h.Role != RoleGPU:
			return fmt.Errorf("world options: host %s: only a GPU server can be the canary", h.Name)
		}
		seen[h.Name] = true
		if h.Canary {
			canaries++
		}
	}
	if canaries > 1 {
		return fmt.Errorf("world options: %d canary hosts, want at most one", canaries)
	}
	primaryIsCP := false
	for _, h := range cps {
		primaryIsCP = primaryIsCP || h.Name == o.PrimaryNode
	}
	if !primaryIsCP {
		return fmt.Errorf("world options: PrimaryNode %q is not a control-plane host", o.PrimaryNode)
	}
	if o.PostgresInstances < 1 || o.PostgresInstances > len(cps) {
		return fmt.Errorf("world options: PostgresInstances %d: want 1 to %d (one per control-plane host)", o.PostgresInstances, len(cps))
	}
	if !o.primaryHasInstance() {
		return fmt.Errorf("world options: PrimaryNode %s runs no Postgres instance (instances go on the first %d control-plane hosts)", o.PrimaryNode, o.PostgresInstances)
	}
	if o.GPUsPerServer < 1 || o.ModelGPUs < 0 || o.ModelGPUs > o.GPUsPerServer {
		return fmt.Errorf("world options: GPUsPerServer %d / ModelGPUs %d: want 1 or more GPUs and a model taking at most all of them", o.GPUsPerServer, o.ModelGPUs)
	}
	if o.Etcd != nil && len(o.Etcd.Members) < len(cps) {
		return fmt.Errorf("world options: Etcd has %d members for %d control-plane hosts", len(o.Etcd.Members), len(cps))
	}
	for name := range o.Probes {
		if !seen[name] {
			return fmt.Errorf("world options: Probes: %q is not a host", name)
		}
	}
	for _, l := range []string{o.Names.CanaryLabel, o.Names.GPUNodeLabel} {
		if k, _, _ := strings.Cut(l, "="); strings.TrimSpace(k) == "" {
			return fmt.Errorf("world options: label %q has no key", l)
		}
	}
	if o.SwitchoverDelay < 0 || o.VIPLeaseDuration < 3*time.Second || o.TickInterval < 0 || o.ReadyTimeout < 0 || o.BackupAge < 0 {
		return errors.New("world options: durations must not be negative, VIPLeaseDuration at least 3s")
	}
	return nil
}

// primaryHasInstance: instance i runs on the i-th control-plane host.
func (o Options) primaryHasInstance() bool {
	for i, h := range o.controlPlanes() {
		if h.Name == o.PrimaryNode {
			return i < o.PostgresInstances
		}
	}
	return false
}

// labelPair splits "key=value" (a bare key gets "true").
func labelPair(s string) (string, string) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		v = "true"
	}
	return strings.TrimSpace(k), strings.TrimSpace(v)
}
