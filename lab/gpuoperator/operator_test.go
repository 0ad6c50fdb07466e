package gpuoperator_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/driverimage"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
	"github.com/mcp-patch/mcp-patch/lab/gpuoperator"
	"github.com/mcp-patch/mcp-patch/lab/registry"
)

func TestMain(m *testing.M) { labkube.Main(m) }

const (
	oldK = "6.8.0-40-generic"
	newK = "6.8.0-45-generic"
)

type hosts struct {
	mu sync.Mutex
	m  map[string]gpuoperator.Host
}

func (h *hosts) read(context.Context) (map[string]gpuoperator.Host, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]gpuoperator.Host{}
	for k, v := range h.m {
		out[k] = v
	}
	return out, nil
}

func (h *hosts) set(node string, v gpuoperator.Host) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m[node] = v
}

// The stand-in on the real API server with the lab's real registry: a
// node whose kernel has a precompiled image gets a Ready driver pod, a
// node on a kernel without one a pod stuck on ImagePullBackOff; the image
// pushed, the same node's driver comes up; built at boot, the host's
// headers decide.
func TestDriverPodsFollowTheHostsKernelAndTheRegistry(t *testing.T) {
	c := labkube.Cluster(t)
	ctx := t.Context()
	ns := labkube.Namespace(t, c)
	reg, err := registry.Start(ctx, registry.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := reg.Push(ctx, "nvidia/driver", driverimage.Tag("550", oldK, "ubuntu22.04")); err != nil {
		t.Fatal(err)
	}
	labkube.Nodes(t, c, cluster.Node{Name: "gpuop-1"}, cluster.Node{Name: "gpuop-2"})
	h := &hosts{m: map[string]gpuoperator.Host{"gpuop-1": {Kernel: oldK}, "gpuop-2": {Kernel: newK}}}
	op := &gpuoperator.Operator{Kube: c.Client(), Namespace: ns, Branch: "550", OSTag: "ubuntu22.04", Precompiled: true,
		Image: driverimage.Image{Registry: reg.URL, Repository: "nvidia/driver"}, Hosts: h.read}
	wait := func(node, kernel string, want gpucheck.DriverPodState, says string) {
		t.Helper()
		if err := op.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := gpucheck.WaitDriverPod(ctx, c.Client(), node, gpucheck.DriverPodOptions{Namespace: ns, PodLabel: gpuoperator.PodLabel,
			Kernel: kernel, BootedAt: time.Now().Add(-time.Hour), Timeout: 2 * time.Minute, Poll: 200 * time.Millisecond, FailAfter: 20 * time.Second})
		if err != nil || res.State != want || !strings.Contains(res.Reason, says) {
			t.Fatalf("%s on %s: %+v %v, want %s ~%q", node, kernel, res, err, want, says)
		}
	}
	wait("gpuop-1", oldK, gpucheck.DriverReady, "with kernel "+oldK)
	wait("gpuop-2", newK, gpucheck.DriverFailed, "ImagePullBackOff")

	// NVIDIA publishes the image for the new kernel.
	if err := reg.Push(ctx, "nvidia/driver", driverimage.Tag("550", newK, "ubuntu22.04")); err != nil {
		t.Fatal(err)
	}
	wait("gpuop-2", newK, gpucheck.DriverReady, "with kernel "+newK)
	// gpuop-1 boots the new kernel: its driver comes from the new image.
	h.set("gpuop-1", gpuoperator.Host{Kernel: newK})
	wait("gpuop-1", newK, gpucheck.DriverReady, "with kernel "+newK)

	// Built at boot (another operator's namespace, another node): the
	// host's headers decide.
	labkube.Nodes(t, c, cluster.Node{Name: "gpuop-3"})
	ns = labkube.Namespace(t, c)
	h3 := &hosts{m: map[string]gpuoperator.Host{"gpuop-3": {Kernel: newK, Headers: false}}}
	op = &gpuoperator.Operator{Kube: c.Client(), Namespace: ns, Branch: "550", OSTag: "ubuntu22.04",
		Image: driverimage.Image{Registry: reg.URL, Repository: "nvidia/driver"}, Hosts: h3.read}
	wait("gpuop-3", newK, gpucheck.DriverFailed, "CrashLoopBackOff")
	h3.set("gpuop-3", gpuoperator.Host{Kernel: newK, Headers: true})
	wait("gpuop-3", newK, gpucheck.DriverReady, "with kernel "+newK)
}
