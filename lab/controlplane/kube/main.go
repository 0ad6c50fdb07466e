// Command kube-controlplane is the lab's kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok in one binary, built from
// the modules this module pins. kube-apiserver, kube-scheduler and kwok are
// the upstream mains; kube-controller-manager is this module's own
// (controllermanager.go): the upstream controllers the lab relies on, wired
// from their constructors, so the ~210 packages only the upstream command
// links (every other built-in controller, in-tree volume plugins, cadvisor,
// kubelet code) are not compiled. Linking one binary instead of four saves
// most of the link time and disk of a first build; the build script links
// each name in bin/ to it, and the binary picks the program by the name it
// was invoked under (or by its first argument: `kube-controlplane
// kube-apiserver --help`). kubectl, which only the tests run, is its own
// binary (./kubectl), built when first asked for.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as in the upstream mains
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in the upstream mains
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as in the upstream mains
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"

	_ "time/tzdata" // CronJob time zones, as in the upstream mains
)

// programs maps each name the binary answers to onto its main: upstream's,
// or for kube-controller-manager the lab's trimmed one.
var programs = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(newControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kwok":                    runKwok,
}

func main() {
	if len(os.Args) > 1 {
		if _, ok := programs[os.Args[1]]; ok {
			os.Args = os.Args[1:]
		}
	}
	run, ok := programs[filepath.Base(os.Args[0])]
	if !ok {
		names := make([]string, 0, len(programs))
		for name := range programs {
			names = append(names, name)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: %s PROGRAM [ARGS...], or invoke it as PROGRAM; PROGRAM is one of %s\n", filepath.Base(os.Args[0]), strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run())
}

// runKwok is the upstream kwok main.
func runKwok() int {
	// component-base's --version (linked in for the Kubernetes programs)
	// sits in pflag's global set, where kwok's cobra command, which has a
	// version of its own, would find it and refuse to run.
	global := pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)
	pflag.CommandLine.VisitAll(func(f *pflag.Flag) {
		if f.Name != "version" {
			global.AddFlag(f)
		}
	})
	pflag.CommandLine = global
	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}
	ctx := signals.SetupSignalContext()
	ctx, logger := kwoklog.InitFlags(ctx, flagset)
	ctx, err := kwokconfig.InitFlags(ctx, flagset)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flagset.FlagUsages()))
		logger.Error("Init config flags", "err", err)
		return 1
	}
	command := kwokcmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		return 1
	}
	return 0
}
