package main

// The lab's kube-controller-manager: the upstream controllers the lab
// relies on, wired here from their public constructors in
// k8s.io/kubernetes/pkg/controller/..., instead of the upstream command
// (k8s.io/kubernetes/cmd/kube-controller-manager/app), which links every
// built-in controller: in-tree volume plugins, cadvisor and kubelet
// packages, Jobs, CronJobs, HPA, pod GC and more, about 300 packages that
// nothing else in kube-controlplane needs and that the lab never uses.
// These controllers add about 90 (`go list -deps .` in this module: 2,608
// packages with the upstream command, 2,395 with this one).
//
// The controllers it runs (--controllers picks among them; upstream names):
//
//   - deployment-controller, replicaset-controller: Deployments get their
//     ReplicaSets and those their pods (the lab's workloads, the webhook,
//     the CNPG operator, the model).
//   - daemonset-controller: DaemonSet pods on the kwok nodes (the device
//     plugin); drains skip them.
//   - statefulset-controller: StatefulSet pods (the lab's world makes none
//     today; 4 packages, so that one behaves as in a real cluster).
//   - disruption-controller: PodDisruptionBudget status (disruptionsAllowed);
//     without it the eviction API refuses every eviction a PDB covers, and
//     drains evict through it.
//   - namespace-controller: deleting a namespace deletes what is in it and
//     then the namespace (lab resets, test clean-up).
//   - garbage-collector-controller: ownerReference cascades (deleting a
//     Deployment deletes its ReplicaSets and their pods), with its resource
//     monitors resynced from discovery as CRDs come and go.
//   - serviceaccount-controller: the "default" ServiceAccount of each
//     namespace; pod admission refuses pods until it exists.
//   - root-ca-certificate-publisher-controller: the kube-root-ca.crt
//     ConfigMap of each namespace.
//   - node-lifecycle-controller: Node taints from the Ready condition and
//     the heartbeats (node leases, status updates) kwok posts: a new node's
//     not-ready taint lifted once it is Ready, a powered-off host's NotReady
//     node tainted not-ready, a node whose heartbeats stop marked Unknown
//     and tainted unreachable (NoSchedule and NoExecute).
//   - taint-eviction-controller: evicts pods from nodes tainted NoExecute
//     once their tolerations run out.
//   - endpoints-controller, endpointslice-controller: a Service's endpoints
//     (the webhook's and the model's Services); they add no package.
//
// Everything else upstream runs by default (jobs, cronjobs, pod GC, HPA,
// resource quotas, volumes, CSR signing and approval, TTL, the legacy
// token controllers, ...) is not linked. Worker counts and periods are the
// upstream defaults (the v1alpha1 KubeControllerManagerConfiguration
// defaults). The command line is the part of upstream's the lab passes
// (lab/cluster/cluster.go), plus --controllers, --version and klog's -v,
// --vmodule and --log-flush-frequency; any other flag is refused. It logs to stderr with klog, as upstream, starting with
// a line that names the controllers it runs; it serves no healthz or
// metrics port and does no leader election.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	kcmconfigv1alpha1 "k8s.io/kube-controller-manager/config/v1alpha1"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	kcmconfig "k8s.io/kubernetes/pkg/controller/apis/config"
	kcmconfigscheme "k8s.io/kubernetes/pkg/controller/apis/config/scheme"
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
	"k8s.io/kubernetes/pkg/controller/daemon"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/disruption"
	"k8s.io/kubernetes/pkg/controller/endpoint"
	"k8s.io/kubernetes/pkg/controller/endpointslice"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	"k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/nodelifecycle"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/serviceaccount"
	"k8s.io/kubernetes/pkg/controller/statefulset"
	"k8s.io/kubernetes/pkg/controller/tainteviction"
)

