package intent

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Settings are the machine-readable numbers and names a component's
// settings.yaml gives the round. Each top-level section is owned by exactly
// one component (see examples/intent/README.md); a section a file does not
// set is nil.
type Settings struct {
	Kernel       *KernelSettings       `json:"kernel,omitempty"`
	Node         *NodeSettings         `json:"node,omitempty"`
	Drain        *DrainSettings        `json:"drain,omitempty"`
	StackHealth  *StackHealthSettings  `json:"stack_health,omitempty"`
	ControlPlane *ControlPlaneSettings `json:"control_plane,omitempty"`
	Postgres     *PostgresSettings     `json:"postgres,omitempty"`
	Webhook      *WebhookSettings      `json:"webhook,omitempty"`
	GPU          *GPUSettings          `json:"gpu,omitempty"`
	Maintenance  *MaintenanceSettings  `json:"maintenance,omitempty"`
	Alerts       *AlertSettings        `json:"alerts,omitempty"`
	Approvals    *ApprovalSettings     `json:"approvals,omitempty"`
	OtherActors  *OtherActorsSettings  `json:"other_actors,omitempty"`
}

// OtherActorsSettings: the others that maintain the cluster's nodes, seen
// before each cordon (kube/actors), and how long the round waits for one
// that holds a node before it stops for a person.
type OtherActorsSettings struct {
	// WaitMinutes bounds the wait for a holder that lets go by itself (a
	// driver upgrade, another requestor's NodeMaintenance, kured's lock).
	WaitMinutes int `json:"wait_minutes"`
	// Kured names kured's DaemonSet and lock annotation; nil: kured's
	// defaults (kube-system/kured, weave.works/kured-node-lock).
	Kured *KuredSettings `json:"kured,omitempty"`
	// RequestorID is this round's NodeMaintenance requestor id, where the
	// maintenance operator runs (DNS-style, 2-63 characters).
	RequestorID string `json:"requestor_id,omitempty"`
	// StandingTaints are taint keys that are part of the nodes' shape
	// (nvidia.com/gpu, the control plane's), never a person's hold.
	StandingTaints []string `json:"standing_taints,omitempty"`
}

// KuredSettings: where kured keeps its lock (--ds-namespace, --ds-name,
// --lock-annotation), and whether the round takes it.
type KuredSettings struct {
	Namespace      string `json:"namespace"`
	DaemonSet      string `json:"daemonset"`
	LockAnnotation string `json:"lock_annotation,omitempty"`
	// TakeLock: the round writes its own holder ("mcp-patch:<identity>")
	// into kured's lock at its first window, once nobody else holds it,
	// so kured reboots no node while the round runs; it lets go when the
	// round closes or is aborted. Nil or true: take it (where kured's
	// DaemonSet exists; absent, there is nothing to take); false: only
	// look at it before each cordon (a lock the round took before is
	// still given back at its end).
	TakeLock *bool `json:"take_lock,omitempty"`
}

// TakesLock says whether the round takes kured's lock (TakeLock, default
// true; kured's defaults when k is nil).
func (k *KuredSettings) TakesLock() bool {
	return k == nil || k.TakeLock == nil || *k.TakeLock
}

// DriverContainerSettings: GPU servers whose NVIDIA driver comes from the
// GPU Operator's driver container, not from host packages. After a kernel
// change its pod must pull a precompiled image made for exactly the new
// kernel, or build the driver at boot from the kernel's headers.
type DriverContainerSettings struct {
	// NodeLabel ("key=value") selects the GPU servers that use it; the
	// others take their driver from host packages.
	NodeLabel string `json:"node_label"`
	// Precompiled: the pod pulls <registry>/<repository>:<driver_branch>-
	// <kernel>-<os_tag>; false: it builds the driver at boot, so the
	// kernel's headers must be in the package plan.
	Precompiled bool   `json:"precompiled"`
	Registry    string `json:"registry,omitempty"`
	Repository  string `json:"repository,omitempty"`
	OSTag       string `json:"os_tag,omitempty"`
	// Namespace and PodLabel find the node's driver pod; ValidatorLabel its
	// validator pod, where the operator runs one ("" when not).
	Namespace      string `json:"namespace"`
	PodLabel       string `json:"pod_label"`
	ValidatorLabel string `json:"validator_label,omitempty"`
	// ReadyTimeoutSeconds bounds the wait for the driver pod after a boot.
	ReadyTimeoutSeconds int `json:"ready_timeout_seconds"`
}

