package gate

import (
	"context"
	"fmt"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// WebhookConfig tunes the webhook check.
type WebhookConfig struct {
	// Ignore lists webhook configuration names (Validating or Mutating) to
	// leave out.
	Ignore []string
}

type webhookTarget struct {
	namespace, service string
	users              []string // "validating/<config>/<webhook>"
	failClosed         bool
}

// CheckWebhooks follows every admission webhook that calls an in-cluster
// service to the Deployment behind it (the one whose pod template labels the
// service selector matches) and requires it at full ready replicas. A
// webhook called by URL cannot be followed and is a warning.
func CheckWebhooks(ctx context.Context, kc kubernetes.Interface, cfg WebhookConfig) Check {
	return timed(func() Check {
		c := Check{Name: NameWebhooks}
		ignore := map[string]bool{}
		for _, n := range cfg.Ignore {
			ignore[n] = true
		}
		targets := map[string]*webhookTarget{}
		add := func(kind, config, hook string, cc admissionregistrationv1.WebhookClientConfig, fp *admissionregistrationv1.FailurePolicyType) {
			user := kind + "/" + config + "/" + hook
			if cc.Service == nil {
				url := ""
				if cc.URL != nil {
					url = *cc.URL
				}
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s calls URL %s, not a cluster service: not checked", user, url))
				return
			}
			key := cc.Service.Namespace + "/" + cc.Service.Name
			t := targets[key]
			if t == nil {
				t = &webhookTarget{namespace: cc.Service.Namespace, service: cc.Service.Name}
				targets[key] = t
			}
			t.users = append(t.users, user)
			// The API default is Fail.
			if fp == nil || *fp == admissionregistrationv1.Fail {
				t.failClosed = true
			}
		}
		vl, err := kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
		if err != nil {
			c.Reason = fmt.Sprintf("list validating webhook configurations: %v", err)
			return c
		}
		for _, cfg := range vl.Items {
			if ignore[cfg.Name] {
				continue
			}
			for _, w := range cfg.Webhooks {
				add("validating", cfg.Name, w.Name, w.ClientConfig, w.FailurePolicy)
			}
		}
		ml, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
		if err != nil {
			c.Reason = fmt.Sprintf("list mutating webhook configurations: %v", err)
			return c
		}
		for _, cfg := range ml.Items {
			if ignore[cfg.Name] {
				continue
			}
			for _, w := range cfg.Webhooks {
				add("mutating", cfg.Name, w.Name, w.ClientConfig, w.FailurePolicy)
			}
		}
		if len(targets) == 0 {
			c.Evidence = append(c.Evidence, "no admission webhook calls an in-cluster service")
			c.OK = true
			return c
		}

		deployments := map[string][]appsv1.Deployment{}
		var bad []string
		keys := make([]string, 0, len(targets))
		for k := range targets {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t := targets[k]
			sort.Strings(t.users)
			line, problem, err := judgeWebhookService(ctx, kc, t, deployments)
			if err != nil {
				c.Reason = err.Error()
				return c
			}
			c.Evidence = append(c.Evidence, line)
			if problem != "" {
				bad = append(bad, problem)
			}
		}
		if len(bad) > 0 {
			c.Reason = strings.Join(bad, "; ")
			return c
		}
		c.OK = true
		return c
	})
}

func judgeWebhookService(ctx context.Context, kc kubernetes.Interface, t *webhookTarget, cache map[string][]appsv1.Deployment) (evidence, problem string, err error) {
	svcName := t.namespace + "/" + t.service
	used := "used by " + strings.Join(t.users, ", ")
	policy := "failurePolicy Ignore"
	if t.failClosed {
		policy = "failurePolicy Fail"
	}
	svc, err := kc.CoreV1().Services(t.namespace).Get(ctx, t.service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		msg := fmt.Sprintf("service %s missing (%s; %s)", svcName, used, policy)
		return msg, msg, nil
	}
	if err != nil {
		return "", "", fmt.Errorf("get webhook service %s: %w", svcName, err)
	}
	if len(svc.Spec.Selector) == 0 {
		msg := fmt.Sprintf("service %s has no selector: cannot find its Deployment (%s)", svcName, used)
		return msg, msg, nil
	}
	deps, ok := cache[t.namespace]
	if !ok {
		l, err := kc.AppsV1().Deployments(t.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", "", fmt.Errorf("list deployments in %s: %w", t.namespace, err)
		}
		deps = l.Items
		cache[t.namespace] = deps
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var lines, problems []string
	for _, d := range deps {
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		st := d.Status
		lines = append(lines, fmt.Sprintf("deployment %s/%s ready %d/%d (available %d, updated %d)",
			d.Namespace, d.Name, st.ReadyReplicas, want, st.AvailableReplicas, st.UpdatedReplicas))
		switch {
		case want == 0:
			problems = append(problems, fmt.Sprintf("deployment %s/%s behind webhook service %s is scaled to 0", d.Namespace, d.Name, svcName))
		case st.ReadyReplicas < want:
			problems = append(problems, fmt.Sprintf("deployment %s/%s behind webhook service %s has %d of %d replicas ready",
				d.Namespace, d.Name, svcName, st.ReadyReplicas, want))
		}
	}
	if len(lines) == 0 {
		msg := fmt.Sprintf("no Deployment in %s matches service %s selector %s (%s)", t.namespace, svcName, sel, used)
		return msg, msg, nil
	}
	evidence = fmt.Sprintf("service %s (%s; %s): %s", svcName, used, policy, strings.Join(lines, "; "))
	return evidence, strings.Join(problems, "; "), nil
}
