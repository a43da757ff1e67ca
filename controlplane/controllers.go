package main

// controllers.go owns kube-controller-manager: which controllers run and the flags they need, run in this
// process on the caller's context.

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	controlleroptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

func controllerManagerArgs(p pki, kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		// Every controller kube-controller-manager runs by default (Deployment, ReplicaSet, StatefulSet, Job,
		// garbage collector, namespace, serviceaccount and its tokens, disruption, persistent-volume binder,
		// endpoints and EndpointSlices, horizontal-pod-autoscaler, node lifecycle, ...), except node IPAM:
		// kwok gives pods their addresses.
		"--controllers=*,-node-ipam-controller",
		// Each controller acts as its own ServiceAccount, so RBAC decides what each may do, as in a cluster.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.path("sa.key"),
		"--root-ca-file=" + p.path("ca.crt"),
		"--cluster-signing-cert-file=" + p.path("ca.crt"),
		"--cluster-signing-key-file=" + p.path("ca.key"),
		"--leader-elect=false",
		// No serving endpoint: nothing scrapes it here.
		"--secure-port=0",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--profiling=false",
	}
}

// runControllerManager runs kube-controller-manager with args until ctx is done, as its command does.
func runControllerManager(ctx context.Context, args []string) error {
	options, err := controlleroptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	flags := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	named := options.Flags(controllermanager.KnownControllers(), controllermanager.ControllersDisabledByDefault(), controllermanager.ControllerAliases())
	options.ParsedFlags = &named
	for _, set := range named.FlagSets {
		flags.AddFlagSet(set)
	}
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	config, err := options.Config(ctx, controllermanager.KnownControllers(), controllermanager.ControllersDisabledByDefault(), controllermanager.ControllerAliases())
	if err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	return controllermanager.Run(ctx, config.Complete())
}
