// Package lab is the embedded lab: a fleet of emulated Ubuntu GPU servers
// reached over real SSH (lab/fleet; with Options.VMCanary the canary is a
// real Debian VM, lab/vm), a real control plane on loopback
// (lab/cluster) with a 3-member etcd, the platform's workloads on it
// (lab/world), an intent repository copied from examples/intent, and a
// lab-only approval key. The unchanged production code drives it through
// an ordinary configuration file. It also holds the agent client that runs
// a round by following the tools' next steps. Production packages never
// import it.
package lab

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/examples"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/rbac"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/lab/vm"
	"github.com/mcp-patch/mcp-patch/lab/world"
	"github.com/mcp-patch/mcp-patch/lab/world/fromfleet"
	"github.com/mcp-patch/mcp-patch/policy"
)

// Options size and pace the lab. Zero values take the defaults.
type Options struct {
	// Dir holds everything the lab writes. Required.
	Dir string
	// ControlPlaneDir holds etcd's and the control plane's files, when they
	// are to outlive Dir (a lab that Reset starts anew on the same control
	// plane). Empty: Dir.
	ControlPlaneDir string
	// ControlPlanes, Canary and GPUServers: default 3, 1, 4.
	ControlPlanes, Canary, GPUServers int
	// RebootDowntime is how long a rebooting host is unreachable. Default 1s.
	RebootDowntime time.Duration
	// InstallStep is how long dpkg takes per package. Default 20ms.
	InstallStep time.Duration
	// RebootTimeout is how long trial_boot waits for a host before it calls
	// for console access. Default 2m.
	RebootTimeout time.Duration
	// GateSettle is how long a red gate is waited on before it stops the
	// round. Default 90s.
	GateSettle time.Duration
	// DrainTimeoutMinutes is written into the lab intent's drain settings.
	// Default 2.
	DrainTimeoutMinutes int
	// Alertmanager is the path of a real Alertmanager binary the lab runs
	// for the alert gate (FindAlertmanager finds the one scripts/setup.sh
	// builds). Empty: no Alertmanager, the gate reads no alerts.
	Alertmanager string
	// HostBinary is the executable the hosts' emulated commands (apt-get,
	// update-grub, nvidia-smi, ...) run: a build of lab/cmd/lab-host, which
	// starts in about a fifth of the time the whole server takes (a host
	// step starts a dozen of them). Empty: FindHostBinary's, else the
	// running executable (which must call fleet.HostCommandMain).
	HostBinary string
	// RBACRules are the permissions mcp-patch runs with in the lab, bound
	// to its ServiceAccount. Nil: the ones the project ships (kube/rbac.Rules,
	// deploy/kubernetes/rbac.yaml).
	RBACRules []rbac.Rule
	// VMCanary makes the canary GPU server (gpu-canary-1) a real Debian VM
	// under QEMU (lab/vm: real GRUB, kernels, systemd, apt, sshd) instead of
	// an emulated host; its Node is a kwok Node as the others'. Canary must
	// be 1. The image is built on first use (root, minutes).
	VMCanary bool
	// VMFirmware is what the VM canary boots with. "": UEFI, as GPU
	// servers do.
	VMFirmware vm.Firmware
	// OtherActors makes the lab's GPU servers shared with the others that
	// maintain nodes (lab/others.go): the emulated GPU servers take their
	// driver from the GPU Operator's driver container, whose precompiled
	// images a real OCI registry serves; the maintenance operator, kured
	// and their faults run on the control plane.
	OtherActors bool
	// DriverBuiltAtBoot: the driver container builds the driver at boot
	// from the running kernel's headers instead of pulling a precompiled
	// image (with OtherActors).
	DriverBuiltAtBoot bool
	// Environment is the environment of the intent repository's
	// environments.yaml the lab's server serves (config environment): its
	// kubeconfig context is named after it, as environments.yaml says.
	// Empty: the server serves the repository as one environment.
	Environment string
	// IntentRemote is a bare git repository the lab's intent working copy
	// is cloned from (SeedIntentRemote makes one), shared with the labs of
	// the other environments. Empty: the lab makes its own repository
	// from examples/intent.
	IntentRemote string
	// ApproverKey is the lab-only approval key file (NewApproverKey) the
	// lab's person signs with, shared with the labs of the other
	// environments (one person certifies staging's outcome and approves
	// production's steps). Empty: a key of the lab's own.
	ApproverKey string
	// Clock is the lab's clock, shared with the labs of the other
	// environments (a soak upstream runs on the same time). Nil: a clock
	// of its own.
	Clock *Clock
	// Logger gets the lab's events; Progress one line per stage.
	Logger   *slog.Logger
	Progress func(string)
}

