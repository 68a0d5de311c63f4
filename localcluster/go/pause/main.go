// The pod sandbox ("pause") process of the real node: it holds the pod's namespaces, reaps orphaned children
// and exits on SIGINT/SIGTERM. No registry is reachable here, so the node cannot pull the usual pause image;
// the node imports this binary as a one-layer image into containerd instead.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
