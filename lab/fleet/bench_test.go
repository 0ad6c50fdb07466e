package fleet

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkFleet200 starts 200 hosts (3 control planes, 1 canary, 196 GPU
// servers), then asks every one `uname -r` over its own SSH connection
// (32 at a time), and reports start time, the whole round of answers, and
// memory: the Go heap and the process RSS growth (SSH servers, host
// state), and the disk the host directories take.
func BenchmarkFleet200(b *testing.B) {
	for i := 0; i < b.N; i++ {
		runtime.GC()
		rss0 := rssBytes()
		var ms0 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		start := time.Now()
		f := newTestFleet(b, Options{ControlPlanes: 3, Canary: 1, GPUServers: 196, Parallelism: 16})
		startDur := time.Since(start)
		runtime.GC()
		var ms1 runtime.MemStats
		runtime.ReadMemStats(&ms1)
		rss1 := rssBytes()

		askStart := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		errs := make(chan error, len(f.Hosts()))
		for _, h := range f.Hosts() {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c, err := dial(b, f, h, "root")
				if err != nil {
					errs <- fmt.Errorf("%s: %w", h.Name, err)
					return
				}
				defer c.Close()
				s, err := c.NewSession()
				if err != nil {
					errs <- err
					return
				}
				out, err := s.Output("uname -r")
				if err != nil || string(out) != OldKernel+"\n" {
					errs <- fmt.Errorf("%s: uname -r = %q, %v", h.Name, out, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		askDur := time.Since(askStart)
		disk := dirSize(f.Dir())

		b.ReportMetric(startDur.Seconds(), "start-s")
		b.ReportMetric(askDur.Seconds(), "uname-all-s")
		b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc)/float64(len(f.Hosts()))/1024, "heap-KiB/host")
		b.ReportMetric(float64(rss1-rss0)/1e6, "rss-growth-MB")
		b.ReportMetric(float64(disk)/float64(len(f.Hosts()))/1024, "disk-KiB/host")
		f.Close()
	}
}

func rssBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n * 1024
		}
	}
	return 0
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
