package main

// check.go owns `wasp-controlplane check-placements`: whether kube-scheduler's own filter plugins accept every
// binding a scheduler made, replayed in the order the bindings happened. It is how a benchmark counts a
// scheduler's violations with kube-scheduler's code, not with a re-implementation of its rules.
//
// The replay keeps a snapshot of its own (plugins hold the lister they are given when the framework is built,
// and the scheduler's cache snapshot cannot be changed from outside): it starts with the nodes and the pods bound
// before the replayed ones, then checks each replayed pod on its node (PreFilter, then Filter, as
// kube-scheduler's findNodesThatFitPod does) and adds it, accepted or not.
//
// Schedulers bind concurrently, and a decision's binding can reach the API server well after later decisions'
// bindings: the order received is not the order decided, and a pod placed at the edge of a spread constraint's
// skew can look refused because a pod decided before it was bound after it. A pod refused at its place is
// checked again against the final state (every other replayed pod placed); if that accepts it, it is counted as
// out of order, not as a violation. Adding pods never makes a placement that broke a resource, taint, port or
// anti-affinity rule acceptable, so those violations stay violations; a spread skew exceeded on the way and
// evened out by later pods is not counted. What the replay cannot know: the nodes,
// volumes and claims as they were at each binding (it reads them as they are now, less the node lifecycle
// controller's not-ready and unreachable taints), nominated pods, and pods deleted since (preemption's victims:
// left out, so the pods bound beside them while they ran are judged without them).

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
)

// runCheckCommand is `wasp-controlplane check-placements --kubeconfig FILE --order FILE`: ORDER lists the pods to
// replay as `namespace/name`, one per line, in the order the API server received their bindings. It prints a
// line per violation (`violation NAMESPACE/NAME on NODE: PLUGIN: REASONS`) and then
// `checked N gone G violations M out-of-order K` (G: deleted since); it fails only when it cannot check.
func runCheckCommand(args []string) error {
	flags := flag.NewFlagSet("wasp-controlplane check-placements", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "an admin kubeconfig of the cluster")
	orderPath := flags.String("order", "", "the pods to check, `namespace/name` per line, in binding order")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || *orderPath == "" {
		return errors.New("--kubeconfig and --order are required")
	}
	order, err := readOrder(*orderPath)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	config, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	// The node lifecycle controller taints a node whose heartbeats lag (kwok's, on a loaded machine) and lifts
	// the taint once they resume: a taint there now says nothing of the node when the pod was bound. The
	// benchmark starts its schedulers once no node has one.
	flapped := 0
	for i := range nodes.Items {
		taints := nodes.Items[i].Spec.Taints[:0]
		for _, taint := range nodes.Items[i].Spec.Taints {
			if taint.Key != v1.TaintNodeNotReady && taint.Key != v1.TaintNodeUnreachable {
				taints = append(taints, taint)
			}
		}
		if len(taints) != len(nodes.Items[i].Spec.Taints) {
			flapped++
		}
		nodes.Items[i].Spec.Taints = taints
	}
	snapshot := newReplaySnapshot(nodes.Items)

	// kube-scheduler's default profile, every plugin with its default arguments.
	defaults, err := latest.Default()
	if err != nil {
		return err
	}
	// The framework records its extension points' durations: the metrics must exist.
	metrics.Register()
	factory := informers.NewSharedInformerFactory(client, 0)
	dra, draSynced, err := draManager(ctx, client, factory)
	if err != nil {
		return err
	}
	scheduler, err := frameworkruntime.NewFramework(ctx, plugins.NewInTreeRegistry(), &defaults.Profiles[0],
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithKubeConfig(config),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithSharedDRAManager(dra),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
	)
	if err != nil {
		return fmt.Errorf("kube-scheduler's framework: %w", err)
	}
	// The plugins registered their informers while the framework was built.
	factory.Start(ctx.Done())
	syncCtx, syncDone := context.WithTimeout(ctx, time.Minute)
	defer syncDone()
	for kind, synced := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !synced {
			return fmt.Errorf("the informer of %v did not sync", kind)
		}
	}
	if !cache.WaitForCacheSync(syncCtx.Done(), draSynced...) {
		return errors.New("the resource claim caches did not sync")
	}

	byName := make(map[string]*v1.Pod, len(pods.Items))
	for i := range pods.Items {
		pod := &pods.Items[i]
		byName[pod.Namespace+"/"+pod.Name] = pod
	}
	replayed := sets.New(order...)
	for name, pod := range byName {
		// Bound pods the order does not list (bound before the run, or by someone else) are there from the start;
		// finished pods are not in kube-scheduler's cache either.
		if pod.Spec.NodeName != "" && !replayed.Has(name) && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed {
			snapshot.add(pod)
		}
	}
	// Pods deleted since they were bound (preemption's victims) are left out: the replay checks the others as if
	// the deleted ones had never been there.
	var replay []*v1.Pod
	gone := 0
	for _, name := range order {
		pod, found := byName[name]
		if !found || pod.Spec.NodeName == "" {
			gone++
			continue
		}
		replay = append(replay, pod)
	}
	violations, outOfOrder := 0, 0
	for i, pod := range replay {
		plugin, reasons := checkPlacement(ctx, scheduler, snapshot, pod)
		if plugin != "" {
			if accepted := snapshot.with(replay[i+1:], func() bool {
				again, _ := checkPlacement(ctx, scheduler, snapshot, pod)
				return again == ""
			}); accepted {
				outOfOrder++
			} else {
				violations++
				fmt.Printf("violation %s/%s on %s: %s: %s\n", pod.Namespace, pod.Name, pod.Spec.NodeName, plugin, strings.Join(reasons, "; "))
			}
		}
		snapshot.add(pod)
	}
	if flapped > 0 {
		fmt.Printf("nodes not ready now, their taints left out: %d\n", flapped)
	}
	fmt.Printf("checked %d gone %d violations %d out-of-order %d\n", len(order), gone, violations, outOfOrder)
	return nil
}

