// Command pause is a pod sandbox's first process on a real node (containerd's sandbox image,
// registry.k8s.io/pause): it holds the pod's namespaces, reaps the orphans it inherits as PID 1 and exits on
// SIGINT or SIGTERM, as Kubernetes' own pause.c does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
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
