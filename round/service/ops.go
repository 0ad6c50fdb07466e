package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/nodeevents"
	"github.com/mcp-patch/mcp-patch/metrics"
	"github.com/mcp-patch/mcp-patch/notify"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/ops"
)

// wireOps builds the notifier (webhooks from the config), the metrics and
// the node Event recorder, hooks them to every journal the book opens, and
// returns what stops them (the worker, then the notifier, bounded).
func wireOps(ctx context.Context, d *Service) (func(), error) {
	hooks, err := notify.Hooks(d.Config.Notify, d.Getenv)
	if err != nil {
		return nil, err
	}
	var source metrics.Source = func() (*round.State, error) { return nil, nil }
	if d.Book != nil {
		source = d.Book.OpenState
	}
	m := metrics.New(source, metrics.Options{Expected: ops.ExpectedWindow, Now: d.Now, Process: true})
	n := notify.New(hooks, notify.Options{
		Log: d.Log, Now: d.Now,
		Observe: func(dl notify.Delivery) { m.Notified(dl.Hook, string(dl.Kind), dl.Sent) },
		Record:  d.RecordNotification,
	})
	var (
		mu  sync.Mutex
		rec *nodeevents.Recorder
	)
	nodes := func(ctx context.Context) (*nodeevents.Recorder, error) {
		mu.Lock()
		defer mu.Unlock()
		if rec != nil {
			return rec, nil
		}
		cl, err := d.Cluster(ctx)
		if err != nil {
			return nil, err
		}
		rec = nodeevents.New(cl.Kube, d.Identity, d.Log)
		return rec, nil
	}
	if d.Cluster == nil {
		nodes = nil
	}
	d.Ops = ops.New(n, m, nodes, d.Log)
	d.Ops.Alerts = d.alertSource
	if d.Config != nil {
		d.Ops.Environment = d.Config.Environment
	}
	d.Ops.Settings = func(id string) *intent.AlertSettings {
		if d.Intent == nil {
			return nil
		}
		r, err := d.Intent(id)
		if err != nil {
			d.Log.Warn("intent unreadable: no window silence", "round", id, "err", err)
			return nil
		}
		st, err := r.RoundSettings()
		if err != nil {
			d.Log.Warn("intent settings unreadable: no window silence", "round", id, "err", err)
			return nil
		}
		return st.Alerts
	}
	if d.Book != nil {
		d.Book.Observe = d.Ops.Observe
	}
	octx, cancel := context.WithCancel(ctx)
	d.Ops.Start(octx)
	return func() {
		cancel()
		d.Ops.Wait()
		shut, done := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer done()
		if err := n.Close(shut); err != nil {
			d.Log.Warn("notifications still in flight at shutdown", "err", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if rec != nil {
			rec.Shutdown()
		}
	}, nil
}

// RecordNotification keeps a delivery's outcome in its round's journal.
func (d *Service) RecordNotification(dl notify.Delivery) error {
	if d.Book == nil || dl.Round == "" {
		return nil
	}
	j, err := d.Book.Journal(dl.Round, false)
	if err != nil {
		return fmt.Errorf("record notification in round %s: %w", dl.Round, err)
	}
	if _, err := j.Notification(dl.Node, dl.Detail()); err != nil {
		return fmt.Errorf("record notification in round %s: %w", dl.Round, err)
	}
	return nil
}
