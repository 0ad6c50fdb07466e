package world

import (
	"fmt"
	"strconv"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// Labels and annotations the World sets.
const (
	// LabelWorld marks every object the World creates.
	LabelWorld = "lab.mcp-patch.io/world"
	// AnnotationPower is set to PowerDown on the Node of a host that is
	// down; the node-power admission policy then refuses any status write
	// that would make that Node Ready (kwok's delayed heartbeat, say).
	AnnotationPower = "lab.mcp-patch.io/power"
	PowerDown       = "down"
	// KwokNodeUnmanaged replaces cluster.KwokNodeAnnotationValue while a
	// host is down, so kwok's node informer stops reacting to the Node.
	KwokNodeUnmanaged = "lab-host-down"
	// NodePowerPolicy names the ValidatingAdmissionPolicy (and its binding).
	NodePowerPolicy = "lab-node-power"

	labelApp          = "app.kubernetes.io/name"
	labelControlPlane = kube.LabelControlPlane

	// CloudNativePG's pod labels.
	cnpgClusterLabel  = "cnpg.io/cluster"
	cnpgInstanceLabel = "cnpg.io/instanceName"
	cnpgRoleLabel     = "cnpg.io/instanceRole"
	cnpgPodRoleLabel  = "cnpg.io/podRole"
	cnpgLegacyRole    = "role"
	rolePrimary       = "primary"
	roleReplica       = "replica"

	webhookName      = "validate.policy.platform.example.com"
	webhookNeverKey  = "lab.mcp-patch.io/policy-webhook-target"
	webhookPort      = 443
	webhookContainer = "webhook"
	postgresImage    = "ghcr.io/cloudnative-pg/postgresql:16.4"
	modelContainer   = "vllm"
	deviceDaemonSet  = "nvidia-device-plugin-daemonset"
	cnpgOperator     = "cnpg-controller-manager"
	fieldManager     = "mcp-patch-lab-world"
)

var worldLabels = map[string]string{LabelWorld: "true"}

func withWorld(m map[string]string) map[string]string {
	out := map[string]string{LabelWorld: "true"}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func nodeObject(h Host, o Options) *corev1.Node {
	labels := withWorld(map[string]string{
		"kubernetes.io/hostname": h.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		kube.DefaultMachineLabel: kube.MachineBareMetal,
	})
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	var taints []corev1.Taint
	switch h.Role {
	case RoleControlPlane:
		labels[labelControlPlane] = ""
		taints = append(taints, corev1.Taint{Key: labelControlPlane, Effect: corev1.TaintEffectNoSchedule})
		capacity[corev1.ResourceCPU] = resource.MustParse("16")
		capacity[corev1.ResourceMemory] = resource.MustParse("64Gi")
	case RoleGPU:
		k, v := labelPair(o.Names.GPUNodeLabel)
		labels[k] = v
		labels[kube.LabelGPUCount] = strconv.Itoa(o.GPUsPerServer)
		labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
		capacity[kube.ResourceGPU] = *resource.NewQuantity(int64(o.GPUsPerServer), resource.DecimalSI)
		capacity[corev1.ResourceCPU] = resource.MustParse("224")
		capacity[corev1.ResourceMemory] = resource.MustParse("2Ti")
		if h.Canary {
			k, v := labelPair(o.Names.CanaryLabel)
			labels[k] = v
		}
	}
	kernel := h.Kernel
	if kernel == "" {
		kernel = DefaultKernel
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        h.Name,
			Labels:      labels,
			Annotations: map[string]string{cluster.KwokNodeAnnotation: cluster.KwokNodeAnnotationValue},
		},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			// The SSH inventory's override gives each host's real port; the
			// node's own address is the loopback every lab host listens on.
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: h.Name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KernelVersion:           kernel,
				OSImage:                 OSImage,
				KubeletVersion:          KubeletVersion,
				ContainerRuntimeVersion: "containerd://1.7.12",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
			},
		},
	}
}

