package main

// scheduler.go owns the optional kube-scheduler (off by default): the reference wasp is compared with.

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

func schedulerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}
}

// runScheduler runs kube-scheduler (profile default-scheduler) with args until ctx is done.
func runScheduler(ctx context.Context, args []string) error {
	options := scheduleroptions.NewOptions()
	flags := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, set := range options.Flags.FlagSets {
		flags.AddFlagSet(set)
	}
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("kube-scheduler flags: %w", err)
	}
	completed, scheduler, err := schedulerapp.Setup(ctx, options)
	if err != nil {
		return fmt.Errorf("kube-scheduler: %w", err)
	}
	return schedulerapp.Run(ctx, completed, scheduler)
}
