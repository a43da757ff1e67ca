package main

// etcd.go owns the embedded etcd: one member on the loopback interface, its data in the control plane's
// directory.

import (
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts etcd with its data under dataDir and returns it once it serves.
func startEtcd(dataDir string, clientPort, peerPort int) (*embed.Etcd, string, error) {
	config := embed.NewConfig()
	config.Name = "wasp-controlplane"
	config.Dir = filepath.Join(dataDir, "etcd")
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	config.ListenClientUrls = []url.URL{clientURL}
	config.AdvertiseClientUrls = []url.URL{clientURL}
	config.ListenPeerUrls = []url.URL{peerURL}
	config.AdvertisePeerUrls = []url.URL{peerURL}
	config.InitialCluster = config.InitialClusterFromName(config.Name)
	config.LogLevel = "error"
	config.LogOutputs = []string{filepath.Join(dataDir, "etcd.log")}
	// A test cluster's data need not survive a power cut: without fsync, etcd's writes cost no disk flush.
	config.UnsafeNoFsync = true
	server, err := embed.StartEtcd(config)
	if err != nil {
		return nil, "", fmt.Errorf("etcd: %w", err)
	}
	select {
	case <-server.Server.ReadyNotify():
		return server, clientURL.String(), nil
	case err := <-server.Err():
		server.Close()
		return nil, "", fmt.Errorf("etcd: %w", err)
	case <-time.After(60 * time.Second):
		server.Close()
		return nil, "", fmt.Errorf("etcd: not ready after 60s")
	}
}