// nodePowerPolicy refuses a Node status that says Ready while the Node
// carries AnnotationPower=down. kwok's heartbeat is a delayed job holding
// the Node as it was; without this, it would make a down host's Node Ready
// again up to 45s after the host went down.
func nodePowerPolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionv1.Fail
	expr := fmt.Sprintf(`!has(object.metadata.annotations) || !(%q in object.metadata.annotations) || object.metadata.annotations[%q] != %q || !has(object.status.conditions) || !object.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`,
		AnnotationPower, AnnotationPower, PowerDown)
	p := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NodePowerPolicy, Labels: worldLabels},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Update},
						Rule: admissionv1.Rule{
							APIGroups:   []string{""},
							APIVersions: []string{"v1"},
							Resources:   []string{"nodes/status"},
						},
					},
				}},
			},
			Validations: []admissionv1.Validation{{
				Expression: expr,
				Message:    "lab: the host of this node is down; its node cannot be Ready",
			}},
		},
	}
	b := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: NodePowerPolicy, Labels: worldLabels},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        NodePowerPolicy,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return p, b
}

func namespaceObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: worldLabels}}
}

var controlPlaneToleration = corev1.Toleration{Key: labelControlPlane, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

func pinnedAffinity(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}},
			}},
		},
	}}
}

func spreadAffinity(app string) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelApp: app}},
			TopologyKey:   "kubernetes.io/hostname",
		}},
	}}
}

// cnpgClusterObject is the CNPG Cluster as a person would write it.
func cnpgClusterObject(o Options) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "postgresql.cnpg.io/v1",
		"kind":       "Cluster",
		"metadata": map[string]any{
			"name":      o.Names.PostgresCluster,
			"namespace": o.Names.PostgresNamespace,
			"labels":    map[string]any{LabelWorld: "true"},
		},
		"spec": map[string]any{
			"instances":             int64(o.PostgresInstances),
			"imageName":             postgresImage,
			"primaryUpdateStrategy": "unsupervised",
			"enablePDB":             true,
			"storage":               map[string]any{"size": "50Gi", "storageClass": "local-path"},
			"nodeMaintenanceWindow": map[string]any{"inProgress": false, "reusePVC": true},
			"affinity": map[string]any{
				"enablePodAntiAffinity": true,
				"topologyKey":           "kubernetes.io/hostname",
				"podAntiAffinityType":   "required",
				"nodeSelector":          map[string]any{labelControlPlane: ""},
				"tolerations": []any{map[string]any{
					"key": labelControlPlane, "operator": "Exists", "effect": "NoSchedule",
				}},
			},
		},
	}}
	return u
}

// instanceName is CNPG's pod name for instance i (1-based).
func instanceName(clusterName string, i int) string {
	return clusterName + "-" + strconv.Itoa(i)
}

func instancePod(o Options, owner types.UID, name, node, role string) *corev1.Pod {
	yes := true
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: o.Names.PostgresNamespace,
			Labels: withWorld(map[string]string{
				cnpgClusterLabel:  o.Names.PostgresCluster,
				cnpgInstanceLabel: name,
				cnpgPodRoleLabel:  "instance",
				cnpgRoleLabel:     role,
				cnpgLegacyRole:    role,
			}),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "postgresql.cnpg.io/v1", Kind: "Cluster", Name: o.Names.PostgresCluster,
				UID: owner, Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: corev1.PodSpec{
			Affinity:                      pinnedAffinity(node),
			Tolerations:                   []corev1.Toleration{controlPlaneToleration},
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:  "postgres",
				Image: postgresImage,
				Ports: []corev1.ContainerPort{{Name: "postgresql", ContainerPort: 5432}},
			}},
		},
	}
}

