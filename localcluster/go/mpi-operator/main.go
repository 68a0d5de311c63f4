// Command mpi-operator runs the upstream mpi-operator controller, unmodified
// (github.com/kubeflow/mpi-operator/cmd/mpi-operator/app at the version pinned in go.mod), with one addition for
// local test clusters: --health-check-port.  Upstream hard-codes its leader-election health check on :8080
// (app.healthCheckPort), so two local clusters, or a local cluster and anything else listening on 8080, could
// not run side by side.  Everything else is the upstream main: same flags, same app.Run.
package main

import (
	"flag"
	_ "unsafe" // go:linkname

	"k8s.io/klog/v2"

	"github.com/kubeflow/mpi-operator/cmd/mpi-operator/app"
	"github.com/kubeflow/mpi-operator/cmd/mpi-operator/app/options"
)

//go:linkname healthCheckPort github.com/kubeflow/mpi-operator/cmd/mpi-operator/app.healthCheckPort
var healthCheckPort int

func main() {
	s := options.NewServerOption()
	s.AddFlags(flag.CommandLine)
	flag.IntVar(&healthCheckPort, "health-check-port", healthCheckPort,
		"Port of the leader-election health check (upstream always uses 8080).")
	flag.Parse()
	if s.MonitoringPort != 0 {
		klog.Warning("--monitoring-port is not served by this build")
	}
	if err := app.Run(s); err != nil {
		klog.Fatalf("%v\n", err)
	}
}
