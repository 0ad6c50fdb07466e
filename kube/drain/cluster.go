package drain

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Cluster is the drain of one cluster as a value: what round/window's
// Cluster interface asks for, over a client.
type Cluster struct {
	Kube kubernetes.Interface
}

// PreviewDrain is Preview on c's cluster.
func (c Cluster) PreviewDrain(ctx context.Context, node string, pol Policy) (Evictions, error) {
	return Preview(ctx, c.Kube, node, pol)
}

// Drain is Drain on c's cluster.
func (c Cluster) Drain(ctx context.Context, node string, o Options, progress func(done, total int, msg string)) (Result, error) {
	return Drain(ctx, c.Kube, node, o, progress)
}

// CordonState is ReadState on c's cluster.
func (c Cluster) CordonState(ctx context.Context, node string) (State, error) {
	return ReadState(ctx, c.Kube, node)
}

// Cordon is Cordon on c's cluster: the node cordoned and recorded as this
// round's (a node already cordoned by this round stays so).
func (c Cluster) Cordon(ctx context.Context, node, round, identity string) error {
	_, err := Cordon(ctx, c.Kube, node, round, identity)
	return err
}

// HoldingPods is HoldingPods on c's cluster.
func (c Cluster) HoldingPods(ctx context.Context, node string, sel labels.Selector) ([]PodRef, error) {
	return HoldingPods(ctx, c.Kube, node, sel)
}
