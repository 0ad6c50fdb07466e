// Package nodeevents writes a node's patch history where Kubernetes users
// look for it: an Event on the Node for each window step (so `kubectl
// describe node` lists the round's drain, install, trial boot, promote...)
// and annotations with the round, the step and the kernel state. It writes
// nothing else: no cordon, no eviction, no labels; it must not know about
// approvals, SSH or the intent repository.
package nodeevents

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Annotations kept on each node a round touched.
const (
	AnnotationRound  = "mcp-patch.io/round"
	AnnotationStep   = "mcp-patch.io/step"
	AnnotationKernel = "mcp-patch.io/kernel"
)

// Component is the Event source.
const Component = "mcp-patch"

// Step is one window step's outcome on a node.
type Step struct {
	Node  string
	Round string
	// Step and State name what happened: "trial_boot", "done".
	Step, State string
	// Kernel is the kernel state in words: "trial 6.8.0-45-generic (default 6.8.0-40-generic)".
	Kernel string
	// Message is the Event's text; Warning marks a failure or a stop.
	Message string
	Warning bool
}

// Reason is the Event reason for a step and state: PatchDrainStarted,
// PatchTrialBootDone, PatchVerifyFailed...
func (s Step) Reason() string {
	return "Patch" + camel(s.Step) + camel(s.State)
}

func camel(s string) string {
	out := make([]byte, 0, len(s))
	up := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || c == '-' || c == ' ':
			up = true
			continue
		case up && c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}

// Recorder posts Events through client-go's event broadcaster (which
// aggregates repeats and retries in the background) and patches the
// annotations.
type Recorder struct {
	client      kubernetes.Interface
	broadcaster record.EventBroadcaster
	events      record.EventRecorder
	log         *slog.Logger
}

// New returns a Recorder; host names this server in each Event's source.
// Shutdown stops its background sender.
func New(client kubernetes.Interface, host string, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Recorder{client: client, broadcaster: b, log: log,
		events: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: host})}
}

// Shutdown stops the background Event sender.
func (r *Recorder) Shutdown() { r.broadcaster.Shutdown() }

// Ref is the reference Events about a node carry. The UID is the node's
// name, as the kubelet writes it; kubectl describe node finds both forms.
func Ref(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
}

// Record posts the Event for s and updates the node's annotations. The
// Event is queued (client-go sends it in the background); the annotation
// patch is made now and its error returned.
func (r *Recorder) Record(ctx context.Context, s Step) error {
	typ := corev1.EventTypeNormal
	if s.Warning {
		typ = corev1.EventTypeWarning
	}
	msg := s.Message
	if msg == "" {
		msg = fmt.Sprintf("round %s: %s %s", s.Round, s.Step, s.State)
	}
	r.events.Event(Ref(s.Node), typ, s.Reason(), msg)
	ann := map[string]any{AnnotationRound: s.Round, AnnotationStep: s.Step + ": " + s.State}
	if s.Kernel != "" {
		ann[AnnotationKernel] = s.Kernel
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return fmt.Errorf("annotate node %s: %w", s.Node, err)
	}
	if _, err := r.client.CoreV1().Nodes().Patch(ctx, s.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: Component}); err != nil {
		return fmt.Errorf("annotate node %s with its patch state: %w", s.Node, err)
	}
	return nil
}
