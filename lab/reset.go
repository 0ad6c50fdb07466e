package lab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
)

// A lab's etcd and control plane (3 etcd members, kube-apiserver,
// controller manager, scheduler, kwok) are most of Up's time and CPU. Reset
// starts a lab anew on them: the cluster goes back to the objects it held
// once it was up (every object made since is deleted, every etcd member a
// fault or a power-off stopped is started), and the fleet, the workloads,
// the intent repository and the rest are made as Up makes them.

// objectKey names one object of the cluster.
type objectKey struct {
	Resource        schema.GroupVersionResource
	Namespace, Name string
}

func (k objectKey) String() string {
	r := k.Resource.Resource
	if k.Resource.Group != "" {
		r += "." + k.Resource.Group
	}
	if k.Namespace != "" {
		return r + " " + k.Namespace + "/" + k.Name
	}
	return r + " " + k.Name
}

// clusterObject is an object as the reset sees it.
type clusterObject struct {
	key        objectKey
	deleting   bool
	finalizers bool
}

// resetWait bounds Reset's wait for the deleted objects to be gone.
const resetWait = 3 * time.Minute

// listedResources are the cluster's resources that can be listed and
// deleted, at their preferred versions. Events are left out: they are
// deleted with the rest but, written in the background by controllers,
// may come back (and nothing the lab runs reads another object's events).
func (l *Lab) listedResources() ([]schema.GroupVersionResource, error) {
	lists, err := l.Cluster.Client().Discovery().ServerPreferredResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, fmt.Errorf("discover resources: %w", err)
	}
	var out []schema.GroupVersionResource
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !hasVerbs(r.Verbs, "list", "delete") {
				continue
			}
			out = append(out, gv.WithResource(r.Name))
		}
	}
	return out, nil
}

func hasVerbs(have metav1.Verbs, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

func isEvents(r schema.GroupVersionResource) bool { return r.Resource == "events" }

// keptOnReset says whether Reset leaves an object alone: CustomResource
// definitions (the world installs the same ones again, and deleting one
// waits for all its objects' cleanup) and the APIServices the API server
// registers for them, and, in the namespaces the cluster started with, the
// default ServiceAccount and kube-root-ca.crt ConfigMap the controller
// manager makes in every namespace.
func (l *Lab) keptOnReset(k objectKey) bool {
	switch k.Resource.Resource {
	case "customresourcedefinitions", "apiservices":
		return true
	case "serviceaccounts", "configmaps":
		if k.Name != "default" && k.Name != "kube-root-ca.crt" {
			return false
		}
		return l.started[objectKey{Resource: namespacesResource, Name: k.Namespace}]
	}
	return false
}

var (
	namespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	podsResource       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// objects lists every object of the given resources.
func (l *Lab) objects(ctx context.Context, resources []schema.GroupVersionResource) ([]clusterObject, error) {
	var out []clusterObject
	for _, r := range resources {
		list, err := l.Cluster.Dynamic().Resource(r).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
			continue // a CRD being deleted
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", r, err)
		}
		for _, o := range list.Items {
			out = append(out, clusterObject{key: objectKey{r, o.GetNamespace(), o.GetName()},
				deleting: o.GetDeletionTimestamp() != nil, finalizers: len(o.GetFinalizers()) > 0})
		}
	}
	return out, nil
}

// settledObjects is the set of the cluster's objects once two listings a
// second apart agree (the controller manager makes some of its objects
// just after the control plane is up).
func (l *Lab) settledObjects(ctx context.Context) (map[objectKey]bool, error) {
	last, err := l.clusterObjects(ctx)
	if err != nil {
		return nil, err
	}
	for range 30 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		now, err := l.clusterObjects(ctx)
		if err != nil {
			return nil, err
		}
		if maps.Equal(now, last) {
			return now, nil
		}
		last = now
	}
	return last, nil
}

// clusterObjects is the set of the cluster's objects (events left out).
func (l *Lab) clusterObjects(ctx context.Context) (map[objectKey]bool, error) {
	resources, err := l.listedResources()
	if err != nil {
		return nil, err
	}
	objs, err := l.objects(ctx, resources)
	if err != nil {
		return nil, err
	}
	out := map[objectKey]bool{}
	for _, o := range objs {
		if !isEvents(o.key.Resource) {
			out[o.key] = true
		}
	}
	return out, nil
}