// checkPlacement runs PreFilter for the pod, then Filter on the node it is bound to, as kube-scheduler would
// have for the pod unbound; it returns the rejecting plugin ("" when accepted) and its reasons.
func checkPlacement(ctx context.Context, scheduler framework.Framework, snapshot *replaySnapshot, bound *v1.Pod) (string, []string) {
	pod := bound.DeepCopy()
	node := pod.Spec.NodeName
	pod.Spec.NodeName = ""
	state := framework.NewCycleState()
	result, status, _ := scheduler.RunPreFilterPlugins(ctx, state, pod)
	if !status.IsSuccess() {
		return "PreFilter " + status.Plugin(), reasons(status)
	}
	if !result.AllNodes() && !result.NodeNames.Has(node) {
		return "PreFilter", []string{"the node is not among the ones PreFilter allows"}
	}
	info, err := snapshot.Get(node)
	if err != nil {
		return "snapshot", []string{err.Error()}
	}
	if status := scheduler.RunFilterPlugins(ctx, state, pod, info); !status.IsSuccess() {
		return status.Plugin(), reasons(status)
	}
	return "", nil
}

func reasons(status *fwk.Status) []string {
	reasons := status.Reasons()
	if status.IsError() {
		reasons = append(reasons, "error: "+status.AsError().Error())
	}
	return reasons
}

func readOrder(path string) ([]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var order []string
	lines := bufio.NewScanner(file)
	for lines.Scan() {
		line := strings.TrimSpace(lines.Text())
		if line == "" {
			continue
		}
		if !strings.Contains(line, "/") {
			return nil, fmt.Errorf("%s: %q is not namespace/name", path, line)
		}
		order = append(order, line)
	}
	return order, lines.Err()
}

// replaySnapshot is the replay's view of the cluster, in the role of kube-scheduler's cache snapshot, changed in
// place as pods are added (the plugins keep the pointer they were given).
type replaySnapshot struct {
	nodes     map[string]*framework.NodeInfo
	list      []fwk.NodeInfo
	usedClaim sets.Set[string]
}

var _ fwk.SharedLister = &replaySnapshot{}

func newReplaySnapshot(nodes []v1.Node) *replaySnapshot {
	snapshot := &replaySnapshot{nodes: map[string]*framework.NodeInfo{}, usedClaim: sets.New[string]()}
	for i := range nodes {
		info := framework.NewNodeInfo()
		info.SetNode(&nodes[i])
		snapshot.nodes[nodes[i].Name] = info
		snapshot.list = append(snapshot.list, info)
	}
	return snapshot
}

// add puts a bound pod on its node, as kube-scheduler's cache does once the binding is observed.
func (s *replaySnapshot) add(pod *v1.Pod) {
	info, found := s.nodes[pod.Spec.NodeName]
	if !found {
		return
	}
	info.AddPod(pod)
	for _, volume := range pod.Spec.Volumes {
		if volume.PersistentVolumeClaim != nil {
			s.usedClaim.Insert(pod.Namespace + "/" + volume.PersistentVolumeClaim.ClaimName)
		}
	}
}

// with runs check with pods placed on their nodes for its duration.
func (s *replaySnapshot) with(pods []*v1.Pod, check func() bool) bool {
	for _, pod := range pods {
		if info, found := s.nodes[pod.Spec.NodeName]; found {
			info.AddPod(pod)
		}
	}
	defer func() {
		for _, pod := range pods {
			if info, found := s.nodes[pod.Spec.NodeName]; found {
				if err := info.RemovePod(klog.Background(), pod); err != nil {
					panic(fmt.Sprintf("the replay lost track of %s/%s: %v", pod.Namespace, pod.Name, err))
				}
			}
		}
	}()
	return check()
}