// Approval sizes (ApprovalSettings.GPUServers).
const (
	ApprovalPerStep   = "per_step"   // one signature per destructive step
	ApprovalPerWindow = "per_window" // one signature for a node's whole window
)

// ApprovalSettings: how many signatures a round asks for, sized to risk,
// and whose (os-layer). Control-plane nodes and autoremove are always per
// step.
type ApprovalSettings struct {
	// GPUServers is ApprovalPerStep (the default when empty) or
	// ApprovalPerWindow: one signature for a GPU server's whole window,
	// bound to every step digest of that node in the signed plan.
	GPUServers string `json:"gpu_servers,omitempty"`
	// Principals names, per kind of destructive step, the allowed_signers
	// principals one of whom must sign it; nil, or a kind left out: anyone
	// allowed_signers admits.
	Principals *StepPrincipals `json:"principals,omitempty"`
}

// StepPrincipals are the principals (allowed_signers names, e.g.
// alice@example.com, never patterns) one of whom must sign a destructive
// step, by the kind of step: its node's role, or fleet-wide. A list left
// out (nil) lets anyone allowed_signers admits sign that kind. A window
// approval covers a GPU server's steps only when its signer is one of
// GPUServers.
type StepPrincipals struct {
	// ControlPlane: the steps of a control-plane node's window.
	ControlPlane []string `json:"control_plane,omitempty"`
	// GPUServers: the steps of a GPU server's window.
	GPUServers []string `json:"gpu_servers,omitempty"`
	// OtherNodes: the steps of any other node's window.
	OtherNodes []string `json:"other_nodes,omitempty"`
	// Fleet: fleet-wide steps (autoremove).
	Fleet []string `json:"fleet,omitempty"`
}

// The kinds of step StepPrincipals names, as settings.yaml spells them.
const (
	StepsControlPlane = "control_plane"
	StepsGPUServers   = "gpu_servers"
	StepsOtherNodes   = "other_nodes"
	StepsFleet        = "fleet"
)

// For answers the principals the kind of step (a StepsX constant) needs,
// and false when the intent names none for it.
func (p *StepPrincipals) For(kind string) ([]string, bool) {
	if p == nil {
		return nil, false
	}
	var names []string
	switch kind {
	case StepsControlPlane:
		names = p.ControlPlane
	case StepsGPUServers:
		names = p.GPUServers
	case StepsOtherNodes:
		names = p.OtherNodes
	case StepsFleet:
		names = p.Fleet
	}
	return names, names != nil
}

func (p *StepPrincipals) validate(bad func(string, string, ...any)) {
	for _, k := range []string{StepsControlPlane, StepsGPUServers, StepsOtherNodes, StepsFleet} {
		names, ok := p.For(k)
		field := "approvals.principals." + k
		if ok && len(names) == 0 {
			bad(field, "is empty; leave it out to let anyone allowed_signers admits sign")
		}
		for i, n := range names {
			switch {
			case n == "" || strings.TrimSpace(n) != n:
				bad(field, "%q is not a principal (empty, or space around it)", n)
			case strings.ContainsAny(n, "*?!,\"\\") || strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 || r == 0x7f }):
				bad(field, "%q is not a principal name: patterns (* ? !), commas, quotes and control characters are not allowed; name each person as allowed_signers does", n)
			case slices.Contains(names[:i], n):
				bad(field, "%q is listed twice", n)
			}
		}
	}
}

// KernelSettings: the pace and limits of kernel rounds (os-layer).
type KernelSettings struct {
	// SoakHours is how long the fleet runs on the new kernel before
	// autoremove. At least 1.
	SoakHours int `json:"soak_hours"`
	// HeldPackages must be on hold on every node and never move in a round.
	HeldPackages []string `json:"held_packages"`
	// ComplianceDeadlineDays is how many days after publication a security
	// fix must run, per class of node.
	ComplianceDeadlineDays ComplianceDeadlines `json:"compliance_deadline_days"`
	// ExternalFacingLabel is a label selector ("key=value") marking nodes
	// that get the external-facing deadline; empty: none are.
	ExternalFacingLabel string `json:"external_facing_label,omitempty"`
	// PanicRebootSeconds is the kernel.panic value a trial boot needs so that
	// a panicking kernel reboots into the default (old) entry. At least 1.
	PanicRebootSeconds int `json:"panic_reboot_seconds"`
	// TestEnvironment names the environment a kernel goes through before
	// production ("" when there is none); TestedKernels are the kernel
	// releases that closed a round there. The plan says whether the
	// round's target kernels are among them.
	TestEnvironment string   `json:"test_environment,omitempty"`
	TestedKernels   []string `json:"tested_kernels,omitempty"`
}

