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
	"github.com/mcp-patch/mcp-patch/lab/maintainers"
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
	{"gpu-operator-upgrading-node", "the GPU Operator's upgrade controller upgrades the node's driver (label " + maintainers.LabelGPUDriverUpgradeState + "=<arg, default drain-required>, the node cordoned by it); clear: upgrade-done"},
	{"node-maintenance-held", "the network operator's NodeMaintenance holds the node (requestor " + maintainers.NetworkOperator.ID + ", cordon: true), served by the maintenance operator; clear: deleted"},
	{"kured-lock-held", "kured holds its reboot lock (" + maintainers.KuredLockAnnotation + " on its DaemonSet) for the node (or the node <arg>) while it reboots it; clear: released"},
	{"cordoned-by-a-person", "a person cordons the node, the reason in " + maintainers.PersonCordonReason + " (<arg>, or an RMA); clear: the person uncordons it"},
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

// startOthers registers the other actors' resources (the real
// NodeMaintenance and ClusterPolicy CRDs, the sample ClusterPolicy,
// kured's DaemonSet), runs the maintenance operator stand-in and the
// driver container until the lab closes.
func (l *Lab) startOthers(ctx context.Context, opts Options) error {
	if err := maintainers.Install(ctx, l.Cluster); err != nil {
		return fmt.Errorf("other actors: %w", err)
	}
	op := &maintainers.Operator{Kube: l.Cluster.Client(), Dynamic: l.Cluster.Dynamic(), Logger: opts.Logger}
	run, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(run) }()
	l.closers = append(l.closers, func() error { stop(); return <-done })
	l.kuredHeld = map[string]string{}
	return l.startDrivers(ctx, opts)
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
func (l *Lab) injectOther(ctx context.Context, name, node, arg string, clear bool) error {
	d := l.drivers
	if d == nil || l.kuredHeld == nil {
		return fmt.Errorf("fault %s: this lab runs without the other actors (Options.OtherActors)", name)
	}
	if node == "" && name != "driver-image-missing" {
		return fmt.Errorf("fault %s: name the node (--node)", name)
	}
	kc, dyn := l.Cluster.Client(), l.Cluster.Dynamic()
	switch name {
	case "gpu-operator-upgrading-node":
		if clear {
			return maintainers.UpgradeDone(ctx, kc, node)
		}
		if arg == "" {
			arg = "drain-required"
		}
		return maintainers.GPUOperatorUpgrading(ctx, kc, node, arg)
	case "node-maintenance-held":
		if clear {
			return maintainers.ReleaseMaintenance(ctx, dyn, maintainers.NetworkOperator, node)
		}
		return maintainers.HoldMaintenance(ctx, kc, dyn, maintainers.NetworkOperator, node)
	case "kured-lock-held":
		if clear {
			held, ok := l.kuredHeld[node]
			if !ok {
				return fmt.Errorf("clear %s: the lab holds no kured lock for %s", name, node)
			}
			delete(l.kuredHeld, node)
			return maintainers.ReleaseKuredLock(ctx, kc, held)
		}
		if arg == "" {
			arg = node
		}
		if err := maintainers.HoldKuredLock(ctx, kc, arg); err != nil {
			return err
		}
		l.kuredHeld[node] = arg
		return nil
	case "cordoned-by-a-person":
		if clear {
			return maintainers.PersonUncordon(ctx, kc, node)
		}
		if arg == "" {
			arg = "RMA 4711: GPU 3 fell off the bus, the vendor replaces it on Thursday"
		}
		return maintainers.PersonCordon(ctx, kc, node, arg)
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
