// Package rbac declares every Kubernetes API request mcp-patch makes and
// the least-privilege RBAC rules that allow them: one ClusterRole for what
// is read or changed across the cluster and a Role per namespace for what
// lives in one (the window Lease and the used-nonce ConfigMap in
// kube.lease_namespace, the GPU smoke pod in its namespace).
//
// Rules is the one source: deploy/kubernetes/rbac.yaml is rendered from it
// (Manifests), doctor checks it with SelfSubjectAccessReview (Check), and a
// test reads the production code's client-go calls and fails on a call no
// rule allows, or on a verb no call uses. It grants no wildcard, no secret,
// and never escalate, bind or impersonate.
//
// This package talks to the API server only through Check (access reviews
// of the caller itself); it knows nothing of rounds, SSH or the intent repo.
package rbac

import (
	"fmt"
	"slices"
	"strings"
)

// Scope says where a rule is granted.
type Scope string

const (
	// Cluster: in the ClusterRole, every namespace (or cluster-scoped).
	Cluster Scope = "cluster"
	// LeaseNamespace: in the Role of kube.lease_namespace.
	LeaseNamespace Scope = "lease-namespace"
	// SmokeNamespace: in the Role of the GPU smoke pod's namespace.
	SmokeNamespace Scope = "smoke-namespace"
)

// Rule is one RBAC rule: verbs on one resource of one API group, where it
// is granted, and why mcp-patch needs it.
type Rule struct {
	Group    string // "" is the core group
	Resource string // "pods", "pods/eviction", ...
	Verbs    []string
	Scope    Scope
	// ResourceName limits the rule to one object, named by the options
	// (see Options.resourceName); empty: any object.
	ResourceName NameOf
	// Why names the code that makes these requests.
	Why string
}

// NameOf names an object whose name comes from the configuration.
type NameOf string

const (
	// WindowLease is the window lock Lease (kube/windowlock).
	WindowLease NameOf = "window-lease"
	// LeaderLease is the Lease the servers elect their leader on
	// (kube/leader).
	LeaderLease NameOf = "leader-lease"
	// NonceConfigMap is the used-nonce ConfigMap (kube/usednonces).
	NonceConfigMap NameOf = "nonce-configmap"
	// KuredDaemonSet is kured's DaemonSet, which carries its lock.
	KuredDaemonSet NameOf = "kured-daemonset"
)

