package cluster

import (
	corev1 "k8s.io/api/core/v1"
	"testing"
	"time"
)

// BenchmarkStart measures a full control-plane start (etcd, API server,
// controller manager, scheduler, kwok, one GPU node Ready) and reports the
// resident memory of all components right after.
//
//	go test -run '^$' -bench Start -benchtime 3x ./lab/cluster/
func BenchmarkStart(b *testing.B) {
	if _, err := FindBinaries(b.Context(), nil); err != nil {
		b.Fatal(err) // a build is not part of the figure
	}
	var rssTotal float64
	for b.Loop() {
		c, err := Start(b.Context(), Options{Nodes: []Node{{Name: "gpu-01", Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}}}})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		// Let the components settle past their start-up burst.
		time.Sleep(3 * time.Second)
		mem, err := c.MemoryBytes()
		if err != nil {
			b.Fatal(err)
		}
		var sum int64
		for name, rss := range mem {
			b.ReportMetric(float64(rss)/(1<<20), name+"-MiB")
			sum += rss
		}
		rssTotal = float64(sum) / (1 << 20)
		if err := c.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(rssTotal, "total-MiB")
}

// BenchmarkStartEtcdCluster measures starting a three-member TLS etcd
// cluster until every member is healthy, and reports its resident memory.
func BenchmarkStartEtcdCluster(b *testing.B) {
	bins, err := FindBinaries(b.Context(), nil)
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for b.Loop() {
		e, err := StartEtcdCluster(b.Context(), EtcdOptions{Members: 3, BinDir: bins.Dir})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		mem, err := e.MemoryBytes()
		if err != nil {
			b.Fatal(err)
		}
		var sum int64
		for _, rss := range mem {
			sum += rss
		}
		total = float64(sum) / (1 << 20)
		if err := e.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(total, "total-MiB")
}
