package main

// resolver.go owns how the API server reaches a Service's backend (admission webhooks, aggregated APIs such as
// metrics.k8s.io). There is no cluster network on this machine: a Service whose backend is a process on this
// machine says where it listens with the annotation `controlplane.wasp.dev/address: 127.0.0.1:PORT`; any other
// Service is resolved as kube-apiserver resolves it (its ClusterIP, or an ExternalName). With real nodes there is
// a pod network but no kube-proxy to route ClusterIPs: Services resolve to a ready endpoint's address, as
// kube-apiserver's --enable-aggregator-routing does.

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"

	"k8s.io/apiserver/pkg/util/proxy"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// addressAnnotation names the local address of a Service's backend.
const addressAnnotation = "controlplane.wasp.dev/address"

// localServiceResolver implements kube-apiserver's webhook.ServiceResolver. Its Service lister is set once the
// API server serves (the API server needs the resolver before it can start).
type localServiceResolver struct {
	services atomic.Pointer[corelisters.ServiceLister]
	// endpointSlices is set when Services resolve to their endpoints (real nodes).
	endpointSlices atomic.Pointer[proxy.EndpointSliceGetter]
}

func (r *localServiceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	lister := r.services.Load()
	if lister == nil {
		return nil, fmt.Errorf("service %s/%s: the control plane's service cache is not ready yet", namespace, name)
	}
	service, err := (*lister).Services(namespace).Get(name)
	if err != nil {
		return nil, fmt.Errorf("service %s/%s: %w", namespace, name, err)
	}
	if address, ok := service.Annotations[addressAnnotation]; ok {
		host, portText, err := net.SplitHostPort(address)
		if err != nil {
			return nil, fmt.Errorf("service %s/%s: annotation %s=%q: want HOST:PORT: %w", namespace, name, addressAnnotation, address, err)
		}
		if _, err := strconv.ParseUint(portText, 10, 16); err != nil {
			return nil, fmt.Errorf("service %s/%s: annotation %s=%q: bad port", namespace, name, addressAnnotation, address)
		}
		// Only this machine: whoever may edit a Service must not be able to send the API server's webhook and
		// aggregated-API traffic anywhere else.
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("service %s/%s: annotation %s=%q: only a loopback address is allowed", namespace, name, addressAnnotation, address)
		}
		return &url.URL{Scheme: "https", Host: net.JoinHostPort(host, portText)}, nil
	}
	if endpointSlices := r.endpointSlices.Load(); endpointSlices != nil {
		return proxy.ResolveEndpoint(*lister, *endpointSlices, namespace, name, port)
	}
	return proxy.ResolveCluster(*lister, namespace, name, port)
}
