package main

// metrics.go owns the metrics adapter: the resource, custom and external metrics APIs (metrics.k8s.io,
// custom.metrics.k8s.io, external.metrics.k8s.io) served to kube-apiserver's aggregation layer, so that the
// real HPA controller and wasp's autoscaler read the same numbers the same way, through the API server.
//
// There are no kubelets to measure anything: the numbers come from a load model a test or a user sets, the
// ConfigMap kube-system/wasp-controlplane-load (key load.yaml), read at every request:
//
//	pods:            # usage of each Running pod matched (first rule wins), split evenly over its containers
//	- {namespace: default, selector: app=web, cpu: 400m, memory: 200Mi}
//	- {namespace: default, selector: app=api, totalCpu: "3", totalMemory: 1Gi}  # shared by the Running pods matched,
//	                                                                             # as a load balancer shares requests
//	podMetrics:      # custom.metrics.k8s.io: a value per matched pod
//	- {namespace: default, selector: app=web, metric: http_requests_per_second, value: "20"}
//	externalMetrics: # external.metrics.k8s.io: values of a metric in a namespace (each with its labels)
//	- {namespace: default, metric: queue_depth, labels: {queue: orders}, value: "120"}
//
// A node's usage is the sum of its pods'.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	custommetrics "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	externalmetrics "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	resourcemetrics "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	"sigs.k8s.io/yaml"
)

const (
	metricsNamespace = "kube-system"
	metricsService   = "wasp-controlplane-metrics"
	loadConfigMap    = "wasp-controlplane-load"
)

// metricsGroups are the aggregated API versions the adapter serves.
var metricsGroups = []struct{ group, version string }{
	{"metrics.k8s.io", "v1beta1"},
	{"custom.metrics.k8s.io", "v1beta2"},
	{"external.metrics.k8s.io", "v1beta1"},
}

type loadModel struct {
	Pods []struct {
		Namespace   string `json:"namespace"`
		Selector    string `json:"selector"`
		CPU         string `json:"cpu"`
		Memory      string `json:"memory"`
		TotalCPU    string `json:"totalCpu"`
		TotalMemory string `json:"totalMemory"`
	} `json:"pods"`
	PodMetrics []struct {
		Namespace string `json:"namespace"`
		Selector  string `json:"selector"`
		Metric    string `json:"metric"`
		Value     string `json:"value"`
	} `json:"podMetrics"`
	ExternalMetrics []struct {
		Namespace string            `json:"namespace"`
		Metric    string            `json:"metric"`
		Labels    map[string]string `json:"labels"`
		Value     string            `json:"value"`
	} `json:"externalMetrics"`
}

type metricsAdapter struct {
	pods       corelisters.PodLister
	nodes      corelisters.NodeLister
	configMaps corelisters.ConfigMapLister
}

// startMetricsAdapter serves the metrics APIs on a local port and registers them with the aggregation layer: a
// Service annotated with the port (resolver.go) and one APIService per group, trusting the cluster CA.
func startMetricsAdapter(ctx context.Context, p pki, config *rest.Config, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	adapter := &metricsAdapter{pods: factory.Core().V1().Pods().Lister(), nodes: factory.Core().V1().Nodes().Lister(), configMaps: factory.Core().V1().ConfigMaps().Lister()}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	certificate, err := tls.LoadX509KeyPair(p.path("metrics-adapter.crt"), p.path("metrics-adapter.key"))
	if err != nil {
		return err
	}
	listener, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{certificate}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	server := &http.Server{Handler: adapter, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()
	go func() { <-ctx.Done(); _ = server.Close() }()

	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:        metricsService,
			Namespace:   metricsNamespace,
			Annotations: map[string]string{addressAnnotation: listener.Addr().String()},
		},
		// ExternalName: the aggregation layer's availability check then looks for no endpoints (there is no pod
		// behind it) and goes straight to the address the resolver gives.
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost", Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	if _, err := client.CoreV1().Services(metricsNamespace).Create(ctx, service, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("metrics adapter Service: %w", err)
	}
	ca, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return err
	}
	registrations, err := aggregator.NewForConfig(config)
	if err != nil {
		return err
	}
	port := int32(443)
	for _, served := range metricsGroups {
		apiService := &apiregistrationv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: served.version + "." + served.group},
			Spec: apiregistrationv1.APIServiceSpec{
				Service:              &apiregistrationv1.ServiceReference{Namespace: metricsNamespace, Name: metricsService, Port: &port},
				Group:                served.group,
				Version:              served.version,
				CABundle:             ca,
				GroupPriorityMinimum: 100,
				VersionPriority:      100,
			},
		}
		if _, err := registrations.ApiregistrationV1().APIServices().Create(ctx, apiService, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("APIService %s: %w", apiService.Name, err)
		}
	}
	return nil
}