// Worker counts and periods are upstream's: the defaults of the v1alpha1
// KubeControllerManagerConfiguration (upstreamConfig). These few are
// upstream's too, set where upstream sets them rather than in that
// configuration: flag defaults of cmd/kube-controller-manager/app/options,
// and constants of cmd/kube-controller-manager/app.
const (
	nodeEvictionRate          = 0.1  // --node-eviction-rate
	secondaryNodeEvictionRate = 0.01 // --secondary-node-eviction-rate
	largeClusterSizeThreshold = 50   // --large-cluster-size-threshold
	unhealthyZoneThreshold    = 0.55 // --unhealthy-zone-threshold

	// gcSyncPeriod: how often the garbage collector rereads discovery for
	// resources added or removed (CRDs), and its first wait for its
	// monitors to sync.
	gcSyncPeriod = 30 * time.Second
	// restMapperReset: how often the shared RESTMapper forgets discovery.
	restMapperReset = 30 * time.Second
	// serviceAccountWorkers, rootCAWorkers: upstream runs one worker each.
	serviceAccountWorkers = 1
	rootCAWorkers         = 1
)

// upstreamConfig is the upstream controller manager's configuration with
// nothing set: the v1alpha1 defaults, converted as upstream converts them.
func upstreamConfig() (*kcmconfig.KubeControllerManagerConfiguration, error) {
	var versioned kcmconfigv1alpha1.KubeControllerManagerConfiguration
	kcmconfigscheme.Scheme.Default(&versioned)
	var cfg kcmconfig.KubeControllerManagerConfiguration
	if err := kcmconfigscheme.Scheme.Convert(&versioned, &cfg, nil); err != nil {
		return nil, fmt.Errorf("upstream controller-manager defaults: %w", err)
	}
	cfg.NodeLifecycleController.NodeEvictionRate = nodeEvictionRate
	cfg.NodeLifecycleController.SecondaryNodeEvictionRate = secondaryNodeEvictionRate
	cfg.NodeLifecycleController.LargeClusterSizeThreshold = largeClusterSizeThreshold
	cfg.NodeLifecycleController.UnhealthyZoneThreshold = unhealthyZoneThreshold
	return &cfg, nil
}

// controllerNames are the controllers this manager runs, in start order.
var controllerNames = []string{
	names.ServiceAccountController,
	names.RootCACertificatePublisherController,
	names.NamespaceController,
	names.GarbageCollectorController,
	names.DeploymentController,
	names.ReplicaSetController,
	names.DaemonSetController,
	names.StatefulSetController,
	names.DisruptionController,
	names.NodeLifecycleController,
	names.TaintEvictionController,
	names.EndpointsController,
	names.EndpointSliceController,
}

// cmOptions is the command line.
type cmOptions struct {
	kubeconfig         string
	leaderElect        bool
	securePort         int
	serviceAccountKey  string
	rootCAFile         string
	clusterCIDR        string
	serviceClusterCIDR string
	controllers        []string
}

// newControllerManagerCommand is the lab's kube-controller-manager command.
func newControllerManagerCommand() *cobra.Command {
	o := &cmOptions{}
	cmd := &cobra.Command{
		Use:   "kube-controller-manager",
		Short: "the lab's kube-controller-manager: the upstream controllers the lab relies on",
		Long: "kube-controller-manager runs, against the API server its --kubeconfig names, the upstream\n" +
			"controllers the lab relies on: " + strings.Join(controllerNames, ", ") + ".\n" +
			"It takes only the flags below (the part of the upstream command line the lab passes);\n" +
			"any other flag is refused.",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			if err := o.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runControllerManager(ctx, o)
		},
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nthis kube-controller-manager is the lab's trimmed one (lab/controlplane/kube/controllermanager.go): it takes only the flags --help lists", err)
	})
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to the kubeconfig of the API server (required).")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Leader election: not supported, only false is accepted.")
	fs.IntVar(&o.securePort, "secure-port", 0, "Port for the healthz and metrics server: not supported, only 0 (no server) is accepted.")
	fs.StringVar(&o.serviceAccountKey, "service-account-private-key-file", "", "Accepted for the upstream command line; unused: the legacy token-Secret controller it enables upstream is not run.")
	fs.StringVar(&o.rootCAFile, "root-ca-file", "", "PEM CA bundle published in each namespace's kube-root-ca.crt ConfigMap (default: the kubeconfig's CA).")
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "Accepted for the upstream command line (checked); unused: node IPAM is not run, kwok assigns pod IPs.")
	fs.StringVar(&o.serviceClusterCIDR, "service-cluster-ip-range", "", "Accepted for the upstream command line (checked); unused: node IPAM is not run.")
	fs.StringSliceVar(&o.controllers, "controllers", []string{"*"}, "Controllers to run: '*' for all of "+strings.Join(controllerNames, ", ")+"; 'foo' runs foo, '-foo' leaves foo out.")
	return cmd
}