// ComplianceDeadlines are days from a fix's publication to it running.
type ComplianceDeadlines struct {
	Internal       int `json:"internal"`
	ExternalFacing int `json:"external_facing"`
}

// NodeSettings: what every node must show after its window (os-layer).
type NodeSettings struct {
	// Sysctls maps a sysctl name (kernel.panic) to its expected value as
	// /proc/sys shows it.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Bonds maps a bond interface name to what it must keep.
	Bonds map[string]BondSettings `json:"bonds,omitempty"`
}

// BondSettings: one bonded interface.
type BondSettings struct {
	// MinActiveSlaves is how many slaves must have MII status up. At least 1.
	MinActiveSlaves int `json:"min_active_slaves"`
}

// Drain policies for pods with emptyDir volumes.
const (
	EmptyDirDelete = "delete" // evict them; their emptyDir data is lost
	EmptyDirRefuse = "refuse" // stop the window and ask a person
)

// DrainSettings: how nodes are drained (os-layer).
type DrainSettings struct {
	// EmptyDirPolicy is EmptyDirDelete or EmptyDirRefuse.
	EmptyDirPolicy string `json:"emptydir_policy"`
	// TimeoutMinutes bounds one node's drain. At least 1.
	TimeoutMinutes int `json:"timeout_minutes"`
	// WaitForJobs, when set, holds a node's drain while pods matching its
	// selector (batch training jobs) run there, for a bounded wait.
	WaitForJobs *WaitForJobs `json:"wait_for_jobs,omitempty"`
}

// WaitForJobs: pods whose work a drain must not cut short.
type WaitForJobs struct {
	// Selector picks the pods ("workload-class=training"); notebooks and
	// serving pods should not match: they are evicted as usual.
	Selector string `json:"selector"`
	// MaxWaitMinutes bounds the wait; then the round stops and a person
	// decides. At least 1.
	MaxWaitMinutes int `json:"max_wait_minutes"`
}

// StackHealthSettings: what the gate compares with the baseline (os-layer).
type StackHealthSettings struct {
	// CriticalNamespaces are the namespaces whose failing pods the gate
	// compares with the baseline taken before the round.
	CriticalNamespaces []string `json:"critical_namespaces"`
}

// ControlPlaneSettings: etcd, the API VIP and OIDC (control-plane).
type ControlPlaneSettings struct {
	// NodeLabel selects the control-plane nodes.
	NodeLabel string `json:"node_label"`
	// EtcdMembers is the expected etcd member count: odd, at least 3.
	EtcdMembers int `json:"etcd_members"`
	// APIVIP is the address clients reach the API server on.
	APIVIP string `json:"api_vip"`
	// APIPort is the API server port on the VIP.
	APIPort int `json:"api_port"`
	// VIPLease is the leader-election Lease whose holder carries the VIP.
	VIPLease ObjectRef `json:"vip_lease"`
	// OIDC is the sign-in the gate proves after each window.
	OIDC OIDCSettings `json:"oidc"`
}

// ObjectRef names a namespaced object.
type ObjectRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// OIDCSettings: the issuer the API server trusts.
type OIDCSettings struct {
	IssuerURL string `json:"issuer_url"`
	ClientID  string `json:"client_id"`
}

// PostgresSettings: the CloudNativePG cluster (postgres).
type PostgresSettings struct {
	Namespace string `json:"namespace"`
	// Cluster is the name of the postgresql.cnpg.io/v1 Cluster.
	Cluster string `json:"cluster"`
	// Instances is the expected instance count. At least 2.
	Instances int `json:"instances"`
	// MaxBackupAgeHours is how old the last successful backup may be when a
	// round starts. At least 1.
	MaxBackupAgeHours int `json:"max_backup_age_hours"`
}