func cnpgPDBs(o Options) []*policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	out := []*policyv1.PodDisruptionBudget{{
		ObjectMeta: metav1.ObjectMeta{Name: o.Names.PostgresCluster + "-primary", Namespace: o.Names.PostgresNamespace, Labels: worldLabels},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
				cnpgClusterLabel: o.Names.PostgresCluster, cnpgRoleLabel: rolePrimary,
			}},
		},
	}}
	// CloudNativePG keeps n-2 of n-1 replicas: one replica at a time may go.
	if o.PostgresInstances >= 3 {
		keep := intstr.FromInt32(int32(o.PostgresInstances - 2))
		out = append(out, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: o.Names.PostgresCluster, Namespace: o.Names.PostgresNamespace, Labels: worldLabels},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: &keep,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
					cnpgClusterLabel: o.Names.PostgresCluster, cnpgRoleLabel: roleReplica,
				}},
			},
		})
	}
	return out
}

// mirrorPod is the kubelet's mirror of a static pod: bound to its node,
// owned by the Node, skipped by drains.
func mirrorPod(node *corev1.Node, component string, command []string) *corev1.Pod {
	yes := true
	hash := fmt.Sprintf("%x", []byte(component+"/"+node.Name))
	if len(hash) > 32 {
		hash = hash[:32]
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      component + "-" + node.Name,
			Namespace: metav1.NamespaceSystem,
			Labels:    withWorld(map[string]string{"component": component, "tier": "control-plane"}),
			Annotations: map[string]string{
				"kubernetes.io/config.mirror": hash,
				"kubernetes.io/config.hash":   hash,
				"kubernetes.io/config.source": "file",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &yes,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:          node.Name,
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Tolerations:       []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
			Containers: []corev1.Container{{
				Name:    component,
				Image:   "registry.k8s.io/" + component + ":lab",
				Command: command,
			}},
		},
	}
}

func etcdCommand(node string) []string {
	return []string{"etcd",
		"--name=" + node,
		"--advertise-client-urls=https://127.0.0.1:2379",
		"--listen-client-urls=https://127.0.0.1:2379",
		"--cert-file=/etc/kubernetes/pki/etcd/server.crt",
		"--key-file=/etc/kubernetes/pki/etcd/server.key",
		"--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
		"--client-cert-auth=true",
		"--data-dir=/var/lib/etcd",
	}
}

func apiserverCommand(oidcIssuer string) []string {
	cmd := []string{"kube-apiserver",
		"--advertise-address=127.0.0.1",
		"--secure-port=6443",
		"--etcd-servers=https://127.0.0.1:2379",
		"--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt",
		"--etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt",
		"--etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key",
		"--authorization-mode=Node,RBAC",
	}
	if oidcIssuer != "" {
		cmd = append(cmd,
			"--oidc-issuer-url="+oidcIssuer,
			"--oidc-client-id=kubernetes",
			"--oidc-ca-file="+OIDCCAFile,
			"--oidc-username-claim=email",
		)
	}
	return cmd
}

// OIDCCAFile is the path the lab's kube-apiserver mirror pods name in
// --oidc-ca-file; its content is World.OIDCCAPEM.
const OIDCCAFile = "/etc/kubernetes/pki/oidc-ca.crt"

func webhookObjects(o Options, caPEM []byte) (*corev1.Service, *appsv1.Deployment, *policyv1.PodDisruptionBudget, *admissionv1.ValidatingWebhookConfiguration) {
	n := o.Names
	sel := map[string]string{labelApp: n.WebhookDeployment}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: n.WebhookDeployment, Namespace: n.WebhookNamespace, Labels: withWorld(sel)},
		Spec: corev1.ServiceSpec{
			Selector: sel,
			Ports:    []corev1.ServicePort{{Name: "https", Port: webhookPort, TargetPort: intstr.FromInt32(9443)}},
		},
	}
	replicas := int32(o.WebhookReplicas)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: n.WebhookDeployment, Namespace: n.WebhookNamespace, Labels: withWorld(sel)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: withWorld(sel)},
				Spec: corev1.PodSpec{
					Affinity:    spreadAffinity(n.WebhookDeployment),
					Tolerations: []corev1.Toleration{controlPlaneToleration},
					Containers: []corev1.Container{{
						Name:  webhookContainer,
						Image: "registry.example.com/platform/policy-webhook:1.4.2",
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 9443}},
					}},
				},
			},
		},
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: n.WebhookDeployment, Namespace: n.WebhookNamespace, Labels: worldLabels},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: sel}},
	}
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	timeout := int32(5)
	path := "/validate"
	port := int32(webhookPort)
	vwc := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: n.WebhookConfiguration, Labels: worldLabels},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name: webhookName,
			ClientConfig: admissionv1.WebhookClientConfig{
				Service:  &admissionv1.ServiceReference{Namespace: n.WebhookNamespace, Name: n.WebhookDeployment, Path: &path, Port: &port},
				CABundle: caPEM,
			},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{"", "apps"}, APIVersions: []string{"v1"}, Resources: []string{"pods", "deployments"}},
			}},
			// Fails closed like the real one; the object selector names a
			// label nothing carries, so the API server never calls the lab's
			// webhook, which has no server behind it.
			FailurePolicy: &fail,
			SideEffects:   &none,
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
				Values: []string{metav1.NamespaceSystem, n.WebhookNamespace},
			}}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: webhookNeverKey, Operator: metav1.LabelSelectorOpExists,
			}}},
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	return svc, dep, pdb, vwc
}