func (a *metricsAdapter) load() (loadModel, error) {
	var model loadModel
	configMap, err := a.configMaps.ConfigMaps(metricsNamespace).Get(loadConfigMap)
	if apierrors.IsNotFound(err) {
		return model, nil
	}
	if err != nil {
		return model, err
	}
	if err := yaml.UnmarshalStrict([]byte(configMap.Data["load.yaml"]), &model); err != nil {
		return model, fmt.Errorf("ConfigMap %s/%s load.yaml: %w", metricsNamespace, loadConfigMap, err)
	}
	return model, nil
}

// ServeHTTP answers the paths the aggregation layer proxies: /apis/GROUP/VERSION (discovery) and below.
func (a *metricsAdapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 3 || parts[0] != "apis" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	model, err := a.load()
	if err != nil {
		klog.ErrorS(err, "metrics adapter: the load model")
		writeStatus(w, http.StatusInternalServerError, err.Error())
		return
	}
	selector, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, fmt.Sprintf("labelSelector: %v", err))
		return
	}
	group, version, rest := parts[1], parts[2], parts[3:]
	switch {
	case group == "metrics.k8s.io" && version == "v1beta1":
		a.serveResourceMetrics(w, model, rest, selector)
	case group == "custom.metrics.k8s.io" && version == "v1beta2":
		a.serveCustomMetrics(w, model, rest, selector)
	case group == "external.metrics.k8s.io" && version == "v1beta1":
		serveExternalMetrics(w, model, rest, selector)
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, value any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(value)
}

func writeStatus(w http.ResponseWriter, code int, message string) {
	w.WriteHeader(code)
	writeJSON(w, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(code), Message: message})
}

func discovery(groupVersion string, resources []metav1.APIResource) *metav1.APIResourceList {
	return &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: groupVersion, APIResources: resources}
}

// measured says whether a pod has usage to report: Running on a node and not being deleted.
func measured(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil
}

// usage is a pod's modelled usage, if a rule matches it and it is measured: the rule's per-pod usage plus its
// share of the rule's totals.
func (a *metricsAdapter) usage(model loadModel, pod *corev1.Pod) (corev1.ResourceList, bool) {
	if !measured(pod) {
		return nil, false
	}
	for _, rule := range model.Pods {
		if rule.Namespace != pod.Namespace {
			continue
		}
		selector, err := labels.Parse(rule.Selector)
		if err != nil || !selector.Matches(labels.Set(pod.Labels)) {
			continue
		}
		sharing := int64(1)
		if rule.TotalCPU != "" || rule.TotalMemory != "" {
			matched, _ := a.pods.Pods(pod.Namespace).List(selector)
			sharing = 0
			for _, other := range matched {
				if measured(other) {
					sharing++
				}
			}
			// The pod itself may have left the cache between the two reads.
			sharing = max(sharing, 1)
		}
		usage := corev1.ResourceList{}
		add := func(name corev1.ResourceName, perPod, total string) {
			sum := resource.Quantity{}
			if quantity, err := resource.ParseQuantity(perPod); err == nil {
				sum.Add(quantity)
			}
			if quantity, err := resource.ParseQuantity(total); err == nil {
				if name == corev1.ResourceCPU {
					sum.Add(*resource.NewMilliQuantity(quantity.MilliValue()/sharing, resource.DecimalSI))
				} else {
					sum.Add(*resource.NewQuantity(quantity.Value()/sharing, resource.BinarySI))
				}
			}
			if perPod != "" || total != "" {
				usage[name] = sum
			}
		}
		add(corev1.ResourceCPU, rule.CPU, rule.TotalCPU)
		add(corev1.ResourceMemory, rule.Memory, rule.TotalMemory)
		return usage, true
	}
	return nil, false
}

