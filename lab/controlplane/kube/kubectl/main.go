// Command kubectl is the upstream kubectl main, built from the modules this
// module pins. Only the tests run it (lab/cluster's Cluster.Kubectl), so it
// is not part of kube-controlplane: scripts/build-controlplane.sh --kubectl
// builds it into the control plane's bin directory when first asked for.
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as in the upstream main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in the upstream main
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as in the upstream main
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if _, err := logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl:", err)
	}
	if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
		os.Exit(1)
	}
}