// WebhookSettings: the admission webhook (admission-webhook).
type WebhookSettings struct {
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment"`
	// Configuration is the ValidatingWebhookConfiguration name.
	Configuration string `json:"configuration"`
	// MinCertDays is how many days the serving certificate must still be
	// valid when a round starts.
	MinCertDays int `json:"min_cert_days"`
}

// GPUSettings: the GPU servers (gpu-fleet).
type GPUSettings struct {
	// NodeLabel selects the GPU servers ("key=value").
	NodeLabel string `json:"node_label"`
	// ExpectedGPUsPerServer is how many GPUs each server must show. At least 1.
	ExpectedGPUsPerServer int `json:"expected_gpus_per_server"`
	// FabricManagerRequired: nvidia-fabricmanager must be active and every
	// GPU's fabric state Completed.
	FabricManagerRequired bool `json:"fabric_manager_required"`
	// DriverBranch is the NVIDIA driver branch a round must not change.
	DriverBranch string `json:"driver_branch"`
	// RDMADevices is how many RDMA devices each server must have up.
	RDMADevices int `json:"rdma_devices"`
	// CanaryLabel ("key=value") marks the one canary GPU server.
	CanaryLabel string `json:"canary_label"`
	// ModelEndpoint is where GPU acceptance asks for a real completion.
	ModelEndpoint ModelEndpoint `json:"model_endpoint"`
	// DriverContainer, when set, names the GPU servers whose driver is the
	// GPU Operator's driver container; nil: every GPU server's driver comes
	// from host packages (precompiled linux-modules-nvidia or DKMS).
	DriverContainer *DriverContainerSettings `json:"driver_container,omitempty"`
}

