package main

// kwok.go owns the nodes' and pods' lifecycle without kubelets: kwok's controllers keep every Node Ready (status
// heartbeats and Leases in kube-node-lease), give a bound pod an IP and make it Running and Ready, and finish a
// pod's deletion once the API server marks it deleted (graceful deletion, eviction).

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	"sigs.k8s.io/kwok/pkg/client/clientset/versioned"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/controllers"
	"sigs.k8s.io/kwok/pkg/utils/client"
)

// podCIDR is where kwok takes pod IPs from: room for the 50k pods of the largest test. No traffic goes there.
const podCIDR = "10.244.0.0/16"

// stages are kwok's "fast" lifecycle: a node is Ready at once and heartbeats through its Lease; a pod is Running
// and Ready as soon as it is bound, completes if its containers are done (Jobs), and is removed once deleted.
func stages() (map[internalversion.StageResourceRef][]*internalversion.Stage, error) {
	grouped := map[internalversion.StageResourceRef][]*internalversion.Stage{}
	for _, raw := range []string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	} {
		stage, err := config.UnmarshalWithType[*internalversion.Stage](raw)
		if err != nil {
			return nil, fmt.Errorf("kwok stage: %w", err)
		}
		grouped[stage.Spec.ResourceRef] = append(grouped[stage.Spec.ResourceRef], stage)
	}
	return grouped, nil
}

// runKwok starts kwok's controllers for every node but the real ones (labelled realNodeLabel): a label selector
// kube-apiserver evaluates, so kwok never sees such a node, nor manages its pods or its Lease.
func runKwok(ctx context.Context, kubeconfig string, leaseDuration time.Duration) error {
	lifecycle, err := stages()
	if err != nil {
		return err
	}
	clientset, err := client.NewClientset("", kubeconfig)
	if err != nil {
		return err
	}
	restConfig, err := clientset.ToRESTConfig()
	if err != nil {
		return err
	}
	dynamicClient, err := clientset.ToDynamicClient()
	if err != nil {
		return err
	}
	restMapper, err := clientset.ToRESTMapper()
	if err != nil {
		return err
	}
	restClient, err := rest.RESTClientFor(restConfig)
	if err != nil {
		return err
	}
	typedClient, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	kwokClient, err := versioned.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	id, err := controllers.Identity()
	if err != nil {
		return err
	}
	controller, err := controllers.NewController(controllers.Config{
		Clock:                        clock.RealClock{},
		DynamicClient:                dynamicClient,
		RESTClient:                   restClient,
		RESTMapper:                   restMapper,
		ImpersonatingDynamicClient:   clientset.ToImpersonatingDynamicClient(),
		ImpersonatingTypedClient:     clientset.ToImpersonatingTypedClient(),
		TypedClient:                  typedClient,
		TypedKwokClient:              kwokClient,
		ManageNodesWithLabelSelector: "!" + realNodeLabel,
		CIDR:                         podCIDR,
		NodeIP:                       "127.0.0.1",
		LocalStages:                  lifecycle,
		PodPlayStageParallelism:      4,
		NodePlayStageParallelism:     4,
		NodeLeaseParallelism:         4,
		NodeLeaseDurationSeconds:     uint(leaseDuration.Seconds()),
		PodsOnNodeSyncParallelism:    1,
		ID:                           id,
	})
	if err != nil {
		return err
	}
	return controller.Start(ctx)
}