// EnvHostBinary names a lab-host executable for the lab's hosts
// (Options.HostBinary); scripts/test.sh sets it.
const EnvHostBinary = "MCP_PATCH_LAB_HOST"

// HostBinaryName is the lab-host executable's name beside mcp-patch
// (scripts/demo.sh builds bin/mcp-patch-lab-host).
const HostBinaryName = "mcp-patch-lab-host"

// FindHostBinary finds a lab-host executable: the one $MCP_PATCH_LAB_HOST
// names (an error when it names no executable file), else
// mcp-patch-lab-host beside the running executable; "" when there is none
// (the running executable then plays the hosts' commands itself).
func FindHostBinary() (string, error) {
	if p := os.Getenv(EnvHostBinary); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("lab: $%s=%s is not an executable file (build it with: go build -o %s ./lab/cmd/lab-host)", EnvHostBinary, p, p)
		}
		return filepath.Abs(p)
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil
	}
	p := filepath.Join(filepath.Dir(self), HostBinaryName)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return p, nil
	}
	return "", nil
}

// Validate refuses a shape the lab cannot start, before anything starts
// (Up calls it after filling in the defaults).
func (o Options) Validate() error {
	switch {
	case o.ControlPlanes < 0 || o.Canary < 0 || o.GPUServers < 0:
		return fmt.Errorf("lab: host counts cannot be negative (control planes %d, canary %d, GPU servers %d)", o.ControlPlanes, o.Canary, o.GPUServers)
	case o.VMFirmware != "" && o.VMFirmware != vm.BIOS && o.VMFirmware != vm.UEFI:
		return fmt.Errorf("lab: the VM canary boots with %q or %q, not %q", vm.UEFI, vm.BIOS, o.VMFirmware)
	case o.VMCanary && o.Canary != 1:
		return fmt.Errorf("lab: the VM canary is the lab's one canary GPU server: the canary count must be 1, not %d", o.Canary)
	case o.Environment != "" && len(validation.IsDNS1123Label(o.Environment)) > 0:
		return fmt.Errorf("lab: environment %q is not an environment name (a DNS-1123 label)", o.Environment)
	}
	return nil
}