// ModelEndpoint is an OpenAI-style completions endpoint.
type ModelEndpoint struct {
	URL            string `json:"url"`
	Model          string `json:"model"`
	Prompt         string `json:"prompt"`
	MaxTokens      int    `json:"max_tokens"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

// ParseSettings decodes settings.yaml strictly (an unknown key is an error)
// and validates every section it sets.
func ParseSettings(data []byte) (Settings, error) {
	var s Settings
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return Settings{}, fmt.Errorf("%w: settings.yaml: %w", ErrMalformed, err)
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// Sections returns the names of the sections s sets, in a fixed order.
func (s Settings) Sections() []string {
	var out []string
	for _, f := range s.fields() {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

type settingsField struct {
	name string
	set  bool
}

func (s Settings) fields() []settingsField {
	return []settingsField{
		{"kernel", s.Kernel != nil}, {"node", s.Node != nil}, {"drain", s.Drain != nil},
		{"stack_health", s.StackHealth != nil}, {"control_plane", s.ControlPlane != nil},
		{"postgres", s.Postgres != nil}, {"webhook", s.Webhook != nil}, {"gpu", s.GPU != nil},
		{"maintenance", s.Maintenance != nil}, {"alerts", s.Alerts != nil},
		{"approvals", s.Approvals != nil},
	}
}

// Validate checks every section that is set and names each bad field.
func (s Settings) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	atLeast := func(field string, v, min int) {
		if v < min {
			bad(field, "is %d, want at least %d", v, min)
		}
	}
	if k := s.Kernel; k != nil {
		atLeast("kernel.soak_hours", k.SoakHours, 1)
		atLeast("kernel.compliance_deadline_days.internal", k.ComplianceDeadlineDays.Internal, 1)
		atLeast("kernel.compliance_deadline_days.external_facing", k.ComplianceDeadlineDays.ExternalFacing, 1)
		atLeast("kernel.panic_reboot_seconds", k.PanicRebootSeconds, 1)
		if len(k.HeldPackages) == 0 {
			bad("kernel.held_packages", "is empty")
		}
		for _, p := range k.HeldPackages {
			if !debianPackage(p) {
				bad("kernel.held_packages", "%q is not a Debian package name", p)
			}
		}
		if k.ExternalFacingLabel != "" {
			checkSelector(bad, "kernel.external_facing_label", k.ExternalFacingLabel)
		}
	}
	if n := s.Node; n != nil {
		for name := range n.Sysctls {
			if !sysctlName(name) {
				bad("node.sysctls", "%q is not a sysctl name", name)
			}
		}
		for name, b := range n.Bonds {
			if !ifaceName(name) {
				bad("node.bonds", "%q is not an interface name", name)
			}
			atLeast("node.bonds."+name+".min_active_slaves", b.MinActiveSlaves, 1)
		}
	}
	if d := s.Drain; d != nil {
		if d.EmptyDirPolicy != EmptyDirDelete && d.EmptyDirPolicy != EmptyDirRefuse {
			bad("drain.emptydir_policy", "is %q, want %q or %q", d.EmptyDirPolicy, EmptyDirDelete, EmptyDirRefuse)
		}
		atLeast("drain.timeout_minutes", d.TimeoutMinutes, 1)
		if w := d.WaitForJobs; w != nil {
			checkSelector(bad, "drain.wait_for_jobs.selector", w.Selector)
			atLeast("drain.wait_for_jobs.max_wait_minutes", w.MaxWaitMinutes, 1)
		}
	}
	if h := s.StackHealth; h != nil {
		for _, ns := range h.CriticalNamespaces {
			if len(validation.IsDNS1123Label(ns)) > 0 {
				bad("stack_health.critical_namespaces", "%q is not a namespace name", ns)
			}
		}
	}
	if c := s.ControlPlane; c != nil {
		checkSelector(bad, "control_plane.node_label", c.NodeLabel)
		if c.EtcdMembers < 3 || c.EtcdMembers%2 == 0 {
			bad("control_plane.etcd_members", "is %d, want an odd number of at least 3", c.EtcdMembers)
		}
		if c.APIVIP == "" {
			bad("control_plane.api_vip", "is empty")
		}
		if c.APIPort < 1 || c.APIPort > 65535 {
			bad("control_plane.api_port", "is %d, want 1-65535", c.APIPort)
		}
		checkName(bad, "control_plane.vip_lease.namespace", c.VIPLease.Namespace)
		checkName(bad, "control_plane.vip_lease.name", c.VIPLease.Name)
		checkURL(bad, "control_plane.oidc.issuer_url", c.OIDC.IssuerURL, "https")
		if c.OIDC.ClientID == "" {
			bad("control_plane.oidc.client_id", "is empty")
		}
	}
	if p := s.Postgres; p != nil {
		checkName(bad, "postgres.namespace", p.Namespace)
		checkName(bad, "postgres.cluster", p.Cluster)
		atLeast("postgres.instances", p.Instances, 2)
		atLeast("postgres.max_backup_age_hours", p.MaxBackupAgeHours, 1)
	}
	if w := s.Webhook; w != nil {
		checkName(bad, "webhook.namespace", w.Namespace)
		checkName(bad, "webhook.deployment", w.Deployment)
		checkName(bad, "webhook.configuration", w.Configuration)
		atLeast("webhook.min_cert_days", w.MinCertDays, 0)
	}
	if g := s.GPU; g != nil {
		checkSelector(bad, "gpu.node_label", g.NodeLabel)
		checkSelector(bad, "gpu.canary_label", g.CanaryLabel)
		atLeast("gpu.expected_gpus_per_server", g.ExpectedGPUsPerServer, 1)
		atLeast("gpu.rdma_devices", g.RDMADevices, 0)
		if g.DriverBranch == "" {
			bad("gpu.driver_branch", "is empty")
		}
		checkURL(bad, "gpu.model_endpoint.url", g.ModelEndpoint.URL, "http", "https")
		if g.ModelEndpoint.Model == "" {
			bad("gpu.model_endpoint.model", "is empty")
		}
		if g.ModelEndpoint.Prompt == "" {
			bad("gpu.model_endpoint.prompt", "is empty")
		}
		atLeast("gpu.model_endpoint.max_tokens", g.ModelEndpoint.MaxTokens, 1)
		atLeast("gpu.model_endpoint.timeout_seconds", g.ModelEndpoint.TimeoutSeconds, 1)
		if dc := g.DriverContainer; dc != nil {
			checkSelector(bad, "gpu.driver_container.node_label", dc.NodeLabel)
			checkSelector(bad, "gpu.driver_container.pod_label", dc.PodLabel)
			if dc.ValidatorLabel != "" {
				checkSelector(bad, "gpu.driver_container.validator_label", dc.ValidatorLabel)
			}
			checkName(bad, "gpu.driver_container.namespace", dc.Namespace)
			atLeast("gpu.driver_container.ready_timeout_seconds", dc.ReadyTimeoutSeconds, 1)
			if dc.Precompiled {
				for _, f := range [][2]string{{"registry", dc.Registry}, {"repository", dc.Repository}, {"os_tag", dc.OSTag}} {
					if strings.TrimSpace(f[1]) == "" {
						bad("gpu.driver_container."+f[0], "is empty (a precompiled driver image is looked up by it)")
					}
				}
			}
		}
	}
	if o := s.OtherActors; o != nil {
		atLeast("other_actors.wait_minutes", o.WaitMinutes, 1)
		if k := o.Kured; k != nil {
			checkName(bad, "other_actors.kured.namespace", k.Namespace)
			checkName(bad, "other_actors.kured.daemonset", k.DaemonSet)
		}
		if n := len(o.RequestorID); o.RequestorID != "" && (n < 2 || n > 63 || !requestorID.MatchString(o.RequestorID)) {
			bad("other_actors.requestor_id", "%q is not a DNS-style requestor id of 2-63 characters", o.RequestorID)
		}
	}
	if m := s.Maintenance; m != nil {
		errs = append(errs, m.validate()...)
	}
	if a := s.Alerts; a != nil {
		errs = append(errs, a.validate()...)
	}
	if a := s.Approvals; a != nil {
		switch a.GPUServers {
		case "", ApprovalPerStep, ApprovalPerWindow:
		default:
			bad("approvals.gpu_servers", "is %q, want %q or %q", a.GPUServers, ApprovalPerStep, ApprovalPerWindow)
		}
		if a.Principals != nil {
			a.Principals.validate(bad)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: settings.yaml: %w", ErrMalformed, errors.Join(errs...))
	}
	return nil
}

// merge adds the sections of from into s; a section already set is an error
// naming both owners.
func (s *Settings) merge(from Settings, component string, owners map[string]string) error {
	var errs []error
	take := func(name string, set bool, apply func()) {
		if !set {
			return
		}
		if prev, ok := owners[name]; ok {
			errs = append(errs, fmt.Errorf("section %q is set by both %s and %s", name, prev, component))
			return
		}
		owners[name] = component
		apply()
	}
	take("kernel", from.Kernel != nil, func() { s.Kernel = from.Kernel })
	take("node", from.Node != nil, func() { s.Node = from.Node })
	take("drain", from.Drain != nil, func() { s.Drain = from.Drain })
	take("stack_health", from.StackHealth != nil, func() { s.StackHealth = from.StackHealth })
	take("control_plane", from.ControlPlane != nil, func() { s.ControlPlane = from.ControlPlane })
	take("postgres", from.Postgres != nil, func() { s.Postgres = from.Postgres })
	take("webhook", from.Webhook != nil, func() { s.Webhook = from.Webhook })
	take("gpu", from.GPU != nil, func() { s.GPU = from.GPU })
	take("maintenance", from.Maintenance != nil, func() { s.Maintenance = from.Maintenance })
	take("alerts", from.Alerts != nil, func() { s.Alerts = from.Alerts })
	take("approvals", from.Approvals != nil, func() { s.Approvals = from.Approvals })
	return errors.Join(errs...)
}

// requestorID is the maintenance operator's rule for spec.requestorID.
var requestorID = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*$`)

