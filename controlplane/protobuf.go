package main

// protobuf.go owns `wasp-controlplane protobuf-walk`: the requests kube-scheduler, kube-controller-manager and
// kwok send, made the way they make them (client-go, protobuf bodies, `Accept: protobuf, json`), and what came
// back printed as JSON, one step per line. tests/fidelity.rs runs it against the simulator and against
// kube-apiserver and compares the two, as it does kubectl's walk: the simulator claims to serve these clients.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"mime"
	"net/http"
	"os"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// answeredTypes records the media type of every answer, for the step that asked.
type answeredTypes struct {
	next  http.RoundTripper
	mutex sync.Mutex
	types []string
}

func (a *answeredTypes) RoundTrip(request *http.Request) (*http.Response, error) {
	response, err := a.next.RoundTrip(request)
	if err == nil {
		mediaType, _, _ := mime.ParseMediaType(response.Header.Get("Content-Type"))
		a.mutex.Lock()
		a.types = append(a.types, mediaType)
		a.mutex.Unlock()
	}
	return response, err
}

func (a *answeredTypes) take() []string {
	a.mutex.Lock()
	defer a.mutex.Unlock()
	types := a.types
	a.types = nil
	return types
}

// runProtobufWalk is `wasp-controlplane protobuf-walk --kubeconfig FILE`. The cluster needs the nodes worker-0
// and worker-1 and the namespace default; the walk's objects are named `pb-*`.
func runProtobufWalk(args []string) error {
	flags := flag.NewFlagSet("wasp-controlplane protobuf-walk", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "the kubeconfig of the server to walk")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	config, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	// What kube-scheduler and kube-controller-manager configure (component-base's ClientConnection defaults).
	config.ContentType = "application/vnd.kubernetes.protobuf"
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	recorder := &answeredTypes{}
	config.Wrap(func(next http.RoundTripper) http.RoundTripper {
		recorder.next = next
		return recorder
	})
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := json.NewEncoder(os.Stdout)
	step := func(name string, object any, err error) error {
		line := map[string]any{"step": name, "ok": err == nil, "answered": recorder.take()}
		if err == nil {
			line["object"] = object
		} else if status, isStatus := err.(apierrors.APIStatus); isStatus {
			line["status"] = status.Status()
		} else {
			return fmt.Errorf("%s: %w", name, err)
		}
		return out.Encode(line)
	}
	return protobufSteps(ctx, client, step)
}

