package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/driverimage"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
	"github.com/mcp-patch/mcp-patch/lab/gpuoperator"
	"github.com/mcp-patch/mcp-patch/lab/registry"
	"github.com/mcp-patch/mcp-patch/lab/world"
)

// With Options.OtherActors the lab's GPU servers are not mcp-patch's alone:
// the emulated ones take their NVIDIA driver from the GPU Operator's driver
// container (lab/gpuoperator, its precompiled images in a real OCI
// registry, lab/registry), the maintenance operator serves NodeMaintenance
// requests, kured runs with its lock, and the faults below make each of
// them hold a node.

// Where the lab's driver container and its images are, as the demo's
// intent (examples/intent/gpu-fleet) names them.
const (
	// DriverContainerLabel marks the GPU servers whose driver is the
	// driver container (gpu.driver_container.node_label).
	DriverContainerLabel      = "platform.example.com/nvidia-driver"
	DriverContainerLabelValue = "container"
	DriverNamespace           = world.DefaultGPUOperatorNamespace
	DriverRepository          = "nvidia/driver"
	DriverOSTag               = "ubuntu24.04"
)

// otherFaults are the faults of the other actors, injected on a node.
var otherFaults = []struct {
	name, description string
}{
	{"driver-image-missing", "the precompiled driver image for the kernel the round installs is withdrawn from the lab's registry: the plan names it as a blocker before any cordon"},
	{"driver-build-fails", "the node's driver container fails to build the driver for any kernel but the one it runs now (built at boot): GPU acceptance is red after the trial boot"},
}

func otherFault(name string) bool {
	return slices.ContainsFunc(otherFaults, func(f struct{ name, description string }) bool { return f.name == name })
}

// drivers is the lab's driver container: its registry, the operator
// stand-in and the loop that keeps it in step with the hosts.
type drivers struct {
	registry *registry.Registry
	operator *gpuoperator.Operator
	// nodes are the GPU servers that use it.
	nodes []string
	// target is the kernel the round installs (its image is pushed).
	target string

	mu         sync.Mutex
	buildFails map[string]string // node → the kernel it built for when the fault began
	stop       context.CancelFunc
	done       chan struct{}
}

// startDrivers starts the registry, pushes a precompiled image for every
// kernel the driver-container servers have or are offered, labels those
// servers and runs the operator stand-in until the lab closes.
func (l *Lab) startDrivers(ctx context.Context, opts Options) (err error) {
	d := &drivers{buildFails: map[string]string{}}
	for _, h := range l.Fleet.Hosts() {
		if string(h.Role) == "control-plane" {
			continue
		}
		d.nodes = append(d.nodes, h.Name)
	}
	if len(d.nodes) == 0 {
		return nil
	}
	if d.registry, err = registry.Start(ctx, registry.Options{Dir: filepath.Join(opts.Dir, "registry")}); err != nil {
		return fmt.Errorf("driver registry: %w", err)
	}
	l.closers = append(l.closers, d.registry.Stop)
	kernels, target, err := fleetKernels(l.Fleet.Host(d.nodes[0]))
	if err != nil {
		return err
	}
	d.target = target
	for _, k := range kernels {
		if err := d.registry.Push(ctx, DriverRepository, driverimage.Tag(machine.NVIDIABranch, k, DriverOSTag)); err != nil {
			return fmt.Errorf("driver registry: %w", err)
		}
	}
	label, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{DriverContainerLabel: DriverContainerLabelValue}}})
	if err != nil {
		return err
	}
	for _, n := range d.nodes {
		if _, err := l.Cluster.Client().CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label %s as a driver-container server: %w", n, err)
		}
	}
	d.operator = &gpuoperator.Operator{Kube: l.Cluster.Client(), Namespace: DriverNamespace, Branch: machine.NVIDIABranch,
		OSTag: DriverOSTag, Precompiled: !opts.DriverBuiltAtBoot,
		Image: driverimage.Image{Registry: d.registry.URL, Repository: DriverRepository}, Hosts: l.driverHosts(d)}
	if err := d.operator.Sync(ctx); err != nil {
		return fmt.Errorf("driver container: %w", err)
	}
	loop, stop := context.WithCancel(context.Background())
	d.stop, d.done = stop, make(chan struct{})
	go func() {
		defer close(d.done)
		for {
			select {
			case <-loop.Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
			// A controller retries what failed: the next pass does.
			if err := d.operator.Sync(loop); err != nil && loop.Err() == nil {
				opts.Logger.Warn("driver container stand-in: sync failed; retrying", "err", err)
			}
		}
	}()
	l.closers = append(l.closers, func() error { stop(); <-d.done; return nil })
	l.drivers = d
	return nil
}