func (o *cmOptions) validate() error {
	var errs []error
	if o.kubeconfig == "" {
		errs = append(errs, errors.New("--kubeconfig is required"))
	}
	if o.leaderElect {
		errs = append(errs, errors.New("--leader-elect=true is not supported (the lab runs one controller manager)"))
	}
	if o.securePort != 0 {
		errs = append(errs, fmt.Errorf("--secure-port=%d is not supported: this build serves no healthz or metrics, pass --secure-port=0", o.securePort))
	}
	for flag, v := range map[string]string{"cluster-cidr": o.clusterCIDR, "service-cluster-ip-range": o.serviceClusterCIDR} {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			if _, _, err := net.ParseCIDR(c); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
			}
		}
	}
	if _, err := o.enabled(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// enabled resolves --controllers as upstream does: a name turns it on, a
// name after '-' turns it off, '*' turns on those not named.
func (o *cmOptions) enabled() ([]string, error) {
	on := map[string]bool{}
	star := false
	for _, c := range o.controllers {
		c = strings.TrimSpace(c)
		switch {
		case c == "*":
			star = true
			continue
		case c == "":
			continue
		}
		name, off := strings.CutPrefix(c, "-")
		if !slices.Contains(controllerNames, name) {
			return nil, fmt.Errorf("--controllers: %q is not one of this build's controllers (%s)", name, strings.Join(controllerNames, ", "))
		}
		on[name] = !off
	}
	var out []string
	for _, n := range controllerNames {
		if v, named := on[n]; (named && v) || (!named && star) {
			out = append(out, n)
		}
	}
	return out, nil
}

// cmContext is what the controllers share: as upstream, one typed informer
// factory, one metadata informer factory (the garbage collector's
// monitors), one RESTMapper refreshed from discovery, and a channel closed
// once the informers are started.
type cmContext struct {
	config           *restclient.Config
	cfg              *kcmconfig.KubeControllerManagerConfiguration
	informers        informers.SharedInformerFactory
	metadataInf      metadatainformer.SharedInformerFactory
	objectOrMetadata informerfactory.InformerFactory
	restMapper       *restmapper.DeferredDiscoveryRESTMapper
	informersStarted chan struct{}
	rootCA           []byte
}

// clientConfig is the config for one controller's client: upstream's, with
// the controller's name in the user agent.
func (c *cmContext) clientConfig(name string) *restclient.Config {
	return restclient.AddUserAgent(restclient.CopyConfig(c.config), name)
}

func (c *cmContext) client(name string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.clientConfig(name))
}

// runFunc runs a built controller until ctx is done.
type runFunc func(ctx context.Context)