func podMetrics(pod *corev1.Pod, usage corev1.ResourceList) resourcemetrics.PodMetrics {
	metrics := resourcemetrics.PodMetrics{
		TypeMeta:   metav1.TypeMeta{Kind: "PodMetrics", APIVersion: "metrics.k8s.io/v1beta1"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels, CreationTimestamp: metav1.Now()},
		Timestamp:  metav1.Now(),
		Window:     metav1.Duration{Duration: 30 * time.Second},
	}
	containers := int64(len(pod.Spec.Containers))
	for _, container := range pod.Spec.Containers {
		share := corev1.ResourceList{}
		for name, total := range usage {
			if name == corev1.ResourceCPU {
				share[name] = *resource.NewMilliQuantity(total.MilliValue()/containers, resource.DecimalSI)
			} else {
				share[name] = *resource.NewQuantity(total.Value()/containers, resource.BinarySI)
			}
		}
		metrics.Containers = append(metrics.Containers, resourcemetrics.ContainerMetrics{Name: container.Name, Usage: share})
	}
	return metrics
}

func (a *metricsAdapter) serveResourceMetrics(w http.ResponseWriter, model loadModel, path []string, selector labels.Selector) {
	switch {
	case len(path) == 0:
		writeJSON(w, discovery("metrics.k8s.io/v1beta1", []metav1.APIResource{
			{Name: "nodes", Kind: "NodeMetrics", Verbs: []string{"get", "list"}},
			{Name: "pods", Namespaced: true, Kind: "PodMetrics", Verbs: []string{"get", "list"}},
		}))
	case path[0] == "nodes":
		a.serveNodeMetrics(w, model, path[1:], selector)
	case path[0] == "pods" || (len(path) >= 3 && path[0] == "namespaces" && path[2] == "pods"):
		namespace, name := "", ""
		if path[0] == "namespaces" {
			namespace = path[1]
			path = path[2:]
		}
		if len(path) == 2 {
			name = path[1]
		}
		pods, err := a.pods.Pods(namespace).List(selector)
		if err != nil {
			writeStatus(w, http.StatusInternalServerError, err.Error())
			return
		}
		list := resourcemetrics.PodMetricsList{TypeMeta: metav1.TypeMeta{Kind: "PodMetricsList", APIVersion: "metrics.k8s.io/v1beta1"}}
		for _, pod := range pods {
			if name != "" && pod.Name != name {
				continue
			}
			if usage, ok := a.usage(model, pod); ok {
				list.Items = append(list.Items, podMetrics(pod, usage))
			}
		}
		if name != "" {
			if len(list.Items) == 0 {
				writeStatus(w, http.StatusNotFound, fmt.Sprintf("podmetrics %q not found", name))
				return
			}
			writeJSON(w, list.Items[0])
			return
		}
		writeJSON(w, list)
	default:
		writeStatus(w, http.StatusNotFound, "not found")
	}
}

// serveNodeMetrics answers nodes (every node the label selector matches, as metrics-server lists them) and
// nodes/NAME: a node's usage is the sum of its pods', zero for a node without any.
func (a *metricsAdapter) serveNodeMetrics(w http.ResponseWriter, model loadModel, path []string, selector labels.Selector) {
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, err.Error())
		return
	}
	nodes, err := a.nodes.List(selector)
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, err.Error())
		return
	}
	// In name order, as metrics-server lists them.
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	perNode := map[string]corev1.ResourceList{}
	for _, node := range nodes {
		perNode[node.Name] = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("0")}
	}
	for _, pod := range pods {
		usage, ok := a.usage(model, pod)
		if !ok {
			continue
		}
		total, selected := perNode[pod.Spec.NodeName]
		if !selected {
			continue
		}
		for name, quantity := range usage {
			sum := total[name]
			sum.Add(quantity)
			total[name] = sum
		}
		perNode[pod.Spec.NodeName] = total
	}
	list := resourcemetrics.NodeMetricsList{TypeMeta: metav1.TypeMeta{Kind: "NodeMetricsList", APIVersion: "metrics.k8s.io/v1beta1"}}
	for _, selected := range nodes {
		node, usage := selected.Name, perNode[selected.Name]
		if len(path) == 1 && path[0] != node {
			continue
		}
		list.Items = append(list.Items, resourcemetrics.NodeMetrics{
			TypeMeta:   metav1.TypeMeta{Kind: "NodeMetrics", APIVersion: "metrics.k8s.io/v1beta1"},
			ObjectMeta: metav1.ObjectMeta{Name: node, CreationTimestamp: metav1.Now()},
			Timestamp:  metav1.Now(),
			Window:     metav1.Duration{Duration: 30 * time.Second},
			Usage:      usage,
		})
	}
	if len(path) == 1 {
		if len(list.Items) == 0 {
			writeStatus(w, http.StatusNotFound, fmt.Sprintf("nodemetrics %q not found", path[0]))
			return
		}
		writeJSON(w, list.Items[0])
		return
	}
	writeJSON(w, list)
}

