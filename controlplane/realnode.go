package main

// realnode.go owns the real nodes of `--real-nodes N`: for each, a containerd (runc, the CNI bridge plugins) and a
// kubelet, built by scripts/build-node.sh, each node with its own folders under DATA/nodes/NAME, its own address
// on the sandbox's loopback interface (10.200.0.I), its own bridge (cniI, pods on 10.88.I.0/24) and its own
// cgroup root, authenticated as system:node:NAME with a certificate of the cluster CA. kwok leaves them alone (the
// label realNodeLabel, kwok.go). Everything runs in the sandbox (sandbox.go).
//
// The settings that differ from a kubelet's defaults, and why:
//   - failCgroupV1: false: this machine's kernel mounts cgroup v1, which kubelet 1.35+ refuses by default;
//   - oomScoreAdj 0 and containerd's restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so no process may
//     lower an oom_score_adj (runc init fails with "failed to update /proc/self/oom_score_adj: Permission denied");
//   - protectKernelDefaults: the kubelet never writes a sysctl (the sandbox fakes the three it checks);
//   - imageGCHighThresholdPercent 100: images are imported, nothing can be pulled again;
//   - syncFrequency (--kubelet-sync-frequency, default the kubelet's 1m): how soon a ConfigMap volume follows
//     its ConfigMap.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// realNodeLabel marks a Node a real kubelet runs: kwok leaves it, its Lease and its pods alone.
const realNodeLabel = "controlplane.wasp.dev/real-node"

// pauseImage is the pod sandbox image containerd 2.4 runs by default (its CRI plugin pins it).
const pauseImage = "registry.k8s.io/pause:3.10.2"

// realNode is one node's name, address and folder.
type realNode struct {
	name  string
	index int
	ip    string
	dir   string
}

func realNodes(count int, dataDir string) []realNode {
	nodes := make([]realNode, count)
	for i := range nodes {
		name := fmt.Sprintf("realnode-%d", i+1)
		nodes[i] = realNode{name: name, index: i + 1, ip: fmt.Sprintf("10.200.0.%d", i+1), dir: filepath.Join(dataDir, "nodes", name)}
	}
	return nodes
}

func (n realNode) path(name string) string { return filepath.Join(n.dir, name) }
func (n realNode) socket() string          { return n.path("containerd.sock") }

// nodeIdentity is the certificate name of a node's kubelet (pki: node-NAME.crt).
func nodeIdentity(name string) string { return "node-" + name }

// realNodeLeaves are the certificates real nodes need: each kubelet's client identity, and the API server's for
// calling kubelets (logs, exec, port-forward), which the kubelets check against the cluster CA.
func realNodeLeaves(nodes []realNode) map[string]leaf {
	if len(nodes) == 0 {
		return nil
	}
	leaves := map[string]leaf{"apiserver-kubelet-client": {commonName: "kube-apiserver-kubelet-client", groups: []string{"system:masters"}, client: true}}
	for _, node := range nodes {
		leaves[nodeIdentity(node.name)] = leaf{commonName: "system:node:" + node.name, groups: []string{"system:nodes"}, client: true}
	}
	return leaves
}

// realNodeAPIServerArgs are the API server's flags for calling kubelets: with its client certificate, at the
// node's InternalIP (the node names resolve nowhere).
func realNodeAPIServerArgs(p pki) []string {
	return []string{
		"--kubelet-client-certificate=" + p.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + p.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// nodeSettings are what every node's configuration shares.
type nodeSettings struct {
	binDir        string
	dataDir       string
	cgroupFolder  string
	caFile        string
	syncFrequency time.Duration
}

func (n realNode) writeConfiguration(settings nodeSettings) error {
	for _, dir := range []string{"containerd", "containerd-state", "kubelet", "pod-logs", "cni/net.d", "cni/networks"} {
		if err := os.MkdirAll(n.path(dir), 0o755); err != nil {
			return err
		}
	}
	containerd := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.snapshotter.v1.erofs', 'io.containerd.differ.v1.erofs']

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[5]q

  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[6]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[7]q]
      conf_dir = %[8]q

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = %[9]q
    stream_server_port = '0'

  [plugins.'io.containerd.internal.v1.opt']
    path = %[10]q
`, n.path("containerd"), n.path("containerd-state"), n.socket(), n.socket()+".ttrpc", pauseImage,
		filepath.Join(settings.binDir, "runc"), filepath.Join(settings.binDir, "cni"), n.path("cni/net.d"), n.ip,
		n.path("containerd/opt"))
	bridge := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "wasp-%[1]s",
  "plugins": [{
    "type": "bridge", "bridge": "cni%[2]d", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": %[3]q,
      "ranges": [[{"subnet": "10.88.%[2]d.0/24", "gateway": "10.88.%[2]d.1"}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
`, n.name, n.index, n.path("cni/networks"))
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s/%[2]s
containerRuntimeEndpoint: unix://%[3]s
address: %[4]s
port: 10250
readOnlyPort: 0
healthzBindAddress: %[4]s
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[5]q}
authorization:
  mode: Webhook
