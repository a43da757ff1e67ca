package main

// scheduler.go owns the optional kube-scheduler (off by default): the reference wasp is compared with.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// schedulerArgs are kube-scheduler's flags: its default profile, or with scoring MostAllocated a configuration file
// (written into dataDir) whose NodeResourcesFit packs pods onto the fullest nodes that fit them.
func schedulerArgs(dataDir, kubeconfig, scoring string) ([]string, error) {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}
	switch scoring {
	case "LeastAllocated":
		return args, nil
	case "MostAllocated":
		// With a configuration file, kube-scheduler takes its client and leader election from the file.
		config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: %q}
leaderElection: {leaderElect: false}
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
`, kubeconfig)
		path := filepath.Join(dataDir, "kube-scheduler-config.yaml")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			return nil, err
		}
		return append(args, "--config="+path), nil
	default:
		return nil, fmt.Errorf("--kube-scheduler-scoring %q: LeastAllocated or MostAllocated", scoring)
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