func (o *Options) defaults() {
	if o.ControlPlanes == 0 && o.Canary == 0 && o.GPUServers == 0 {
		o.ControlPlanes, o.Canary, o.GPUServers = 3, 1, 4
	}
	if o.RebootDowntime == 0 {
		o.RebootDowntime = time.Second
	}
	if o.InstallStep == 0 {
		o.InstallStep = 20 * time.Millisecond
	}
	if o.RebootTimeout == 0 {
		o.RebootTimeout = 2 * time.Minute
		if o.VMCanary {
			o.RebootTimeout = vmRebootTimeout
		}
	}
	if o.VMCanary && o.VMFirmware == "" {
		o.VMFirmware = vm.UEFI
	}
	if o.GateSettle == 0 {
		o.GateSettle = 90 * time.Second
	}
	if o.DrainTimeoutMinutes == 0 {
		o.DrainTimeoutMinutes = 2
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
}

// Lab is a running lab.
type Lab struct {
	Dir     string
	Cluster *cluster.Cluster
	Etcd    *cluster.EtcdCluster
	Fleet   *fleet.Fleet
	World   *world.World
	// IntentRepo is the lab's intent repository (a git working copy).
	IntentRepo string
	// ApproverKey is the lab-only key that signs approvals in the demo;
	// AllowedSigners lists it, labelled lab-only.
	ApproverKey    string
	AllowedSigners string
	// ServiceAccountKubeconfig authenticates as the mcp-patch
	// ServiceAccount, bound only to the roles the project ships
	// (Options.RBACRules); Config.Kubeconfig names it.
	ServiceAccountKubeconfig string
	// Config is mcp-patch's configuration for the lab; ConfigFile holds it.
	Config     config.Config
	ConfigFile string
	Clock      *Clock
	// Receiver gets every webhook notice the server sends.
	Receiver *Receiver
	// Alertmanager is the real Alertmanager the gate reads (nil without
	// Options.Alertmanager).
	Alertmanager *Alertmanager
	// VMCanary is the canary GPU server when it is the real VM
	// (Options.VMCanary); nil otherwise.
	VMCanary *VMCanary
	// Inventory is the SSH inventory the configuration names: the fleet's,
	// and the VM canary's entry when there is one.
	Inventory string
	// Environment is the environment the lab's server serves
	// (Options.Environment); empty: none named.
	Environment string

	// drivers is the driver container with its registry (OtherActors).
	drivers *drivers
	// kuredHeld is the kured lock fault kured-lock-held took, by node.
	kuredHeld map[string]string

	firing      string       // the alert alert-firing fires
	maintenance [2]time.Time // the window window-closes declared: start, end

	approver ssh.Signer
	// closers stop what upRest started, controlPlane etcd and the control
	// plane; started is every object the cluster held once it was up
	// (what Reset returns it to).
	closers, controlPlane []func() error
	started               map[objectKey]bool
}

// Clock is the lab's clock: real time plus an offset the lab can advance
// (the soak is shortened by moving the clock, not by changing the intent).
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the lab's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// AdvanceTo moves the clock forward to t (never backwards).
func (c *Clock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := time.Until(t) - c.offset; d > 0 {
		c.offset += d
	}
}

// Up starts the lab. On error everything started is stopped.
func Up(ctx context.Context, opts Options) (l *Lab, err error) {
	opts.defaults()
	if opts.Dir == "" {
		return nil, errors.New("lab: Options.Dir is required")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := markDir(opts.Dir); err != nil {
		return nil, err
	}
	cpDir := opts.ControlPlaneDir
	if cpDir == "" {
		cpDir = opts.Dir
	} else if err := markDir(cpDir); err != nil {
		return nil, err
	}
	started := &Lab{Dir: opts.Dir}
	l = started
	defer func() {
		if err != nil {
			started.Close() // l is nil by now: a failed Up returns no lab
		}
	}()
	say := opts.Progress
	say("control plane: finding or building etcd, kube-apiserver, controller-manager, scheduler, kwok (first time: minutes)")
	bins, err := cluster.FindBinaries(ctx, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("lab: control-plane binaries: %w", err)
	}
	say("etcd: 3 members on loopback (client TLS like kubeadm)")
	l.Etcd, err = cluster.StartEtcdCluster(ctx, cluster.EtcdOptions{Members: 3, Dir: filepath.Join(cpDir, "etcd"), BinDir: bins.Dir, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("lab: etcd: %w", err)
	}
	l.controlPlane = append(l.controlPlane, l.Etcd.Stop)
	say("kube-apiserver, controller-manager, scheduler, kwok")
	l.Cluster, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(cpDir, "cluster"), BinDir: bins.Dir, Etcd: l.Etcd, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("lab: control plane: %w", err)
	}
	l.controlPlane = append(l.controlPlane, l.Cluster.Stop)
	if l.started, err = l.settledObjects(ctx); err != nil {
		return nil, fmt.Errorf("lab: control plane: %w", err)
	}
	if err := l.upRest(ctx, opts); err != nil {
		return nil, err
	}
	return l, nil
}

// markDir creates dir and marks it as a lab directory (see Fresh).
func markDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, MarkerFile), []byte(markerText), 0o644); err != nil {
		return fmt.Errorf("lab: mark %s as a lab directory: %w", dir, err)
	}
	return nil
}