func protobufSteps(ctx context.Context, client kubernetes.Interface, step func(string, any, error) error) error {
	const namespace = "default"
	configMaps := client.CoreV1().ConfigMaps(namespace)
	pods := client.CoreV1().Pods(namespace)

	created, err := configMaps.Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "pb-config", Labels: map[string]string{"walk": "protobuf"}},
		Data:       map[string]string{"k": "1", "empty": ""},
	}, metav1.CreateOptions{})
	if err := step("pb 01 create configmap", created, err); err != nil {
		return err
	}
	if err != nil {
		return fmt.Errorf("the ConfigMap could not be created, nothing further to walk: %w", err)
	}
	got, err := configMaps.Get(ctx, "pb-config", metav1.GetOptions{})
	if err := step("pb 02 get configmap", got, err); err != nil {
		return err
	}
	updated := created.DeepCopy()
	updated.Data["k"] = "2"
	updated, err = configMaps.Update(ctx, updated, metav1.UpdateOptions{})
	if err := step("pb 03 update configmap", updated, err); err != nil {
		return err
	}
	stale := created.DeepCopy()
	stale.Data["k"] = "3"
	_, err = configMaps.Update(ctx, stale, metav1.UpdateOptions{})
	if err := step("pb 04 update from a stale resourceVersion", nil, err); err != nil {
		return err
	}
	_, err = configMaps.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pb-config"}}, metav1.CreateOptions{})
	if err := step("pb 05 already exists", nil, err); err != nil {
		return err
	}
	_, err = configMaps.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pb-versioned", ResourceVersion: "1"}}, metav1.CreateOptions{})
	if err := step("pb 05a create with a resourceVersion", nil, err); err != nil {
		return err
	}
	_, err = configMaps.Get(ctx, "pb-missing", metav1.GetOptions{})
	if err := step("pb 06 not found", nil, err); err != nil {
		return err
	}

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pb-pod", Labels: map[string]string{"walk": "protobuf"}},
		Spec: v1.PodSpec{
			SchedulerName: "nobody",
			Containers: []v1.Container{{Name: "app", Image: "nginx", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
			}}},
			Tolerations: []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "wasp", Effect: v1.TaintEffectNoSchedule}},
		},
	}
	createdPod, podErr := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err := step("pb 07 create pod", createdPod, podErr); err != nil {
		return err
	}
	_, err = pods.Create(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pb-invalid"}}, metav1.CreateOptions{})
	if err := step("pb 08 invalid pod", nil, err); err != nil {
		return err
	}
	listed, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "walk=protobuf"})
	if listed != nil {
		listed.ResourceVersion = ""
	}
	if err := step("pb 09 list pods by label", listed, err); err != nil {
		return err
	}
	// kube-scheduler's write when no node fits (it patches; a status update is the other way clients write it).
	if podErr == nil {
		unschedulable := createdPod.DeepCopy()
		unschedulable.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: "0/2 nodes are available"}}
		written, err := pods.UpdateStatus(ctx, unschedulable, metav1.UpdateOptions{})
		if err := step("pb 10 update pod status", written, err); err != nil {
			return err
		}
	}
	err = pods.Bind(ctx, &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "pb-pod"}, Target: v1.ObjectReference{Kind: "Node", Name: "worker-0"}}, metav1.CreateOptions{})
	if err := step("pb 11 binding", nil, err); err != nil {
		return err
	}
	err = pods.Bind(ctx, &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "pb-pod"}, Target: v1.ObjectReference{Kind: "Node", Name: "worker-1"}}, metav1.CreateOptions{})
	if err := step("pb 12 second binding", nil, err); err != nil {
		return err
	}
	bound, err := pods.Get(ctx, "pb-pod", metav1.GetOptions{})
	var nodeName any
	if err == nil {
		nodeName = bound.Spec.NodeName
	}
	if err := step("pb 13 bound pod's node", nodeName, err); err != nil {
		return err
	}
	event, err := client.EventsV1().Events(namespace).Create(ctx, &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "pb-pod.scheduled"},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "default-scheduler",
		ReportingInstance:   "default-scheduler-walk",
		Action:              "Binding",
		Reason:              "Scheduled",
		Regarding:           v1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: "pb-pod"},
		Note:                "Successfully assigned default/pb-pod to worker-0",
		Type:                v1.EventTypeNormal,
	}, metav1.CreateOptions{})
	if err := step("pb 14 create event", event, err); err != nil {
		return err
	}
	leases := client.CoordinationV1().Leases(namespace)
	holder, duration := "walk-a", int32(15)
	lease, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "pb-lease"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, LeaseTransitions: new(int32)},
	}, metav1.CreateOptions{})
	if err := step("pb 15 create lease", lease, err); err != nil {
		return err
	}
	if err == nil {
		next := "walk-b"
		lease.Spec.HolderIdentity = &next
		*lease.Spec.LeaseTransitions = 1
		lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		if err := step("pb 16 update lease", lease, err); err != nil {
			return err
		}
	}
	err = pods.EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "pb-pod", Namespace: namespace}})
	if err := step("pb 17 eviction", nil, err); err != nil {
		return err
	}

	// A watch resumed from the ConfigMap's creation, as an informer resumes: every change since, in order.
	err = configMaps.Delete(ctx, "pb-config", metav1.DeleteOptions{})
	if err := step("pb 18 delete configmap", nil, err); err != nil {
		return err
	}
	timeout := int64(1)
	watcher, err := configMaps.Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion, TimeoutSeconds: &timeout, LabelSelector: "walk=protobuf"})
	var events []map[string]any
	if err == nil {
		for event := range watcher.ResultChan() {
			configMap, _ := event.Object.(*v1.ConfigMap)
			if configMap == nil {
				events = append(events, map[string]any{"type": event.Type, "object": event.Object})
				continue
			}
			events = append(events, map[string]any{"type": event.Type, "name": configMap.Name, "data": configMap.Data})
		}
	}
	return step("pb 19 watch from a resourceVersion", events, err)
}