func (s *replaySnapshot) NodeInfos() fwk.NodeInfoLister           { return s }
func (s *replaySnapshot) StorageInfos() fwk.StorageInfoLister     { return s }
func (s *replaySnapshot) PodGroupStates() fwk.PodGroupStateLister { return noPodGroupStates{} }
func (s *replaySnapshot) PodGroups() fwk.PodGroupLister           { return noPodGroups{} }
func (s *replaySnapshot) CompositePodGroupStates() fwk.CompositePodGroupStateLister {
	return noCompositeStates{}
}
func (s *replaySnapshot) CompositePodGroups() fwk.CompositePodGroupLister { return noComposites{} }
func (s *replaySnapshot) List() ([]fwk.NodeInfo, error)                   { return s.list, nil }
func (s *replaySnapshot) IsPVCUsedByPods(key string) bool                 { return s.usedClaim.Has(key) }
func (s *replaySnapshot) HavePodsWithAffinityList() ([]fwk.NodeInfo, error) {
	return s.nodesWith(func(info fwk.NodeInfo) bool { return len(info.GetPodsWithAffinity()) > 0 }), nil
}
func (s *replaySnapshot) HavePodsWithRequiredAntiAffinityList() ([]fwk.NodeInfo, error) {
	return s.nodesWith(func(info fwk.NodeInfo) bool { return len(info.GetPodsWithRequiredAntiAffinity()) > 0 }), nil
}
func (s *replaySnapshot) HavePodsWithRequiredNonHostScopedAntiAffinityList() ([]fwk.NodeInfo, error) {
	return s.nodesWith(func(info fwk.NodeInfo) bool { return len(info.GetPodsWithRequiredNonHostScopedAntiAffinity()) > 0 }), nil
}

func (s *replaySnapshot) nodesWith(keep func(fwk.NodeInfo) bool) []fwk.NodeInfo {
	var kept []fwk.NodeInfo
	for _, info := range s.list {
		if keep(info) {
			kept = append(kept, info)
		}
	}
	return kept
}

func (s *replaySnapshot) Get(name string) (fwk.NodeInfo, error) {
	if info, found := s.nodes[name]; found {
		return info, nil
	}
	return nil, fmt.Errorf("node %q not found", name)
}

// The replay checks each binding against the per-pod filters; pod groups are judged by the group cycle
// (GangScheduling's PlacementFeasible and Permit), which it does not replay: a partial gang is counted from the
// API server's objects by the tests instead.
type (
	noPodGroupStates  struct{}
	noPodGroups       struct{}
	noCompositeStates struct{}
	noComposites      struct{}
)

func (noPodGroupStates) Get(namespace, name string) (fwk.PodGroupState, error) {
	return nil, fmt.Errorf("pod group %s/%s: the replay has no pod groups", namespace, name)
}
func (noPodGroups) Get(namespace, name string) (*schedulingv1beta1.PodGroup, error) {
	return nil, fmt.Errorf("pod group %s/%s: the replay has no pod groups", namespace, name)
}
func (noCompositeStates) Get(namespace, name string) (fwk.CompositePodGroupState, error) {
	return nil, fmt.Errorf("composite pod group %s/%s: the replay has no pod groups", namespace, name)
}
func (noComposites) Get(namespace, name string) (*schedulingv1alpha3.CompositePodGroup, error) {
	return nil, fmt.Errorf("composite pod group %s/%s: the replay has no pod groups", namespace, name)
}

// draManager builds the resource-claim view the DynamicResources and NodeResourcesFit plugins read, as
// kube-scheduler's New does (DynamicResourceAllocation is on since 1.34, and its PreFilter runs for every pod).
// It returns what must sync before the replay.
func draManager(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (fwk.SharedDRAManager, []cache.InformerSynced, error) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.DynamicResourceAllocation) {
		return nil, nil, nil
	}
	claims := assumecache.NewAssumeCache(klog.FromContext(ctx), factory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
	options := resourceslicetracker.Options{
		EnableDeviceTaintRules:   utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaintRules),
		EnableConsumableCapacity: utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity),
		SliceInformer:            factory.Resource().V1().ResourceSlices(),
		KubeClient:               client,
	}
	if options.EnableDeviceTaintRules {
		options.TaintInformer = factory.Resource().V1().DeviceTaintRules()
	}
	tracker, err := resourceslicetracker.StartTracker(ctx, options)
	if err != nil {
		return nil, nil, fmt.Errorf("resource slice tracker: %w", err)
	}
	manager := dynamicresources.NewDRAManager(ctx, claims, tracker, factory)
	synced := []cache.InformerSynced{claims.AddEventHandler(cache.ResourceEventHandlerFuncs{}).HasSynced}
	if utilfeature.DefaultFeatureGate.Enabled(features.DRAExtendedResource) {
		// Device classes feed the extended-resource cache through an informer handler, as in kube-scheduler.
		registration, err := factory.Resource().V1().DeviceClasses().Informer().AddEventHandler(manager.DeviceClassResolver().(*extendedresourcecache.ExtendedResourceCache))
		if err != nil {
			return nil, nil, err
		}
		synced = append(synced, registration.HasSynced)
	}
	return manager, synced, nil
}