// upRest starts everything of the lab but etcd and the control plane, which
// run: the fleet, the workloads, the receiver and Alertmanager, the intent
// repository, the approval key and the configuration. On error the caller
// closes what it started.
func (l *Lab) upRest(ctx context.Context, opts Options) (err error) {
	say := opts.Progress
	if opts.HostBinary == "" {
		if opts.HostBinary, err = FindHostBinary(); err != nil {
			return err
		}
	}
	l.Dir, l.Clock, l.Environment = opts.Dir, opts.Clock, opts.Environment
	if l.Clock == nil {
		l.Clock = &Clock{}
	}
	l.firing, l.maintenance = "", [2]time.Time{}
	l.Fleet, l.World, l.Receiver, l.Alertmanager, l.VMCanary, l.drivers, l.kuredHeld = nil, nil, nil, nil, nil, nil, nil
	if opts.VMCanary {
		say(fmt.Sprintf("VM canary: a real Debian 12 VM under QEMU (%s) as %s (first time: the image is built, minutes)", strings.ToUpper(string(opts.VMFirmware)), VMCanaryName))
		if l.VMCanary, err = startVMCanary(ctx, opts); err != nil {
			return err
		}
		l.closers = append(l.closers, l.VMCanary.Close)
		// The fleet's hosts are emulated; the canary is the VM.
		opts.Canary = 0
	}

	if err := l.startFleet(ctx, opts); err != nil {
		return err
	}
	if l.VMCanary != nil {
		say("VM canary: waiting for its sshd, then its name, operator key, sysctls, bond and played GPUs")
		start := time.Now()
		if err := l.provisionVMCanary(ctx); err != nil {
			return err
		}
		say(fmt.Sprintf("VM canary: %s up on %s after %s", VMCanaryName, l.VMCanary.VM.Image.OldKernel, time.Since(start).Round(time.Second)))
	}

	say("workloads: nodes, CloudNativePG cluster, admission webhook, model serving, kube-vip lease")
	var hosts []world.Host
	probes := map[string]world.HostProbe{}
	for _, h := range l.Fleet.Hosts() {
		role := world.RoleGPU
		if string(h.Role) == "control-plane" {
			role = world.RoleControlPlane
		}
		st, err := h.State()
		if err != nil {
			return err
		}
		hosts = append(hosts, world.Host{Name: h.Name, Role: role, Canary: h.Canary, Kernel: st.Kernel})
		probes[h.Name] = fleetProbe(h)
	}
	if c := l.VMCanary; c != nil {
		hosts = append(hosts, c.worldHost())
		probes[c.Name] = c.watch.probe
	}
	l.World, err = world.Setup(ctx, world.Options{Cluster: l.Cluster, Hosts: hosts, Etcd: l.Etcd, Probes: probes,
		RestartsOnReboot: true, Logger: opts.Logger})
	if err != nil {
		return fmt.Errorf("lab: workloads: %w", err)
	}
	l.closers = append(l.closers, l.World.Close)
	// Each control-plane host's 127.0.0.1:2379 reaches its etcd member, and
	// its /etc/kubernetes holds the real etcd certificates and apiserver
	// manifest, so snapshots and tunnels work as on a kubeadm node.
	fromfleet.ForwardEtcd(l.Fleet, l.Etcd)
	if err := fromfleet.InstallControlPlaneFiles(l.Fleet, l.Etcd, l.World); err != nil {
		return fmt.Errorf("lab: control-plane files on the hosts: %w", err)
	}

	if opts.OtherActors {
		say("other actors: the GPU Operator's driver container (precompiled images in a real OCI registry), the maintenance operator, kured")
		if err := l.startOthers(ctx, opts); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}

	if opts.Alertmanager != "" {
		say("webhook receiver and a real Alertmanager for the alert gate")
	} else {
		say("webhook receiver (no Alertmanager: the gate reads no alerts)")
	}
	if l.Receiver, err = startReceiver(); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	l.closers = append(l.closers, l.Receiver.Down)
	if opts.Alertmanager != "" {
		if l.Alertmanager, err = startAlertmanager(ctx, opts.Alertmanager, filepath.Join(opts.Dir, "alertmanager")); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		l.closers = append(l.closers, l.Alertmanager.Stop)
	}

	say("intent repository (from examples/intent) and a lab-only approval key")
	if err := l.writeIntentRepo(opts.DrainTimeoutMinutes, opts.IntentRemote); err != nil {
		return fmt.Errorf("lab: intent repository: %w", err)
	}
	if err := l.writeApprover(opts.ApproverKey); err != nil {
		return fmt.Errorf("lab: approval key: %w", err)
	}
	say("the mcp-patch ServiceAccount, bound to the shipped roles only")
	if err := l.bindServiceAccount(ctx, opts.RBACRules); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if opts.Environment != "" {
		if err := nameContext(l.ServiceAccountKubeconfig, opts.Environment); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	if err := l.writeConfig(opts); err != nil {
		return fmt.Errorf("lab: config: %w", err)
	}
	return nil
}

// startFleet starts the lab's hosts behind real SSH and provisions their
// sysctls.
func (l *Lab) startFleet(ctx context.Context, opts Options) (err error) {
	if l.VMCanary != nil {
		opts.Progress(fmt.Sprintf("hosts: %d control-plane and %d GPU servers behind real SSH on 127.0.0.1 (the canary is the VM)",
			opts.ControlPlanes, opts.GPUServers))
	} else {
		opts.Progress(fmt.Sprintf("hosts: %d control-plane, %d canary, %d GPU servers behind real SSH on 127.0.0.1",
			opts.ControlPlanes, opts.Canary, opts.GPUServers))
	}
	l.Fleet, err = fleet.New(ctx, fleet.Options{Dir: filepath.Join(opts.Dir, "fleet"), ControlPlanes: opts.ControlPlanes,
		Canary: opts.Canary, GPUServers: opts.GPUServers, RebootDowntime: opts.RebootDowntime, InstallStep: opts.InstallStep,
		TimerScale: 0.1, Logger: opts.Logger, ToolBinary: opts.HostBinary})
	if err != nil {
		return fmt.Errorf("lab: fleet: %w", err)
	}
	l.closers = append(l.closers, l.Fleet.Close)
	l.Inventory = l.Fleet.InventoryFile()
	if err := l.provisionSysctls(); err != nil {
		return fmt.Errorf("lab: sysctls: %w", err)
	}
	return nil
}

// fleetProbe reports a host as up while it answers SSH, with its kernel.
func fleetProbe(h *fleet.Host) world.HostProbe {
	return func() (bool, string) {
		switch h.Power() {
		case fleet.PowerUp, fleet.PowerShuttingDown:
			st, err := h.State()
			if err != nil {
				return true, ""
			}
			return true, st.Kernel
		}
		return false, ""
	}
}

// provisionSysctls writes the intent's sysctls into every host's
// /etc/sysctl.d, as the platform's provisioning would: they hold from the
// next boot on, which is what verify_node checks after the trial boot.
func (l *Lab) provisionSysctls() error {
	conf, err := platformSysctls()
	if err != nil {
		return err
	}
	for _, h := range l.Fleet.Hosts() {
		p := h.Path("/etc/sysctl.d/90-platform.conf")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// platformSysctls is /etc/sysctl.d/90-platform.conf: the os-layer intent's
// sysctls.
func platformSysctls() (string, error) {
	b, err := fs.ReadFile(examples.Intent, "intent/os-layer/settings.yaml")
	if err != nil {
		return "", err
	}
	st, err := intent.ParseSettings(b)
	if err != nil {
		return "", err
	}
	var conf strings.Builder
	conf.WriteString("# platform sysctls (os-layer intent)\n")
	if st.Node == nil {
		return conf.String(), nil
	}
	keys := make([]string, 0, len(st.Node.Sysctls))
	for k := range st.Node.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&conf, "%s = %s\n", k, st.Node.Sysctls[k])
	}
	return conf.String(), nil
}

// Hosts is how many hosts the lab has: the fleet's and the VM canary.
func (l *Lab) Hosts() int {
	n := len(l.Fleet.Hosts())
	if l.VMCanary != nil {
		n++
	}
	return n
}

// Close stops everything the lab started, in reverse order.
func (l *Lab) Close() error {
	err := l.Park()
	for i := len(l.controlPlane) - 1; i >= 0; i-- {
		err = errors.Join(err, l.controlPlane[i]())
	}
	l.controlPlane = nil
	return err
}

// Park stops everything the lab started but etcd and the control plane, in
// reverse order; Reset starts a lab on them again.
func (l *Lab) Park() error {
	var errs []error
	for i := len(l.closers) - 1; i >= 0; i-- {
		if err := l.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	l.closers = nil
	return errors.Join(errs...)
}

// jobWaitMinutes bounds the lab's wait for training jobs before a drain.
const jobWaitMinutes = 1

var (
	modelURLLine     = regexp.MustCompile(`(?m)^(\s*url:\s*).*$`)
	issuerURLLine    = regexp.MustCompile(`(?m)^(\s*issuer_url:\s*).*$`)
	drainTimeoutLine = regexp.MustCompile(`(?m)^(\s*timeout_minutes:\s*).*$`)
)

// writeIntentRepo copies examples/intent into the lab (or clones the
// shared intent remote, when there is one), points the model endpoint and
// the OIDC issuer at the lab's, and commits it on main.
func (l *Lab) writeIntentRepo(drainMinutes int, remote string) error {
	dir := filepath.Join(l.Dir, "intent")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if remote != "" {
		if err := git(l.Dir, "clone", "-q", "-b", "main", remote, dir); err != nil {
			return err
		}
	} else if err := copyExampleIntent(dir); err != nil {
		return err
	}
	edits := map[string]func(string) string{
		"os-layer/settings.yaml": func(s string) string {
			s = drainTimeoutLine.ReplaceAllString(s, "${1}"+strconv.Itoa(drainMinutes))
			// Training jobs hold a GPU server's drain (fault gpu-job-running),
			// for a bound the lab's tests can wait out.
			return strings.Replace(s, "\ndrain:\n", fmt.Sprintf("\ndrain:\n  wait_for_jobs:\n    selector: %s=%s\n    max_wait_minutes: %d\n",
				world.JobLabel, world.JobLabelValue, jobWaitMinutes), 1)
		},
	}
	// A preview (no workloads yet) keeps the example's model endpoint and
	// issuer: the host-side tools read neither.
	if l.World != nil {
		edits["gpu-fleet/settings.yaml"] = func(s string) string {
			s = modelURLLine.ReplaceAllString(s, "${1}"+l.World.ModelCompletionsURL())
			return l.driverSettings(s)
		}
		edits["control-plane/settings.yaml"] = func(s string) string {
			return issuerURLLine.ReplaceAllString(s, "${1}"+l.World.OIDCIssuer())
		}
	}
	for f, edit := range edits {
		p := filepath.Join(dir, f)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(edit(string(b))), 0o644); err != nil {
			return err
		}
	}
	steps := [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "Intent of the lab platform (from examples/intent)"}}
	if remote != "" {
		// The shared intent as this lab's cluster reaches it: the lab's
		// stand-in for the cluster's own DNS names and registry.
		steps = [][]string{{"add", "-A"}, {"commit", "-q", "-m", "lab: the endpoints of environment " + cmp.Or(l.Environment, "(none)") + "'s lab"}}
	}
	for _, args := range steps {
		if err := git(dir, args...); err != nil {
			return err
		}
	}
	l.IntentRepo = dir
	return nil
}

