package actors

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Watch reads a node's other maintainers on each call (Observe, Decide)
// and gives each hold a start: the cluster's time where it has one, else
// when this process first saw that holder on that node (a restart starts
// that count again). It keeps nothing else and writes nothing.
type Watch struct {
	Kube     kubernetes.Interface
	Dynamic  dynamic.Interface
	Identity string
	Kured    KuredRef
	Self     Self
	Now      func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time
}

// Holders answers round/window's Others.
func (w *Watch) Holders(ctx context.Context, node string) ([]Holder, error) {
	o, err := Observe(ctx, w.Kube, w.Dynamic, node, w.Identity, w.Kured)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	hs := Decide(o, w.Self, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]time.Time{}
	}
	current := map[string]bool{}
	for i := range hs {
		key := node + "\x00" + string(hs[i].Actor) + "\x00" + hs[i].Who
		current[key] = true
		first, ok := w.seen[key]
		if !ok {
			first = now
			w.seen[key] = now
		}
		if hs[i].Since.IsZero() {
			hs[i].Since = first
		}
	}
	for key := range w.seen {
		if len(key) > len(node) && key[:len(node)+1] == node+"\x00" && !current[key] {
			delete(w.seen, key) // let go: a later hold starts its own count
		}
	}
	return hs, nil
}