func webhookTLSSecret(o Options, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: o.Names.WebhookDeployment + "-tls", Namespace: o.Names.WebhookNamespace, Labels: worldLabels},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
}

func cnpgOperatorDeployment(o Options) *appsv1.Deployment {
	sel := map[string]string{labelApp: "cloudnative-pg"}
	one := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: cnpgOperator, Namespace: o.Names.CNPGNamespace, Labels: withWorld(sel)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: withWorld(sel)},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{controlPlaneToleration},
					Containers:  []corev1.Container{{Name: "manager", Image: "ghcr.io/cloudnative-pg/cloudnative-pg:1.24.1"}},
				},
			},
		},
	}
}

func devicePluginDaemonSet(o Options) *appsv1.DaemonSet {
	sel := map[string]string{labelApp: deviceDaemonSet}
	k, v := labelPair(o.Names.GPUNodeLabel)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: deviceDaemonSet, Namespace: o.Names.GPUOperatorNamespace, Labels: withWorld(sel)},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: withWorld(sel)},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{k: v},
					Tolerations:  []corev1.Toleration{{Key: string(kube.ResourceGPU), Operator: corev1.TolerationOpExists}},
					Containers:   []corev1.Container{{Name: "nvidia-device-plugin-ctr", Image: "nvcr.io/nvidia/k8s-device-plugin:v0.16.2"}},
				},
			},
		},
	}
}

func modelObjects(o Options) (*appsv1.Deployment, *corev1.Service) {
	n := o.Names
	sel := map[string]string{labelApp: n.ModelName}
	replicas := int32(len(o.gpuServers()))
	gpus := *resource.NewQuantity(int64(o.ModelGPUs), resource.DecimalSI)
	var res corev1.ResourceRequirements
	if o.ModelGPUs > 0 {
		res = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{kube.ResourceGPU: gpus},
			Limits:   corev1.ResourceList{kube.ResourceGPU: gpus},
		}
	}
	k, v := labelPair(o.Names.GPUNodeLabel)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: n.ModelName, Namespace: n.ModelNamespace, Labels: withWorld(sel)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: withWorld(sel)},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{k: v},
					Affinity:     spreadAffinity(n.ModelName),
					Tolerations:  []corev1.Toleration{{Key: string(kube.ResourceGPU), Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name:      modelContainer,
						Image:     "vllm/vllm-openai:v0.6.3",
						Args:      []string{"--model", n.ModelID, "--port", strconv.Itoa(n.ModelPort)},
						Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: int32(n.ModelPort)}},
						Resources: res,
					}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: n.ModelName, Namespace: n.ModelNamespace, Labels: withWorld(sel)},
		Spec: corev1.ServiceSpec{
			Selector: sel,
			Ports:    []corev1.ServicePort{{Name: "http", Port: int32(n.ModelPort), TargetPort: intstr.FromInt32(int32(n.ModelPort))}},
		},
	}
	return dep, svc
}