// copyExampleIntent writes examples/intent into dir.
func copyExampleIntent(dir string) error {
	sub, err := fs.Sub(examples.Intent, "intent")
	if err != nil {
		return err
	}
	return os.CopyFS(dir, sub)
}

// git runs git in dir as the lab, with no user configuration.
func git(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=lab", "GIT_AUTHOR_EMAIL=lab@mcp-patch.lab",
		"GIT_COMMITTER_NAME=lab", "GIT_COMMITTER_EMAIL=lab@mcp-patch.lab", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// nameContext renames the only context of the kubeconfig at path to name
// and makes it the current one: a lab serving an environment is reached as
// environments.yaml names its context.
func nameContext(path, name string) error {
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok {
		return fmt.Errorf("kubeconfig %s: no current context", path)
	}
	delete(kc.Contexts, kc.CurrentContext)
	kc.Contexts[name] = ctx
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return nil
}

// writeApprover makes the lab's approval key (or takes the one at
// keyFile, shared by the labs of several environments: the same person)
// and an allowed_signers file that lists it as lab-only.
func (l *Lab) writeApprover(keyFile string) error {
	var priv ed25519.PrivateKey
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return err
		}
		k, err := ssh.ParseRawPrivateKey(b)
		if err != nil {
			return fmt.Errorf("%s: %w", keyFile, err)
		}
		p, ok := k.(*ed25519.PrivateKey)
		if !ok {
			return fmt.Errorf("%s: not an ed25519 key", keyFile)
		}
		priv = *p
	} else {
		var err error
		if _, priv, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return err
		}
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return err
	}
	l.ApproverKey = filepath.Join(l.Dir, "approver_ed25519")
	if err := writeKey(l.ApproverKey, priv); err != nil {
		return err
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	l.AllowedSigners = filepath.Join(l.Dir, "allowed_signers")
	line := fmt.Sprintf("lab-approver@mcp-patch.lab namespaces=\"mcp-patch\" %s lab-only (signs approvals in the lab demo, never in production)\n", pub)
	l.approver = signer
	return os.WriteFile(l.AllowedSigners, []byte(line), 0o644)
}

