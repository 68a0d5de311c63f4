// CoreDNS with only the plugins a local cluster's DNS needs (the documented way to compile a CoreDNS with a
// chosen plugin set: https://coredns.io/2017/07/25/compile-time-enabling-or-disabling-plugins/). The upstream
// main links every plugin, cloud DNS providers included, which would add minutes to a cold build for nothing.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// Execution order, as in upstream's plugin.cfg.
	dnsserver.Directives = []string{"ready", "health", "errors", "log", "cache", "kubernetes", "forward"}
}

func main() {
	coremain.Run()
}