// builders build each controller from the shared context: the upstream
// constructor, with the client name upstream gives it.
var builders = map[string]func(ctx context.Context, c *cmContext) (runFunc, error){
	names.DeploymentController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("deployment-controller")
		if err != nil {
			return nil, err
		}
		dc, err := deployment.NewDeploymentController(ctx, c.informers.Apps().V1().Deployments(), c.informers.Apps().V1().ReplicaSets(), c.informers.Core().V1().Pods(), cl)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) { dc.Run(ctx, int(c.cfg.DeploymentController.ConcurrentDeploymentSyncs)) }, nil
	},
	names.ReplicaSetController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("replicaset-controller")
		if err != nil {
			return nil, err
		}
		rc := replicaset.NewReplicaSetController(ctx, c.informers.Apps().V1().ReplicaSets(), c.informers.Core().V1().Pods(), cl, replicaset.BurstReplicas)
		return func(ctx context.Context) { rc.Run(ctx, int(c.cfg.ReplicaSetController.ConcurrentRSSyncs)) }, nil
	},
	names.DaemonSetController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("daemon-set-controller")
		if err != nil {
			return nil, err
		}
		dc, err := daemon.NewDaemonSetsController(ctx, c.informers.Apps().V1().DaemonSets(), c.informers.Apps().V1().ControllerRevisions(),
			c.informers.Core().V1().Pods(), c.informers.Core().V1().Nodes(), cl, flowcontrol.NewBackOff(time.Second, 15*time.Minute))
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) { dc.Run(ctx, int(c.cfg.DaemonSetController.ConcurrentDaemonSetSyncs)) }, nil
	},
	names.StatefulSetController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("statefulset-controller")
		if err != nil {
			return nil, err
		}
		sc := statefulset.NewStatefulSetController(ctx, c.informers.Core().V1().Pods(), c.informers.Apps().V1().StatefulSets(),
			c.informers.Core().V1().PersistentVolumeClaims(), c.informers.Apps().V1().ControllerRevisions(), cl)
		return func(ctx context.Context) { sc.Run(ctx, int(c.cfg.StatefulSetController.ConcurrentStatefulSetSyncs)) }, nil
	},
	names.DisruptionController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("disruption-controller")
		if err != nil {
			return nil, err
		}
		// The scale client finds the replica count of a PDB's pods'
		// controller when it is not one of the built-in kinds.
		scaleClient, err := scale.NewForConfig(c.clientConfig("disruption-controller"), c.restMapper,
			dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(cl.Discovery()))
		if err != nil {
			return nil, err
		}
		dc := disruption.NewDisruptionController(ctx, c.informers.Core().V1().Pods(), c.informers.Policy().V1().PodDisruptionBudgets(),
			c.informers.Core().V1().ReplicationControllers(), c.informers.Apps().V1().ReplicaSets(), c.informers.Apps().V1().Deployments(),
			c.informers.Apps().V1().StatefulSets(), cl, c.restMapper, scaleClient, cl.Discovery())
		return func(ctx context.Context) { dc.Run(ctx, int(c.cfg.DisruptionController.ConcurrentDisruptionSyncs)) }, nil
	},
	names.NamespaceController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		// Deleting a namespace's content is many calls: upstream lifts this
		// controller's client limits 20-fold (QPS) and 100-fold (burst).
		cfg := c.clientConfig("namespace-controller")
		cfg.QPS *= 20
		cfg.Burst *= 100
		cl, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		md, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		nc := namespace.NewNamespaceController(ctx, cl, md, cl.Discovery().ServerPreferredNamespacedResources,
			c.informers.Core().V1().Namespaces(), c.cfg.NamespaceController.NamespaceSyncPeriod.Duration, corev1.FinalizerKubernetes)
		return func(ctx context.Context) { nc.Run(ctx, int(c.cfg.NamespaceController.ConcurrentNamespaceSyncs)) }, nil
	},
	names.GarbageCollectorController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("generic-garbage-collector")
		if err != nil {
			return nil, err
		}
		// Each deletion is two calls: upstream doubles this client's QPS.
		cfg := c.clientConfig("generic-garbage-collector")
		cfg.QPS *= 2
		md, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		gb := garbagecollector.NewDependencyGraphBuilder(ctx, md, c.restMapper, garbagecollector.DefaultIgnoredResources(),
			c.objectOrMetadata, c.informersStarted)
		gc, err := garbagecollector.NewComposedGarbageCollector(ctx, cl, md, c.restMapper, gb)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) {
			var wg sync.WaitGroup
			wg.Go(func() { gc.Run(ctx, int(c.cfg.GarbageCollectorController.ConcurrentGCSyncs), gcSyncPeriod) })
			// Resync the monitors with discovery (CRDs added or removed).
			wg.Go(func() { gc.Sync(ctx, cl.Discovery(), gcSyncPeriod) })
			wg.Wait()
		}, nil
	},
	names.ServiceAccountController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("service-account-controller")
		if err != nil {
			return nil, err
		}
		sc, err := serviceaccount.NewServiceAccountsController(klog.FromContext(ctx), c.informers.Core().V1().ServiceAccounts(),
			c.informers.Core().V1().Namespaces(), cl, serviceaccount.DefaultServiceAccountsControllerOptions())
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) { sc.Run(ctx, serviceAccountWorkers) }, nil
	},
	names.RootCACertificatePublisherController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("root-ca-cert-publisher")
		if err != nil {
			return nil, err
		}
		p, err := rootcacertpublisher.NewPublisher(c.informers.Core().V1().ConfigMaps(), c.informers.Core().V1().Namespaces(), cl, c.rootCA)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) { p.Run(ctx, rootCAWorkers) }, nil
	},
	names.NodeLifecycleController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("node-controller")
		if err != nil {
			return nil, err
		}
		nl := c.cfg.NodeLifecycleController
		nc, err := nodelifecycle.NewNodeLifecycleController(ctx, c.informers.Coordination().V1().Leases(), c.informers.Core().V1().Pods(),
			c.informers.Core().V1().Nodes(), c.informers.Apps().V1().DaemonSets(), cl,
			nl.NodeMonitorPeriod.Duration, nl.NodeStartupGracePeriod.Duration, nl.NodeMonitorGracePeriod.Duration,
			nl.NodeEvictionRate, nl.SecondaryNodeEvictionRate, nl.LargeClusterSizeThreshold, nl.UnhealthyZoneThreshold)
		if err != nil {
			return nil, err
		}
		return nc.Run, nil
	},
	names.TaintEvictionController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		// Upstream's taint eviction uses the node controller's client and role.
		cl, err := c.client("node-controller")
		if err != nil {
			return nil, err
		}
		tc, err := tainteviction.New(ctx, cl, c.informers.Core().V1().Pods(), c.informers.Core().V1().Nodes(), names.TaintEvictionController)
		if err != nil {
			return nil, err
		}
		return tc.Run, nil
	},
	names.EndpointsController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("endpoint-controller")
		if err != nil {
			return nil, err
		}
		ec := endpoint.NewEndpointController(ctx, c.informers.Core().V1().Pods(), c.informers.Core().V1().Services(),
			c.informers.Core().V1().Endpoints(), cl, c.cfg.EndpointController.EndpointUpdatesBatchPeriod.Duration)
		return func(ctx context.Context) { ec.Run(ctx, int(c.cfg.EndpointController.ConcurrentEndpointSyncs)) }, nil
	},
	names.EndpointSliceController: func(ctx context.Context, c *cmContext) (runFunc, error) {
		cl, err := c.client("endpointslice-controller")
		if err != nil {
			return nil, err
		}
		ec := endpointslice.NewController(ctx, c.informers.Core().V1().Pods(), c.informers.Core().V1().Services(),
			c.informers.Core().V1().Nodes(), c.informers.Discovery().V1().EndpointSlices(),
			c.cfg.EndpointSliceController.MaxEndpointsPerSlice, cl, c.cfg.EndpointSliceController.EndpointUpdatesBatchPeriod.Duration)
		return func(ctx context.Context) {
			ec.Run(ctx, int(c.cfg.EndpointSliceController.ConcurrentServiceEndpointSyncs))
		}, nil
	},
}