// serveCustomMetrics answers namespaces/NS/pods/NAME-or-*/METRIC.
func (a *metricsAdapter) serveCustomMetrics(w http.ResponseWriter, model loadModel, path []string, selector labels.Selector) {
	if len(path) == 0 {
		var resources []metav1.APIResource
		for _, rule := range model.PodMetrics {
			resources = append(resources, metav1.APIResource{Name: "pods/" + rule.Metric, Namespaced: true, Kind: "MetricValueList", Verbs: []string{"get"}})
		}
		writeJSON(w, discovery("custom.metrics.k8s.io/v1beta2", resources))
		return
	}
	if len(path) != 5 || path[0] != "namespaces" || path[2] != "pods" {
		writeStatus(w, http.StatusNotFound, "only pod metrics are modelled: namespaces/NAMESPACE/pods/NAME/METRIC")
		return
	}
	namespace, name, metric := path[1], path[3], path[4]
	pods, err := a.pods.Pods(namespace).List(selector)
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, err.Error())
		return
	}
	list := custommetrics.MetricValueList{TypeMeta: metav1.TypeMeta{Kind: "MetricValueList", APIVersion: "custom.metrics.k8s.io/v1beta2"}}
	window := int64(30)
	for _, pod := range pods {
		if (name != "*" && pod.Name != name) || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, rule := range model.PodMetrics {
			ruleSelector, err := labels.Parse(rule.Selector)
			if rule.Namespace != namespace || rule.Metric != metric || err != nil || !ruleSelector.Matches(labels.Set(pod.Labels)) {
				continue
			}
			value, err := resource.ParseQuantity(rule.Value)
			if err != nil {
				continue
			}
			list.Items = append(list.Items, custommetrics.MetricValue{
				DescribedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: pod.Name},
				Metric:          custommetrics.MetricIdentifier{Name: metric},
				Timestamp:       metav1.Now(),
				WindowSeconds:   &window,
				Value:           value,
			})
			break
		}
	}
	writeJSON(w, list)
}

// serveExternalMetrics answers namespaces/NS/METRIC.
func serveExternalMetrics(w http.ResponseWriter, model loadModel, path []string, selector labels.Selector) {
	if len(path) == 0 {
		var resources []metav1.APIResource
		for _, rule := range model.ExternalMetrics {
			resources = append(resources, metav1.APIResource{Name: rule.Metric, Namespaced: true, Kind: "ExternalMetricValueList", Verbs: []string{"get"}})
		}
		writeJSON(w, discovery("external.metrics.k8s.io/v1beta1", resources))
		return
	}
	if len(path) != 3 || path[0] != "namespaces" {
		writeStatus(w, http.StatusNotFound, "namespaces/NAMESPACE/METRIC")
		return
	}
	list := externalmetrics.ExternalMetricValueList{TypeMeta: metav1.TypeMeta{Kind: "ExternalMetricValueList", APIVersion: "external.metrics.k8s.io/v1beta1"}}
	for _, rule := range model.ExternalMetrics {
		if rule.Namespace != path[1] || rule.Metric != path[2] || !selector.Matches(labels.Set(rule.Labels)) {
			continue
		}
		value, err := resource.ParseQuantity(rule.Value)
		if err != nil {
			continue
		}
		list.Items = append(list.Items, externalmetrics.ExternalMetricValue{MetricName: rule.Metric, MetricLabels: rule.Labels, Timestamp: metav1.Now(), Value: value})
	}
	writeJSON(w, list)
}
