package main

// kubeconfig.go owns the kubeconfig files the control plane writes: one per identity, each self-contained
// (certificates inlined), so a file can be copied elsewhere and used as it is.

import (
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig for the client certificate `identity` (pki's IDENTITY.crt/.key) at path.
func writeKubeconfig(p pki, server, identity, path string) error {
	ca, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(p.path(identity + ".crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(p.path(identity + ".key"))
	if err != nil {
		return err
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["wasp-controlplane"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	config.AuthInfos[identity] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	config.Contexts["wasp-controlplane"] = &clientcmdapi.Context{Cluster: "wasp-controlplane", AuthInfo: identity}
	config.CurrentContext = "wasp-controlplane"
	return clientcmd.WriteToFile(*config, path)
}

// restConfig reads a kubeconfig written by writeKubeconfig.
func restConfig(path string) (*rest.Config, error) {
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	config.QPS = 200
	config.Burst = 400
	return config, nil
}
