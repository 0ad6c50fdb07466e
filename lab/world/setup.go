package world

import (
	"context"
	"net"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcp-patch/mcp-patch/kube"
)

// createPostgres creates the CNPG Cluster, its first status, its instance
// pods and its PDBs.
func (w *World) createPostgres(ctx context.Context) error {
	o := w.opts
	var uid types.UID
	if err := create("CNPG cluster "+o.Names.PostgresCluster, func() error {
		out, err := w.dc.Resource(kube.CNPGClusters).Namespace(o.Names.PostgresNamespace).Create(ctx, cnpgClusterObject(o), metav1.CreateOptions{FieldManager: fieldManager})
		if err == nil {
			uid = out.GetUID()
		}
		return err
	}); err != nil {
		return err
	}
	w.clusterUID = uid
	primary := ""
	for _, in := range w.instances {
		if in.node == o.PrimaryNode {
			primary = in.name
		}
	}
	now := time.Now().UTC()
	backup := now.Add(-o.BackupAge)
	status := map[string]any{
		"currentPrimary":           primary,
		"targetPrimary":            primary,
		"currentPrimaryTimestamp":  cnpgTime(now),
		"targetPrimaryTimestamp":   cnpgTime(now),
		"phase":                    PhaseWaitingForInstances,
		"phaseReason":              "lab: instances starting",
		"instances":                int64(len(w.instances)),
		"readyInstances":           int64(0),
		"latestGeneratedNode":      int64(len(w.instances)),
		"writeService":             o.Names.PostgresCluster + "-rw",
		"readService":              o.Names.PostgresCluster + "-r",
		"lastSuccessfulBackup":     backup.Format(time.RFC3339),
		"firstRecoverabilityPoint": backup.Add(-24 * time.Hour).Format(time.RFC3339),
	}
	if err := w.patchClusterStatus(ctx, status); err != nil {
		return err
	}
	for _, in := range w.instances {
		role := roleReplica
		if in.name == primary {
			role = rolePrimary
		}
		if err := create("CNPG instance pod "+in.name, func() error {
			_, err := w.kc.CoreV1().Pods(o.Names.PostgresNamespace).Create(ctx, instancePod(o, uid, in.name, in.node, role), metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return err
		}
	}
	for _, pdb := range cnpgPDBs(o) {
		if err := create("PDB "+pdb.Name, func() error {
			_, err := w.kc.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Create(ctx, pdb, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// createMirrorPods creates the kubelet mirrors of each control-plane host's
// etcd and kube-apiserver static pods.
func (w *World) createMirrorPods(ctx context.Context) error {
	for _, h := range w.cps {
		node, err := w.kc.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, p := range []struct {
			component string
			cmd       []string
		}{
			{"etcd", etcdCommand(h.Name)},
			{"kube-apiserver", apiserverCommand(w.oidc.issuer)},
		} {
			pod := mirrorPod(node, p.component, p.cmd)
			if err := create("mirror pod "+pod.Name, func() error {
				_, err := w.kc.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: fieldManager})
				return err
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *World) createWebhook(ctx context.Context) error {
	o := w.opts
	n := o.Names
	svcName := n.WebhookDeployment + "." + n.WebhookNamespace + ".svc"
	cert, err := newServingCert(svcName, []string{n.WebhookDeployment, n.WebhookDeployment + "." + n.WebhookNamespace, svcName}, []net.IP(nil), 365*24*time.Hour)
	if err != nil {
		return err
	}
	w.webhookCA = cert.caPEM
	svc, dep, pdb, vwc := webhookObjects(o, cert.caPEM)
	secret := webhookTLSSecret(o, cert.certPEM, cert.keyPEM)
	steps := []struct {
		what string
		do   func() error
	}{
		{"secret " + secret.Name, func() error {
			_, err := w.kc.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}},
		{"service " + svc.Name, func() error {
			_, err := w.kc.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}},
		{"deployment " + dep.Name, func() error {
			_, err := w.kc.AppsV1().Deployments(dep.Namespace).Create(ctx, dep, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}},
		{"PDB " + pdb.Name, func() error {
			_, err := w.kc.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Create(ctx, pdb, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}},
		{"validating webhook configuration " + vwc.Name, func() error {
			_, err := w.kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}},
	}
	for _, s := range steps {
		if err := create(s.what, s.do); err != nil {
			return err
		}
	}
	return nil
}

// createWorkloads creates the CNPG operator, the device plugin and the
// model Deployment with its Service.
func (w *World) createWorkloads(ctx context.Context) error {
	o := w.opts
	op := cnpgOperatorDeployment(o)
	if err := create("deployment "+op.Name, func() error {
		_, err := w.kc.AppsV1().Deployments(op.Namespace).Create(ctx, op, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}); err != nil {
		return err
	}
	ds := devicePluginDaemonSet(o)
	if err := create("daemonset "+ds.Name, func() error {
		_, err := w.kc.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}); err != nil {
		return err
	}
	dep, svc := modelObjects(o)
	if err := create("service "+svc.Name, func() error {
		_, err := w.kc.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}); err != nil {
		return err
	}
	return create("deployment "+dep.Name, func() error {
		_, err := w.kc.AppsV1().Deployments(dep.Namespace).Create(ctx, dep, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	})
}

func (w *World) createVIPLease(ctx context.Context, holder string) error {
	o := w.opts
	now := metav1.NewMicroTime(time.Now())
	secs := int32(o.VIPLeaseDuration / time.Second)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: o.Names.VIPLeaseName, Namespace: o.Names.VIPLeaseNamespace, Labels: worldLabels},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &secs,
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	return create("lease "+lease.Name, func() error {
		_, err := w.kc.CoordinationV1().Leases(lease.Namespace).Create(ctx, lease, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	})
}
