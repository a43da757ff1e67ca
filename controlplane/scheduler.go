package main

// scheduler.go owns kube-scheduler, the reference wasp is compared with: in the control plane's process
// (`--kube-scheduler`, off by default) or alone in its own (`wasp-controlplane kube-scheduler`), so that a
// benchmark can read its CPU time and memory apart from the API server's.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

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
		// scheduler_perf's client rate limit (test/integration/scheduler_perf/util.go): the default 50
		// requests/s would cap bindings, not measure the scheduler.
		"--kube-api-qps=5000",
		"--kube-api-burst=5000",
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

// runSchedulerCommand is `wasp-controlplane kube-scheduler --kubeconfig FILE [--log-file FILE]`: kube-scheduler
// alone against a running control plane (FILE is its DATA-DIR/kube-scheduler.kubeconfig), until SIGINT or
// SIGTERM. Go's memory is not limited here, as in a kube-scheduler Pod without GOMEMLIMIT.
func runSchedulerCommand(args []string) error {
	flags := flag.NewFlagSet("wasp-controlplane kube-scheduler", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "the kubeconfig kube-scheduler connects with: the control plane's DATA-DIR/kube-scheduler.kubeconfig")
	logPath := flags.String("log-file", "", "where kube-scheduler logs (default: standard error)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	if *logPath != "" {
		logFile, err := os.Create(*logPath)
		if err != nil {
			return err
		}
		defer logFile.Close()
		if err := logTo(logFile); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := runScheduler(ctx, schedulerArgs(*kubeconfig))
	if ctx.Err() != nil {
		// Stopped by a signal: kube-scheduler without leader election says "finished without leader elect".
		return nil
	}
	return err
}