// runControllerManager builds the enabled controllers, starts the shared
// informers and runs the controllers until ctx is done.
func runControllerManager(ctx context.Context, o *cmOptions) error {
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)
	enabled, err := o.enabled()
	if err != nil {
		return err
	}
	logger.Info("Starting the lab's kube-controller-manager", "version", version.Get().GitVersion, "controllers", enabled)

	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	up, err := upstreamConfig()
	if err != nil {
		return err
	}
	cc := up.Generic.ClientConnection
	cfg.ContentType, cfg.AcceptContentTypes, cfg.QPS, cfg.Burst = cc.ContentType, cc.AcceptContentTypes, cc.QPS, int(cc.Burst)
	cfg = restclient.AddUserAgent(cfg, "kube-controller-manager")

	rootCA := cfg.CAData
	if o.rootCAFile != "" {
		if rootCA, err = os.ReadFile(o.rootCAFile); err != nil {
			return fmt.Errorf("--root-ca-file: %w", err)
		}
	} else if len(rootCA) == 0 && cfg.CAFile != "" {
		if rootCA, err = os.ReadFile(cfg.CAFile); err != nil {
			return fmt.Errorf("the kubeconfig's CA: %w", err)
		}
	}

	c, err := newCMContext(ctx, cfg, up, rootCA)
	if err != nil {
		return err
	}

	runs := make([]runFunc, 0, len(enabled))
	for _, name := range enabled {
		run, err := builders[name](klog.NewContext(ctx, klog.LoggerWithName(logger, name)), c)
		if err != nil {
			return fmt.Errorf("build %s: %w", name, err)
		}
		runs = append(runs, run)
	}

	c.informers.Start(ctx.Done())
	defer c.informers.Shutdown()
	c.metadataInf.Start(ctx.Done())
	defer c.metadataInf.Shutdown()
	close(c.informersStarted)

	var wg sync.WaitGroup
	for i, run := range runs {
		name := enabled[i]
		wg.Go(func() {
			run(klog.NewContext(ctx, klog.LoggerWithName(logger, name)))
		})
		logger.Info("Started controller", "controller", name)
	}
	<-ctx.Done()
	logger.Info("Stopping the controllers")
	wg.Wait()
	return nil
}