// Rules is every permission mcp-patch needs, exactly the verbs its code
// uses. Create cannot be limited to a name (the object does not exist
// when it is authorised), so a Lease's and a ConfigMap's create stay
// namespace-wide while their get and update name the one object.
var Rules = []Rule{
	{Group: "", Resource: "nodes", Verbs: []string{"get", "list"}, Scope: Cluster,
		Why: "inventory, placement, cordon state, GPU smoke node (kube, kube/drain, kube/gpucheck)"},
	{Group: "", Resource: "nodes", Verbs: []string{"update"}, Scope: Cluster,
		Why: "cordon and uncordon with the ownership annotation (kube/drain)"},
	{Group: "", Resource: "nodes", Verbs: []string{"patch"}, Scope: Cluster,
		Why: "the mcp-patch.io/{round,step,kernel} annotations (kube/nodeevents); the GPU Operator's driver-upgrade skip label for a GPU node's window, set and removed only where the round set it (kube/actors)"},
	{Group: "", Resource: "pods", Verbs: []string{"get", "list"}, Scope: Cluster,
		Why: "drain preview and wait, gate baseline, Postgres primary, OIDC authenticator, jobs holding a drain"},
	{Group: "", Resource: "pods/eviction", Verbs: []string{"create"}, Scope: Cluster,
		Why: "the drain's evictions, PDBs respected, and their server-side dry run (kube/drain)"},
	{Group: "", Resource: "services", Verbs: []string{"get"}, Scope: Cluster,
		Why: "the admission webhook's Service (kube/gate)"},
	{Group: "", Resource: "events", Verbs: []string{"create", "patch"}, Scope: Cluster,
		Why: "an Event on the Node for each window step (kube/nodeevents)"},
	{Group: "apps", Resource: "daemonsets", Verbs: []string{"get"}, Scope: Cluster,
		Why: "a DaemonSet pod is left on the node as kubectl drain --ignore-daemonsets does (kube/drain); kured's lock on its DaemonSet (kube/actors)"},
	{Group: "apps", Resource: "daemonsets", Verbs: []string{"update", "patch"}, Scope: Cluster, ResourceName: KuredDaemonSet,
		Why: "take kured's lock for the round while it is free, and release it (kube/actors)"},
	{Group: "apps", Resource: "deployments", Verbs: []string{"list"}, Scope: Cluster,
		Why: "the admission webhook at full replicas (kube/gate)"},
	{Group: "policy", Resource: "poddisruptionbudgets", Verbs: []string{"list"}, Scope: Cluster,
		Why: "PDBs that block or can never allow an eviction (kube/drain)"},
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Verbs: []string{"list"}, Scope: Cluster,
		Why: "the admission webhooks the gate checks (kube/gate)"},
	{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Verbs: []string{"list"}, Scope: Cluster,
		Why: "the admission webhooks the gate checks (kube/gate)"},
	{Group: "coordination.k8s.io", Resource: "leases", Verbs: []string{"get"}, Scope: Cluster,
		Why: "the kube-vip Lease (the API VIP's holder), the window Lease and the leader Lease, read again to fence each destructive step (kube, kube/windowlock, kube/leader)"},
	{Group: "", Resource: "pods/log", Verbs: []string{"get"}, Scope: Cluster,
		Why: "a failing driver pod's last log lines, in GPU acceptance (kube/gpucheck)"},
	{Group: "maintenance.nvidia.com", Resource: "nodemaintenances", Verbs: []string{"list"}, Scope: Cluster,
		Why: "another requestor's NodeMaintenance for a node, seen before its cordon (kube/actors)"},
	{Group: "postgresql.cnpg.io", Resource: "clusters", Verbs: []string{"list"}, Scope: Cluster,
		Why: "CloudNativePG clusters: the primary's node and every instance ready (kube, kube/gate)"},

	{Group: "coordination.k8s.io", Resource: "leases", Verbs: []string{"create"}, Scope: LeaseNamespace,
		Why: "take the window Lease and the leader Lease the first time, or publish a journal head before any window (kube/windowlock, kube/leader)"},
	{Group: "coordination.k8s.io", Resource: "leases", Verbs: []string{"update"}, Scope: LeaseNamespace, ResourceName: WindowLease,
		Why: "take, renew and release the window Lease, and publish the journal head on it (kube/windowlock)"},
	{Group: "coordination.k8s.io", Resource: "leases", Verbs: []string{"update"}, Scope: LeaseNamespace, ResourceName: LeaderLease,
		Why: "take, renew and release the leader Lease when leader_election is on (kube/leader, through client-go's leaderelection)"},
	{Group: "maintenance.nvidia.com", Resource: "nodemaintenances", Verbs: []string{"create", "get", "delete"}, Scope: LeaseNamespace,
		Why: "the round's own NodeMaintenance request per window, read for Ready and deleted at the window's end (kube/actors)"},
	{Group: "", Resource: "configmaps", Verbs: []string{"create"}, Scope: LeaseNamespace,
		Why: "record the first used approval nonce (kube/usednonces)"},
	{Group: "", Resource: "configmaps", Verbs: []string{"get", "update"}, Scope: LeaseNamespace, ResourceName: NonceConfigMap,
		Why: "read and record used approval nonces (kube/usednonces)"},

	{Group: "", Resource: "pods", Verbs: []string{"create", "delete"}, Scope: SmokeNamespace,
		Why: "the GPU smoke pod, deleted when it ends (kube/gpucheck)"},
	{Group: "", Resource: "events", Verbs: []string{"list"}, Scope: SmokeNamespace,
		Why: "the smoke pod's Events, why it did not start (kube/gpucheck)"},
}

// Granted are requests mcp-patch makes that Kubernetes' default roles
// allow every authenticated user: no rule of Rules is needed for them.
var Granted = []Rule{
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", Verbs: []string{"create"},
		Why: "doctor's permission check; ClusterRole system:basic-user"},
}

