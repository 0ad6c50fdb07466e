package world

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// BenchmarkSetup measures Setup on a fresh control plane (the control
// plane's own start is not counted), then how long the World takes to
// switch Postgres over once the primary's node is cordoned, and to show a
// down host's Node NotReady. Run with -benchtime=1x: each iteration needs
// its own cluster.
//
//	go test ./lab/world -run '^$' -bench Setup -benchtime=1x
func BenchmarkSetup(b *testing.B) {
	var setup, switchover, notReady time.Duration
	for range b.N {
		b.StopTimer()
		log := slog.New(slog.DiscardHandler)
		c := cluster.StartT(b, cluster.Options{Logger: log})
		e := cluster.StartEtcdClusterT(b, cluster.EtcdOptions{Members: 3, Logger: log})
		ctx := b.Context()
		b.StartTimer()
		start := time.Now()
		w, err := Setup(ctx, Options{Cluster: c, Etcd: e, Hosts: labHosts, SwitchoverDelay: time.Second, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		setup += time.Since(start)
		b.StopTimer()

		start = time.Now()
		cordon := []byte(`{"spec":{"unschedulable":true}}`)
		if _, err := c.Client().CoreV1().Nodes().Patch(ctx, "cp-3", types.MergePatchType, cordon, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		waitBench(b, func() bool {
			st, err := w.PostgresStatus(ctx)
			return err == nil && st.CurrentPrimary != "platform-pg-3" && st.CurrentPrimary == st.TargetPrimary
		})
		switchover += time.Since(start)

		start = time.Now()
		if err := w.SetHostUp("gpu-1", false, ""); err != nil {
			b.Fatal(err)
		}
		waitBench(b, func() bool {
			n, err := c.Client().CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
			return err == nil && !kube.NodeReady(n)
		})
		notReady += time.Since(start)
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(setup.Seconds()/n, "setup-s")
	b.ReportMetric(switchover.Seconds()/n, "switchover-s")
	b.ReportMetric(notReady.Seconds()/n, "node-notready-s")
	b.Logf("per world: setup %v, switchover after cordon %v (1s of it the configured delay), node NotReady after host down %v",
		(setup / time.Duration(b.N)).Round(time.Millisecond), (switchover / time.Duration(b.N)).Round(time.Millisecond),
		(notReady / time.Duration(b.N)).Round(time.Millisecond))
}

func waitBench(b *testing.B, cond func() bool) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			b.Fatal(fmt.Errorf("condition not met: %w", ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