// NewApproverKey writes a lab-only approval key at dir/approver_ed25519
// (and its .pub) for the labs of several environments to share
// (Options.ApproverKey): one person signs in each.
func NewApproverKey(dir string) (string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "approver_ed25519")
	return path, writeKey(path, priv)
}

// writeKey writes priv at path in OpenSSH's format, and its public key at
// path.pub.
func writeKey(path string, priv ed25519.PrivateKey) error {
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(priv, "lab approver")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return err
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	return os.WriteFile(path+".pub", []byte(pub+" lab approver\n"), 0o644)
}

// writeConfig writes mcp-patch's configuration for the lab.
func (l *Lab) writeConfig(opts Options) error {
	c := config.DefaultConfig()
	c.IntentRepo = l.IntentRepo
	c.Environment = opts.Environment
	c.StateDir = filepath.Join(l.Dir, "state")
	c.Identity = "mcp-patch-lab"
	c.SSH.KnownHosts = []string{l.Fleet.KnownHostsFile()}
	c.SSH.KeyFiles = []string{l.Fleet.OperatorKeyFile()}
	// The lab's hosts are its own: the user's ~/.ssh/config says nothing of them.
	c.SSH.OpenSSHConfig = "none"
	c.SSH.Inventory = l.Inventory
	c.SSH.RebootTimeout = config.Duration(opts.RebootTimeout)
	// The fault catalogue's dpkg lock holder is refused after this wait.
	c.SSH.DpkgLockTimeout = config.Duration(10 * time.Second)
	c.SSH.CommandTimeout = config.Duration(2 * time.Minute)
	if l.VMCanary != nil {
		c.SSH.KnownHosts = append(c.SSH.KnownHosts, l.VMCanary.VM.KnownHosts)
		// A host step on one emulated CPU of a loaded machine.
		c.SSH.CommandTimeout = config.Duration(10 * time.Minute)
	}
	c.Approvals.AllowedSigners = l.AllowedSigners
	c.Approvals.AllowLabOnly = true
	if l.Cluster == nil {
		// A preview: the hosts only, no cluster to configure.
		return l.saveConfig(c)
	}
	// mcp-patch is the ServiceAccount bound to the shipped roles only;
	// the lab's own clients (world, faults) keep the admin kubeconfig.
	c.Kubeconfig = l.ServiceAccountKubeconfig
	c.Kube.EtcdEndpoints = l.Etcd.Endpoints()
	c.Kube.EtcdCA, c.Kube.EtcdCert, c.Kube.EtcdKey = l.Etcd.CAFile, l.Etcd.ClientCertFile, l.Etcd.ClientKeyFile
	c.Kube.EvictRetry = config.Duration(time.Second)
	c.Kube.GateSettle = config.Duration(opts.GateSettle)
	if l.Alertmanager != nil {
		c.Kube.AlertmanagerURL = l.Alertmanager.URL()
	}
	// Notices go to the lab's receiver; short retries, so a receiver that
	// is down is journaled as failed within seconds.
	c.Notify.Webhooks = []config.Webhook{{Name: "lab-receiver", URL: l.Receiver.URL(),
		Timeout: config.Duration(2 * time.Second), Attempts: 2, Backoff: config.Duration(500 * time.Millisecond)}}
	ca := filepath.Join(l.Dir, "oidc-ca.pem")
	if err := os.WriteFile(ca, l.World.OIDCCAPEM(), 0o644); err != nil {
		return err
	}
	c.Kube.OIDCCAFile = ca
	return l.saveConfig(c)
}