// Options name the namespaces and objects the rules are granted on; the
// zero value of each field is the configuration's default.
type Options struct {
	// LeaseNamespace is kube.lease_namespace. Empty: kube-system.
	LeaseNamespace string
	// SmokeNamespace is the GPU smoke pod's namespace. Empty: default.
	SmokeNamespace string
	// LeaseName is the window Lease. Empty: mcp-patch-window.
	LeaseName string
	// LeaderLease is leader_election.lease_name. Empty: mcp-patch-leader.
	LeaderLease string
	// NonceConfigMap is approvals.nonce_configmap. Empty: mcp-patch-used-nonces.
	NonceConfigMap string
	// KuredDaemonSet is kured's DaemonSet name. Empty: kured.
	KuredDaemonSet string
	// Name names the ClusterRole, the Roles, the bindings and the
	// ServiceAccount. Empty: mcp-patch.
	Name string
	// ServiceAccountNamespace holds the ServiceAccount the roles are bound
	// to. Empty: the lease namespace.
	ServiceAccountNamespace string
}

// WithDefaults fills the empty fields.
func (o Options) WithDefaults() Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.LeaseNamespace, "kube-system")
	def(&o.SmokeNamespace, "default")
	def(&o.KuredDaemonSet, "kured")
	def(&o.LeaseName, "mcp-patch-window")
	def(&o.LeaderLease, "mcp-patch-leader")
	def(&o.NonceConfigMap, "mcp-patch-used-nonces")
	def(&o.Name, "mcp-patch")
	def(&o.ServiceAccountNamespace, o.LeaseNamespace)
	return o
}

// Namespace returns the namespace a rule of scope s is granted in; ""
// for the cluster.
func (o Options) Namespace(s Scope) string {
	o = o.WithDefaults()
	switch s {
	case LeaseNamespace:
		return o.LeaseNamespace
	case SmokeNamespace:
		return o.SmokeNamespace
	}
	return ""
}

// resourceName returns the object a rule is limited to; "" for any.
func (o Options) resourceName(n NameOf) string {
	o = o.WithDefaults()
	switch n {
	case WindowLease:
		return o.LeaseName
	case LeaderLease:
		return o.LeaderLease
	case NonceConfigMap:
		return o.NonceConfigMap
	case KuredDaemonSet:
		return o.KuredDaemonSet
	}
	return ""
}

// String is the rule as a person would write it in a Role:
// `apiGroups: [""], resources: [pods/eviction], verbs: [create]`.
func (r Rule) String() string {
	return r.text(Options{})
}

func (r Rule) text(o Options) string {
	s := fmt.Sprintf("apiGroups: [%q], resources: [%s], verbs: [%s]", r.Group, r.Resource, strings.Join(r.Verbs, ", "))
	if n := o.resourceName(r.ResourceName); n != "" {
		s += fmt.Sprintf(", resourceNames: [%s]", n)
	}
	return s
}

// Where says which object of the shipped manifests holds a rule of scope s.
func (o Options) Where(s Scope) string {
	o = o.WithDefaults()
	if s == Cluster {
		return "ClusterRole " + o.Name
	}
	return fmt.Sprintf("Role %s in namespace %s", o.Name, o.Namespace(s))
}

// Lookup returns the rule of rules that allows verb on group/resource,
// and whether one does.
func Lookup(rules []Rule, group, resource, verb string) (Rule, bool) {
	for _, r := range rules {
		if r.Group == group && r.Resource == resource && slices.Contains(r.Verbs, verb) {
			return r, true
		}
	}
	return Rule{}, false
}

// Without returns rules with one verb taken from the rule(s) on
// group/resource (a rule left with no verb is dropped). The lab uses it to
// run the round short of one permission.
func Without(rules []Rule, group, resource, verb string) []Rule {
	var out []Rule
	for _, r := range rules {
		if r.Group == group && r.Resource == resource && slices.Contains(r.Verbs, verb) {
			r.Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == verb })
			if len(r.Verbs) == 0 {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}
