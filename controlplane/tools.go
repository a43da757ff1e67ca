//go:build tools

package main

// The kubelet of a real node (scripts/build-node.sh) builds from this module, so that it is the control plane's
// own Kubernetes version, with the same staging modules; and so does the descheduler (scripts/build-controlplane.sh,
// the rescheduling side by side's reference). These imports keep their packages in go.mod and go.sum.
import (
	_ "k8s.io/kubernetes/cmd/kubelet/app"
	_ "sigs.k8s.io/descheduler/cmd/descheduler/app"
)