// Reset stops everything the lab started but etcd and the control plane
// (when Park has not), returns the cluster to the objects it held once it
// was up and every etcd member to running and healthy, and starts the rest
// of a lab on it anew for opts, as Up does (opts.Dir is the new lab's
// directory; ControlPlaneDir is the running control plane's and is not
// read). On error the lab is closed whole.
func (l *Lab) Reset(ctx context.Context, opts Options) (err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
		}
	}()
	if l.Cluster == nil || l.started == nil {
		return errors.New("lab reset: the lab has no running control plane")
	}
	opts.defaults()
	if opts.Dir == "" {
		return errors.New("lab: Options.Dir is required")
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if err := markDir(opts.Dir); err != nil {
		return err
	}
	if err := l.Park(); err != nil {
		return fmt.Errorf("lab reset: stop the last lab: %w", err)
	}
	opts.Progress("etcd: every member running and healthy")
	if err := l.Etcd.StartStopped(ctx); err != nil {
		return fmt.Errorf("lab reset: %w", err)
	}
	opts.Progress("control plane: deleting every object made since it started")
	start := time.Now()
	if err := l.deleteSinceStart(ctx); err != nil {
		return fmt.Errorf("lab reset: %w", err)
	}
	opts.Progress(fmt.Sprintf("control plane: back to its start after %s", time.Since(start).Round(100*time.Millisecond)))
	return l.upRest(ctx, opts)
}

// deleteSinceStart deletes every object the cluster did not hold once it
// was up (admission webhooks first: theirs would refuse the rest once
// their server is gone), at once (no grace period), clearing the
// finalizers of what is held in deletion, and waits until none is left.
// A pod already being deleted gracefully (by the garbage collector or the
// namespace controller, a step ahead of the sweep) waits for kwok to
// confirm it; once its node is deleted too nobody would (the controller
// manager runs no pod GC: that would link the kubelet's packages), so it
// is deleted again, at once.
func (l *Lab) deleteSinceStart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, resetWait)
	defer cancel()
	resources, err := l.listedResources()
	if err != nil {
		return err
	}
	// Webhook configurations first, then the rest in one sweep per pass.
	sort.SliceStable(resources, func(i, j int) bool {
		return resources[i].Group == "admissionregistration.k8s.io" && resources[j].Group != "admissionregistration.k8s.io"
	})
	zero := int64(0)
	background := metav1.DeletePropagationBackground
	var left []string
	for pass := 0; ; pass++ {
		objs, err := l.objects(ctx, resources)
		if err != nil {
			return err
		}
		left = left[:0]
		// A namespace being deleted whose objects are all gone is finalized
		// here, as the controller manager's namespace controller would (it
		// backs off between its sweeps and took up to 90 s on a busy machine).
		inNamespace := map[string]int{}
		for _, o := range objs {
			if o.key.Namespace != "" && !l.started[o.key] && !l.keptOnReset(o.key) {
				inNamespace[o.key.Namespace]++
			}
		}
		for _, o := range objs {
			if o.key.Resource == namespacesResource && o.deleting && inNamespace[o.key.Name] == 0 {
				if err := l.finalizeNamespace(ctx, o.key.Name); err != nil {
					return err
				}
			}
		}
		for _, o := range objs {
			if l.started[o.key] || l.keptOnReset(o.key) {
				continue
			}
			if !isEvents(o.key.Resource) {
				left = append(left, o.key.String())
			}
			ri := l.Cluster.Dynamic().Resource(o.key.Resource).Namespace(o.key.Namespace)
			switch {
			case o.deleting && o.finalizers:
				_, err = ri.Patch(ctx, o.key.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			case !o.deleting, o.key.Resource == podsResource:
				err = ri.Delete(ctx, o.key.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &background})
			}
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("delete %s: %w", o.key, err)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			sort.Strings(left)
			return fmt.Errorf("%d objects made since the cluster started are still there after %s (%d passes): %s",
				len(left), resetWait, pass+1, strings.Join(left[:min(len(left), 20)], ", "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// finalizeNamespace removes the finalizers of a namespace being deleted
// that holds nothing any more, so that it goes at once.
func (l *Lab) finalizeNamespace(ctx context.Context, name string) error {
	ns, err := l.Cluster.Client().CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finalize namespace %s: %w", name, err)
	}
	if len(ns.Spec.Finalizers) == 0 {
		return nil
	}
	ns.Spec.Finalizers = nil
	_, err = l.Cluster.Client().CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("finalize namespace %s: %w", name, err)
	}
	return nil
}