// newCMContext builds the shared informers and RESTMapper, once the API
// server answers.
func newCMContext(ctx context.Context, cfg *restclient.Config, up *kcmconfig.KubeControllerManagerConfiguration, rootCA []byte) (*cmContext, error) {
	c := &cmContext{config: cfg, cfg: up, rootCA: rootCA, informersStarted: make(chan struct{})}
	informerClient, err := kubernetes.NewForConfig(restclient.AddUserAgent(restclient.CopyConfig(cfg), "shared-informers"))
	if err != nil {
		return nil, err
	}
	metadataClient, err := metadata.NewForConfig(restclient.AddUserAgent(restclient.CopyConfig(cfg), "metadata-informers"))
	if err != nil {
		return nil, err
	}
	// Informers drop managedFields: the controllers never read them.
	trim := func(obj any) (any, error) {
		if a, err := meta.Accessor(obj); err == nil && a.GetManagedFields() != nil {
			a.SetManagedFields(nil)
		}
		return obj, nil
	}
	// Each factory's resync is the minimum resync period times [1, 2), as
	// upstream, so the controllers do not resync in lock step.
	resync := func() time.Duration {
		return time.Duration(float64(up.Generic.MinResyncPeriod.Duration) * (1 + rand.Float64()))
	}
	c.informers = informers.NewSharedInformerFactoryWithOptions(informerClient, resync(), informers.WithTransform(trim))
	c.metadataInf = metadatainformer.NewSharedInformerFactoryWithOptions(metadataClient, resync(), metadatainformer.WithTransform(trim))
	c.objectOrMetadata = informerfactory.NewInformerFactory(c.informers, c.metadataInf)

	if err := waitForAPIServer(ctx, informerClient); err != nil {
		return nil, err
	}
	discoveryClient, err := kubernetes.NewForConfig(restclient.AddUserAgent(restclient.CopyConfig(cfg), "controller-discovery"))
	if err != nil {
		return nil, err
	}
	c.restMapper = restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(discoveryClient.Discovery()))
	go wait.Until(c.restMapper.Reset, restMapperReset, ctx.Done())
	return c, nil
}

// waitForAPIServer waits, a minute at most, for the API server's /healthz
// to answer ok.
func waitForAPIServer(ctx context.Context, cl kubernetes.Interface) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := cl.Discovery().RESTClient().Get().AbsPath("/healthz").Do(ctx).Raw()
		if err == nil && string(body) == "ok" {
			return true, nil
		}
		if err == nil {
			err = fmt.Errorf("/healthz: %q", body)
		}
		last = err
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the API server is not healthy: %w (last: %v)", err, last)
	}
	return nil
}
