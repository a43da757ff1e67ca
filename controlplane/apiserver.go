package main

// apiserver.go owns kube-apiserver: its flags (real admission chain, RBAC, ServiceAccount tokens, the aggregation
// layer, an audit log of every request) and running it in this process on the caller's context.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// serviceClusterIP is the first address of the Service range: the `kubernetes` Service's. No traffic goes to
// the range (there is no cluster network); the addresses are only allocated.
const (
	serviceCIDR      = "10.96.0.0/16"
	serviceClusterIP = "10.96.0.1"
)

// auditPolicy records every request at Metadata level (who, verb, resource, subresource, response code), which
// is what tests count from, except the node heartbeats kwok sends on behalf of the fake kubelets; writes of a
// pod's status keep their body too (a scheduler's nominatedNodeName and conditions).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["kwok-controller"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version", "/openapi*"]
- level: Request
  verbs: ["patch", "update"]
  resources: [{group: "", resources: ["pods/status"]}]
- level: Metadata
`

// defaultFeatureGates turns on Kubernetes 1.37's gang scheduling (beta, off in a stock cluster): Workloads and
// PodGroups are served, pods keep their spec.schedulingGroup, and kube-scheduler runs its GangScheduling plugin.
// Pods that name no group are scheduled as without it, so the tests of everything else see a stock 1.37.
const defaultFeatureGates = "GenericWorkload=true"

// workloadGroupVersion is the API version of Workloads and PodGroups, served when GenericWorkload is on.
const workloadGroupVersion = "scheduling.k8s.io/v1beta1"

func apiserverArgs(p pki, etcdURL string, port int, dataDir string, featureGates string) ([]string, error) {
	policy := filepath.Join(dataDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	args := []string{"--feature-gates=" + featureGates}
	if strings.Contains(featureGates, "GenericWorkload=true") {
		args = append(args, "--runtime-config="+workloadGroupVersion+"=true")
	}
	return append(args,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+p.path("apiserver.crt"),
		"--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--service-cluster-ip-range="+serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.path("sa.pub"),
		"--service-account-signing-key-file="+p.path("sa.key"),
		// The aggregation layer: the API server vouches for the user with the front-proxy client certificate
		// when it proxies a request to an extension API server (metrics.k8s.io and the like).
		"--requestheader-client-ca-file="+p.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+p.path("front-proxy-client.crt"),
		"--proxy-client-key-file="+p.path("front-proxy-client.key"),
		// The one API server's address is not written into the `kubernetes` Endpoints: 127.0.0.1 is not a
		// valid endpoint address, and nothing in this cluster reaches the API server through the Service.
		"--endpoint-reconciler-type=none",
		"--audit-policy-file="+policy,
		"--audit-log-path="+filepath.Join(dataDir, "audit.log"),
		"--audit-log-mode=blocking",
		"--audit-log-maxsize=0",
		"--profiling=false",
	), nil
}

// runAPIServer runs kube-apiserver with args until ctx is done, as its command does but on this context (the
// command installs a process-wide signal handler, which can be set up only once per process).
func runAPIServer(ctx context.Context, args []string) error {
	options := apiserveroptions.NewServerRunOptions()
	flags := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, set := range options.Flags().FlagSets {
		flags.AddFlagSet(set)
	}
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("kube-apiserver flags: %w", err)
	}
	if err := options.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	// The API server's loopback clients would log the warnings it sends itself.
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	completed, err := options.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return fmt.Errorf("kube-apiserver: %w", utilerrors.NewAggregate(errs))
	}
	return apiserverapp.Run(ctx, completed)
}