// saveConfig validates c and writes it as the lab's configuration file.
func (l *Lab) saveConfig(c config.Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	l.Config = c
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	l.ConfigFile = filepath.Join(l.Dir, "mcp-patch.yaml")
	return os.WriteFile(l.ConfigFile, append([]byte("# mcp-patch configuration for the lab (written by mcp-patch lab up)\n"), b...), 0o644)
}

// Sign signs an approval request (or a statement) with the lab's key and
// returns the approval to hand back, as a person would with
// `mcp-patch approve`.
func (l *Lab) Sign(request string) (string, error) {
	req, err := policy.ParseRequest([]byte(request))
	if err != nil {
		return "", fmt.Errorf("lab sign: %w", err)
	}
	res, err := policy.Sign(l.approver, req.Canonical())
	if err != nil {
		return "", err
	}
	return policy.FormatApproval(req, res.Signature), nil
}

// FaultNames lists every fault the lab can inject, host and cluster side.
func FaultNames() []string {
	var out []string
	for _, f := range fleet.Faults() {
		out = append(out, f.Name)
	}
	for _, f := range world.Faults() {
		out = append(out, f.Name)
	}
	for _, f := range labFaults {
		out = append(out, f.name)
	}
	for _, f := range otherFaults {
		out = append(out, f.name)
	}
	return out
}