func checkSelector(bad func(string, string, ...any), field, sel string) {
	if sel == "" {
		bad(field, "is empty")
		return
	}
	if _, err := labels.Parse(sel); err != nil {
		bad(field, "%q is not a label selector: %v", sel, err)
	}
}

func checkName(bad func(string, string, ...any), field, name string) {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		bad(field, "%q is not a Kubernetes object name: %s", name, strings.Join(msgs, "; "))
	}
}

func checkURL(bad func(string, string, ...any), field, raw string, schemes ...string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || !slices.Contains(schemes, u.Scheme) {
		bad(field, "%q is not an %s URL", raw, strings.Join(schemes, " or "))
	}
}

func debianPackage(p string) bool {
	if len(p) < 2 || !isLowerAlnum(p[0]) {
		return false
	}
	for i := 1; i < len(p); i++ {
		c := p[i]
		if !isLowerAlnum(c) && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func sysctlName(n string) bool {
	if n == "" || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") || strings.Contains(n, "..") {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !isLowerAlnum(c) && c != '.' && c != '_' && c != '-' && !(c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func ifaceName(n string) bool {
	if n == "" || len(n) > 15 || n == "." || n == ".." {
		return false
	}
	return !strings.ContainsAny(n, "/ \t\n:")
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
