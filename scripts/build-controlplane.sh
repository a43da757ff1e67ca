#!/usr/bin/env bash
# Builds the real control plane the end-to-end tests run wasp on (controlplane/: etcd, kube-apiserver,
# kube-controller-manager, kwok, kube-scheduler) into target/controlplane/wasp-controlplane, and kube-scheduler's
# own command from the same modules (the side-by-side benchmark's reference) into target/controlplane/kube-scheduler,
# and the descheduler's (sigs.k8s.io/descheduler, the rescheduling side by side's reference) into
# target/controlplane/descheduler; and cosign (tools/cosign, its own module: tests/signatures.rs checks wasp's policy
# signatures against cosign's) into target/tools/cosign, and helm (tools/helm: tests/chart.rs lints and renders
# charts/wasp, tests/real_cluster.rs installs and upgrades it) into target/tools/helm.
# Go keeps its module and build caches on the machine: the first build compiles Kubernetes (about 6-10 minutes on
# 2 cores), later ones are incremental (seconds).
set -euo pipefail
cd "$(dirname "$0")/../controlplane"
# The version the API server reports (/version: helm's kubeVersion checks, kubectl version), as a release build's
# linker flags set it; without them it is v0.0.0-master.
kube_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
IFS=. read -r major minor _ <<< "${kube_version#v}"
version_flags="-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=$major"
version_flags+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
go build -ldflags "$version_flags" -o ../target/controlplane/wasp-controlplane .
go build -ldflags "$version_flags" -o ../target/controlplane/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
go build -o ../target/controlplane/descheduler sigs.k8s.io/descheduler/cmd/descheduler
cd ../tools/cosign
go build -o ../../target/tools/cosign github.com/sigstore/cosign/v2/cmd/cosign
cd ../helm
go build -o ../../target/tools/helm helm.sh/helm/v4/cmd/helm