// Inject injects the named fault: a host fault on node, or a cluster fault
// (arg as the fault takes it).
func (l *Lab) Inject(ctx context.Context, name, node, arg string) error {
	if labFault(name) {
		return l.injectLab(ctx, name, arg, false)
	}
	if otherFault(name) {
		return l.injectOther(ctx, name, node, arg, false)
	}
	if f, err := fleet.FaultByName(name, arg); err == nil {
		h := l.Fleet.Host(node)
		if h == nil && l.VMCanary != nil && node == l.VMCanary.Name {
			return fmt.Errorf("fault %s: %s is the real VM, and the lab's host faults are played by the emulated hosts; on the VM, make it for real: %s", name, node, l.VMCanary.SSHCommand())
		}
		if h == nil {
			return fmt.Errorf("fault %s: name a lab host (--node), not %q", name, node)
		}
		return h.Inject(f)
	}
	f, err := world.FaultByName(name, arg)
	if err != nil {
		return fmt.Errorf("unknown fault %q (known: %s)", name, strings.Join(FaultNames(), ", "))
	}
	return l.World.Inject(ctx, f)
}

// Clear removes an injected fault.
func (l *Lab) Clear(ctx context.Context, name, node string) error {
	if labFault(name) {
		return l.injectLab(ctx, name, "", true)
	}
	if otherFault(name) {
		return l.injectOther(ctx, name, node, "", true)
	}
	if _, err := fleet.FaultByName(name, ""); err == nil {
		h := l.Fleet.Host(node)
		if h == nil {
			return fmt.Errorf("clear %s: name a lab host", name)
		}
		return h.Clear(name)
	}
	return l.World.Clear(ctx, name)
}
