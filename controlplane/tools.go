//go:build tools

package main

// The kubelet of a real node (scripts/build-node.sh) builds from this module, so that it is the control plane's
// own Kubernetes version, with the same staging modules; this import keeps its packages in go.mod and go.sum.
import _ "k8s.io/kubernetes/cmd/kubelet/app"