protectKernelDefaults: true
oomScoreAdj: 0
podLogsDir: %[6]q
resolvConf: %[7]q
clusterDomain: cluster.local
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
failSwapOn: false
syncFrequency: %[8]s
rotateCertificates: false
serverTLSBootstrap: false
`, settings.cgroupFolder, n.name, n.socket(), n.ip, settings.caFile, n.path("pod-logs"), n.path("resolv.conf"),
		settings.syncFrequency)
	files := map[string]string{
		"containerd.toml":              containerd,
		"cni/net.d/10-bridge.conflist": bridge,
		"kubelet.yaml":                 kubelet,
		// No DNS server answers in the sandbox: lookups fail at once, locally.
		"resolv.conf": "nameserver 127.0.0.53\n",
	}
	for name, content := range files {
		if err := os.WriteFile(n.path(name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return makeCgroup(settings.cgroupFolder, n.name)
}

// startRealNodes starts every node's containerd, imports the images into it, starts its kubelet, and waits for
// every Node to be Ready.
func startRealNodes(ctx context.Context, components *group, admin kubernetes.Interface, p pki, server string, nodes []realNode, settings nodeSettings, images []string) error {
	// The bootstrap system:node role, bound to the nodes' group (this control plane has no Node authorizer).
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "wasp-controlplane:nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding system:node: %w", err)
	}
	pause := filepath.Join(settings.dataDir, "pause.tar")
	if err := writeImage(imageSpec{tag: pauseImage, entrypoint: "/pause", user: "65535", files: map[string]string{"/pause": filepath.Join(settings.binDir, "pause")}}, pause); err != nil {
		return fmt.Errorf("the pause image: %w", err)
	}
	images = append([]string{pause}, images...)
	path := settings.binDir + ":" + filepath.Join(settings.binDir, "cni") + ":" + os.Getenv("PATH")
	for _, node := range nodes {
		if err := node.writeConfiguration(settings); err != nil {
			return fmt.Errorf("node %s: %w", node.name, err)
		}
		if err := writeKubeconfig(p, server, nodeIdentity(node.name), node.path("kubelet.kubeconfig")); err != nil {
			return err
		}
		containerd := exec.Command(filepath.Join(settings.binDir, "containerd"), "--config", node.path("containerd.toml"))
		containerd.Env = append(os.Environ(), "PATH="+path)
		if err := startProcess(components, "containerd "+node.name, containerd, node.path("containerd.log")); err != nil {
			return err
		}
		if err := node.importImages(ctx, settings.binDir, images); err != nil {
			return fmt.Errorf("node %s: %w", node.name, err)
		}
		kubelet := exec.Command(filepath.Join(settings.binDir, "kubelet"),
			"--config", node.path("kubelet.yaml"),
			"--kubeconfig", node.path("kubelet.kubeconfig"),
			"--root-dir", node.path("kubelet"),
			"--hostname-override", node.name,
			"--node-ip", node.ip,
			"--node-labels", realNodeLabel+"=true",
			"--v", "2")
		kubelet.Env = containerd.Env
		if err := startProcess(components, "kubelet "+node.name, kubelet, node.path("kubelet.log")); err != nil {
			return err
		}
	}
	for _, node := range nodes {
		if err := waitForNodeReady(ctx, components, admin, node.name); err != nil {
			return fmt.Errorf("node %s (its logs: %s, %s): %w", node.name, node.path("kubelet.log"), node.path("containerd.log"), err)
		}
	}
	return nil
}

// importImages waits for the node's containerd to serve, then imports each image tar into the namespace the CRI
// plugin uses.
func (n realNode) importImages(ctx context.Context, binDir string, images []string) error {
	ctr := filepath.Join(binDir, "ctr")
	deadline := time.Now().Add(30 * time.Second)
	for exec.CommandContext(ctx, ctr, "--address", n.socket(), "version").Run() != nil {
		if time.Now().After(deadline) {
			return errors.New("containerd not serving after 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, image := range images {
		if output, err := exec.CommandContext(ctx, ctr, "--address", n.socket(), "-n", "k8s.io", "images", "import", image).CombinedOutput(); err != nil {
			return fmt.Errorf("importing %s: %v: %s", image, err, strings.TrimSpace(string(output)))
		}
	}
	return nil
}

// startProcess runs command as one of the components, its output into logPath: SIGTERM when the components
// stop, SIGKILL 20 s later.
func startProcess(components *group, name string, command *exec.Cmd, logPath string) error {
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	command.Stdout, command.Stderr = log, log
	if err := command.Start(); err != nil {
		log.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- command.Wait(); log.Close() }()
	components.start(name, func(ctx context.Context) error {
		select {
		case err := <-exited:
			return fmt.Errorf("exited (%v); its log: %s", err, logPath)
		case <-ctx.Done():
		}
		command.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			command.Process.Kill()
			<-exited
		}
		return nil
	})
	return nil
}

func waitForNodeReady(ctx context.Context, components *group, admin kubernetes.Interface, name string) error {
	deadline := time.After(120 * time.Second)
	for {
		node, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, condition := range node.Status.Conditions {
				if condition.Type == corev1.NodeReady && condition.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-components.done():
			return errors.Join(errors.New("the control plane stopped while the node started"), components.failure())
		case <-deadline:
			return errors.New("not Ready after 120s")
		case <-time.After(200 * time.Millisecond):
		}
	}
}