// fleetKernels are the kernel releases a host has installed or is offered
// (each gets a precompiled image), and the newest, the one a round installs.
func fleetKernels(h *fleet.Host) ([]string, string, error) {
	st, err := h.State()
	if err != nil {
		return nil, "", err
	}
	var ks []string
	for name, p := range st.Packages {
		if p.Kind == "image" && strings.HasPrefix(name, "linux-image-") && kernelRelease.MatchString(strings.TrimPrefix(name, "linux-image-")) {
			ks = append(ks, strings.TrimPrefix(name, "linux-image-"))
		}
	}
	if len(ks) == 0 {
		return nil, "", fmt.Errorf("%s offers no kernel image package", h.Name)
	}
	slices.SortFunc(ks, steps.CompareKernelReleases)
	return ks, ks[len(ks)-1], nil
}

var kernelRelease = regexp.MustCompile(`^\d+\.\d+\.\d+-\d+-[a-z]+$`)

// driverHosts reads the driver-container servers' hosts for the operator
// stand-in: the running kernel, its headers, the boot, the build fault. A
// host that is down keeps its last reading (its node's pods stay as they
// were while the kubelet is away).
func (l *Lab) driverHosts(d *drivers) func(context.Context) (map[string]gpuoperator.Host, error) {
	last := map[string]gpuoperator.Host{}
	return func(context.Context) (map[string]gpuoperator.Host, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, n := range d.nodes {
			h := l.Fleet.Host(n)
			if h == nil || h.Power() != fleet.PowerUp {
				continue
			}
			st, err := h.State()
			if err != nil {
				continue // mid-write or mid-boot: the next pass reads it
			}
			hp := st.Packages["linux-headers-"+st.Kernel]
			built, fails := d.buildFails[n]
			last[n] = gpuoperator.Host{Kernel: st.Kernel, Headers: hp != nil && hp.Version != "",
				BuildFails: fails && st.Kernel != built, BootID: st.BootID}
		}
		out := make(map[string]gpuoperator.Host, len(last))
		for k, v := range last {
			out[k] = v
		}
		return out, nil
	}
}

// injectOther injects (or clears) one of otherFaults on node.
func (l *Lab) injectOther(ctx context.Context, name, node string, clear bool) error {
	d := l.drivers
	if d == nil {
		return fmt.Errorf("fault %s: this lab runs without the other actors (Options.OtherActors)", name)
	}
	switch name {
	case "driver-image-missing":
		tag := driverimage.Tag(machine.NVIDIABranch, d.target, DriverOSTag)
		if clear {
			return d.registry.Push(ctx, DriverRepository, tag)
		}
		return d.registry.Delete(ctx, DriverRepository, tag)
	case "driver-build-fails":
		if !d.operator.Precompiled && !slices.Contains(d.nodes, node) {
			return fmt.Errorf("fault %s: name a driver-container GPU server (%s), not %q", name, strings.Join(d.nodes, ", "), node)
		}
		if d.operator.Precompiled {
			return fmt.Errorf("fault %s: this lab's driver container pulls precompiled images (Options.DriverBuiltAtBoot builds them)", name)
		}
		h := l.Fleet.Host(node)
		st, err := h.State()
		if err != nil {
			return err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if clear {
			delete(d.buildFails, node)
		} else {
			d.buildFails[node] = st.Kernel
		}
		return nil
	}
	return errors.New("unknown fault " + name)
}

var (
	driverRegistryLine = regexp.MustCompile(`(?m)^(\s*registry:\s*).*$`)
	driverPrecompiled  = regexp.MustCompile(`(?m)^(\s*precompiled:\s*).*$`)
	driverReadyLine    = regexp.MustCompile(`(?m)^(\s*ready_timeout_seconds:\s*).*$`)
)

// driverSettings points the demo intent's gpu.driver_container at the
// lab's registry and driver source (a lab without the other actors keeps
// the example's: no node carries its label).
func (l *Lab) driverSettings(s string) string {
	d := l.drivers
	if d == nil {
		return s
	}
	s = driverRegistryLine.ReplaceAllString(s, "${1}"+d.registry.URL)
	s = driverPrecompiled.ReplaceAllString(s, fmt.Sprintf("${1}%t", d.operator.Precompiled))
	return driverReadyLine.ReplaceAllString(s, "${1}"+fmt.Sprint(driverReadySeconds))
}

// driverReadySeconds bounds the lab's wait for a driver pod after a boot
// (the example's 600 s is a real build's).
const driverReadySeconds = 180
