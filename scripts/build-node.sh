#!/usr/bin/env bash
# Builds what a real node runs (`wasp-controlplane --real-nodes N`, controlplane/realnode.go) into target/node/:
# kubelet (k8s.io/kubernetes at the control plane's own version, from controlplane/'s module), containerd v2.4.2
# with its runc shim and ctr, runc v1.5.3 (cgo and libseccomp: the RuntimeDefault seccomp profile), the CNI plugins
# bridge, host-local and loopback v1.10.0, and the pod sandboxes' pause program (controlplane/pause). Every module
# is pinned; runc, containerd and the CNI plugins build with their own tested dependencies (`go install
# pkg@version`, outside any module). Go's caches make a second build incremental (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/target/node"
mkdir -p "$out/cni"
export GOFLAGS=-buildvcs=false
containerd_version=v2.4.2 runc_version=v1.5.3 cni_version=v1.10.0
if ! [ -e /usr/include/seccomp.h ]; then
  echo "runc needs libseccomp's headers: apt-get install libseccomp-dev" >&2
  exit 1
fi
containerd=github.com/containerd/containerd/v2
containerd_flags="-X $containerd/version.Version=$containerd_version -X $containerd/version.Revision=gomod -X $containerd/version.Package=$containerd"
containerd_tags="no_btrfs no_zfs no_devmapper urfave_cli_no_docs"
GOBIN="$out" CGO_ENABLED=1 go install -tags seccomp github.com/opencontainers/runc@$runc_version
GOBIN="$out" go install -tags "$containerd_tags" -ldflags "$containerd_flags" $containerd/cmd/containerd@$containerd_version $containerd/cmd/ctr@$containerd_version
GOBIN="$out" CGO_ENABLED=0 go install -tags "$containerd_tags no_grpc" -ldflags "$containerd_flags" $containerd/cmd/containerd-shim-runc-v2@$containerd_version
cni=github.com/containernetworking/plugins/plugins
GOBIN="$out/cni" CGO_ENABLED=0 go install $cni/main/bridge@$cni_version $cni/ipam/host-local@$cni_version $cni/main/loopback@$cni_version
cd controlplane
kube_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
IFS=. read -r major minor _ <<< "${kube_version#v}"
version_flags="-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=$major"
version_flags+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
go build -ldflags "$version_flags" -o "$out/kubelet" k8s.io/kubernetes/cmd/kubelet
CGO_ENABLED=0 go build -o "$out/pause" ./pause
