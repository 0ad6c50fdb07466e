package gate

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube"
)

// AcceptRebootRestarts raises the baseline's restart counts of the pods on
// node that are healthy now to what they show now: a node that was just
// rebooted on purpose restarts the containers that stayed on it (DaemonSet
// and static pods), and that alone is not a new failure. Pods that are not
// healthy keep their baseline, so a crash after the reboot still counts.
// It returns what it accepted, for the evidence.
func AcceptRebootRestarts(ctx context.Context, kc kubernetes.Interface, base *Baseline, node string) ([]string, error) {
	pods, err := kube.ListPods(ctx, kc, "", "spec.nodeName="+node)
	if err != nil {
		return nil, fmt.Errorf("list pods on %s: %w", node, err)
	}
	var accepted []string
	for i := range pods {
		p := &pods[i]
		key := p.Namespace + "/" + p.Name
		prev, ok := base.Pods[key]
		if !ok || prev.UID != string(p.UID) || !podHealthy(p) {
			continue
		}
		if r := restarts(p); r > prev.Restarts {
			accepted = append(accepted, fmt.Sprintf("%s restarted %d times with the reboot of %s", key, r-prev.Restarts, node))
			prev.Restarts = r
			base.Pods[key] = prev
		}
	}
	return accepted, nil
}
