// Command wasp-controlplane runs a real Kubernetes control plane in one process, for wasp's end-to-end tests
// and for trying wasp on real Kubernetes without a cloud: etcd, kube-apiserver, kube-controller-manager, kwok's
// node and pod lifecycle in place of kubelets, a metrics adapter behind the aggregation layer (metrics.go),
// optionally kube-scheduler. It writes an admin kubeconfig, prints
// where it is once the cluster is ready, and stops cleanly on SIGINT or SIGTERM.
//
// `wasp-controlplane check-placements` (check.go) judges a scheduler's bindings with kube-scheduler's filters;
// `wasp-controlplane protobuf-walk` (protobuf.go) sends the requests of client-go's protobuf clients.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
)

type options struct {
	dataDir              string
	kubeconfig           string
	port                 int
	kubeScheduler        bool
	kubeSchedulerScoring string
	hpaSyncPeriod        time.Duration
	nodeLeaseDuration    time.Duration
	keep                 bool
	realNodes            int
	nodeBin              string
	images               []string
	kubeletSyncFrequency time.Duration
	featureGates         string
}

func main() {
	subcommands := map[string]func([]string) error{"check-placements": runCheckCommand, "protobuf-walk": runProtobufWalk, "image": runImageCommand}
	if len(os.Args) > 1 && subcommands[os.Args[1]] != nil {
		if err := subcommands[os.Args[1]](os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "wasp-controlplane %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	var opts options
	flag.StringVar(&opts.dataDir, "data-dir", "", "directory for etcd's data, certificates, kubeconfigs, logs and the audit log (default: a new temporary directory, removed on exit)")
	flag.StringVar(&opts.kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig (default: DATA-DIR/admin.kubeconfig)")
	flag.IntVar(&opts.port, "port", 0, "kube-apiserver's port on 127.0.0.1 (default: a free one)")
	flag.BoolVar(&opts.kubeScheduler, "kube-scheduler", false, "also run kube-scheduler (scheduler name default-scheduler)")
	flag.StringVar(&opts.kubeSchedulerScoring, "kube-scheduler-scoring", "LeastAllocated", "kube-scheduler's NodeResourcesFit scoring strategy: LeastAllocated (its default: spreading) or MostAllocated (bin packing)")
	flag.BoolVar(&opts.keep, "keep", false, "keep the data directory on exit")
	flag.DurationVar(&opts.hpaSyncPeriod, "hpa-sync-period", 15*time.Second, "how often the HorizontalPodAutoscaler controller reconciles (kube-controller-manager's --horizontal-pod-autoscaler-sync-period)")
	flag.DurationVar(&opts.nodeLeaseDuration, "node-lease-duration", 40*time.Second, "the fake kubelets' Lease duration, renewed every quarter of it (a kubelet's: 40s); longer spares the control plane the renewals of thousands of nodes, and the node lifecycle controller's grace period follows it")
	flag.IntVar(&opts.realNodes, "real-nodes", 0, "also run this many real nodes (kubelet, containerd, runc: scripts/build-node.sh), all in private namespaces (needs root)")
	flag.StringVar(&opts.nodeBin, "node-bin", "", "where the real nodes' programs are (default: ../node beside this command, as scripts/build-node.sh puts them)")
	flag.Func("image", "an image tar (`wasp-controlplane image`) loaded into every real node's containerd (repeatable)", func(path string) error {
		opts.images = append(opts.images, path)
		return nil
	})
	flag.DurationVar(&opts.kubeletSyncFrequency, "kubelet-sync-frequency", time.Minute, "the real kubelets' syncFrequency: how soon a ConfigMap volume follows its ConfigMap (the kubelet's default: 1m)")
	flag.StringVar(&opts.featureGates, "feature-gates", defaultFeatureGates, "feature gates of kube-apiserver, kube-controller-manager and kube-scheduler (one process: they share them); with GenericWorkload on, the API server also serves scheduling.k8s.io/v1beta1 (Workloads and PodGroups: gang scheduling)")
	flag.Parse()
	// Four components share one heap, and Go's default collector lets it grow to twice what is live: with 5000
	// nodes that passed 1.8 GiB. A soft limit makes the collector work harder near it instead (GOMEMLIMIT
	// overrides it).
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(1 << 30)
	}
	if err := run(opts); err != nil {
		fmt.Fprintf(os.Stderr, "wasp-controlplane: %v\n", err)
		os.Exit(1)
	}
}

func run(opts options) error {
	if opts.realNodes > 0 && !inSandbox() {
		return runSandboxed(opts)
	}
	started := time.Now()
	temporary := opts.dataDir == ""
	if temporary {
		dir, err := os.MkdirTemp("", "wasp-controlplane-")
		if err != nil {
			return err
		}
		opts.dataDir = dir
	}
	if err := os.MkdirAll(opts.dataDir, 0o700); err != nil {
		return err
	}
	if temporary && !opts.keep {
		defer os.RemoveAll(opts.dataDir)
	}
	if opts.kubeconfig == "" {
		opts.kubeconfig = filepath.Join(opts.dataDir, "admin.kubeconfig")
	}
	logFile, err := os.Create(filepath.Join(opts.dataDir, "controlplane.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	// The components log through klog (kwok through slog); their logs go to a file, this command's own lines
	// to stdout.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := klogFlags.Set(name, value); err != nil {
			return err
		}
	}
	klog.SetOutput(logFile)
	slog.SetDefault(slog.New(slog.NewTextHandler(logFile, nil)))

	// With real nodes this process is in the sandbox (sandbox.go): the API server listens on the `kubernetes`
	// Service's port there, and clients on the host come through the listener handed over from outside.
	nodes := realNodes(opts.realNodes, opts.dataDir)
	var hostListener net.Listener
	if inSandbox() {
		if err := prepareSandbox(opts.dataDir, nodes); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		if hostListener, err = net.FileListener(os.NewFile(hostListenerFD, "host-listener")); err != nil {
			return fmt.Errorf("the host listener: %w", err)
		}
		opts.port = sandboxAPIPort
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	if opts.port == 0 {
		opts.port = ports[2]
	}
	p, err := makePKI(filepath.Join(opts.dataDir, "pki"), realNodeLeaves(nodes))
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	etcd, etcdURL, err := startEtcd(opts.dataDir, ports[0], ports[1])
	if err != nil {
		return err
	}
	defer etcd.Close()
	progress(started, "etcd serving; starting kube-apiserver")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	components := newGroup(ctx)

	resolver := &localServiceResolver{}
	apiserverapp.SetServiceResolverForTests(resolver)
	args, err := apiserverArgs(p, etcdURL, opts.port, opts.dataDir, opts.featureGates)
	if err != nil {
		return err
	}
	if inSandbox() {
		// Later flags win: every address of the sandbox (the Service's 10.96.0.1 for pods, 127.0.0.1 for the
		// components and the host relay), and the kubelets' API.
		args = append(append(args, "--bind-address=0.0.0.0"), realNodeAPIServerArgs(p)...)
	}
	components.start("kube-apiserver", func(ctx context.Context) error { return runAPIServer(ctx, args) })

	server := fmt.Sprintf("https://127.0.0.1:%d", opts.port)
	// The admin kubeconfig this process's own clients use: the one it prints, but in the sandbox, whose API
	// server address the host does not reach (and the host's this process does not).
	adminKubeconfig := opts.kubeconfig
	if hostListener != nil {
		adminKubeconfig = filepath.Join(opts.dataDir, "sandbox-admin.kubeconfig")
		if err := writeKubeconfig(p, "https://"+hostListener.Addr().String(), "admin", opts.kubeconfig); err != nil {
			return fmt.Errorf("kubeconfig admin: %w", err)
		}
		components.start("host relay", func(ctx context.Context) error { return relayHostListener(ctx, hostListener) })
	}
	for identity, path := range map[string]string{
		"admin":                   adminKubeconfig,
		"kube-controller-manager": filepath.Join(opts.dataDir, "kube-controller-manager.kubeconfig"),
		"kube-scheduler":          filepath.Join(opts.dataDir, "kube-scheduler.kubeconfig"),
		"kwok":                    filepath.Join(opts.dataDir, "kwok.kubeconfig"),
	} {
		if err := writeKubeconfig(p, server, identity, path); err != nil {
			return fmt.Errorf("kubeconfig %s: %w", identity, err)
		}
	}
	admin, err := waitForAPIServer(ctx, components, adminKubeconfig)
	if err != nil {
		return err
	}
	progress(started, "kube-apiserver ready; starting the metrics adapter, kube-controller-manager and kwok")
	factory := informers.NewSharedInformerFactory(admin, 0)
	services := factory.Core().V1().Services().Lister()
	if inSandbox() {
		endpointSlices, err := proxy.NewEndpointSliceListerGetter(factory.Discovery().V1().EndpointSlices().Lister())
		if err != nil {
			return err
		}
		resolver.endpointSlices.Store(&endpointSlices)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	resolver.services.Store(&services)
	adminConfig, err := restConfig(adminKubeconfig)
	if err != nil {
		return err
	}
	if err := startMetricsAdapter(components.ctx, p, adminConfig, admin); err != nil {
		return fmt.Errorf("metrics adapter: %w", err)
	}

	controllerArgs := append(controllerManagerArgs(p, filepath.Join(opts.dataDir, "kube-controller-manager.kubeconfig")), "--horizontal-pod-autoscaler-sync-period="+opts.hpaSyncPeriod.String(), "--feature-gates="+opts.featureGates)
	// kube-controller-manager's default grace period, 50s, is a kubelet's 40s Lease and a quarter; keep the ratio.
	controllerArgs = append(controllerArgs, "--node-monitor-grace-period="+(opts.nodeLeaseDuration*5/4).String())
	components.start("kube-controller-manager", func(ctx context.Context) error { return runControllerManager(ctx, controllerArgs) })
	components.start("kwok", func(ctx context.Context) error {
		if err := runKwok(ctx, filepath.Join(opts.dataDir, "kwok.kubeconfig"), opts.nodeLeaseDuration); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if opts.kubeScheduler {
		schedulerKubeconfig := filepath.Join(opts.dataDir, "kube-scheduler.kubeconfig")
		args, err := schedulerArgs(opts.dataDir, schedulerKubeconfig, opts.kubeSchedulerScoring)
		if err != nil {
			return err
		}
		args = append(args, "--feature-gates="+opts.featureGates)
		components.start("kube-scheduler", func(ctx context.Context) error { return runScheduler(ctx, args) })
	}
	progress(started, "waiting for the default ServiceAccount (kube-controller-manager's first sync)")
	if err := waitForDefaultServiceAccount(ctx, components, admin); err != nil {
		return err
	}
	if len(nodes) > 0 {
		progress(started, fmt.Sprintf("starting %d real nodes", len(nodes)))
		settings := nodeSettings{binDir: opts.nodeBin, dataDir: opts.dataDir, cgroupFolder: os.Getenv(sandboxEnv), caFile: p.path("ca.crt"), syncFrequency: opts.kubeletSyncFrequency}
		if settings.binDir == "" {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			settings.binDir = filepath.Join(filepath.Dir(self), "..", "node")
		}
		if err := startRealNodes(ctx, components, admin, p, server, nodes, settings, opts.images); err != nil {
			return fmt.Errorf("real nodes: %w", err)
		}
		for _, node := range nodes {
			fmt.Printf("real node: %s %s\n", node.name, node.ip)
		}
		fmt.Printf("sandbox admin kubeconfig: %s\n", adminKubeconfig)
	}
	fmt.Printf("kubeconfig: %s\n", opts.kubeconfig)
	if hostListener != nil {
		fmt.Printf("server: https://%s\n", hostListener.Addr())
	} else {
		fmt.Printf("server: %s\n", server)
	}
	fmt.Printf("data: %s\n", opts.dataDir)
	fmt.Printf("audit log: %s\n", filepath.Join(opts.dataDir, "audit.log"))
	fmt.Printf("load model: configmap %s/%s\n", metricsNamespace, loadConfigMap)
	fmt.Printf("ready in %.1fs\n", time.Since(started).Seconds())

	<-components.done()
	failed := components.failure()
	fmt.Println("stopping")
	if inSandbox() {
		endSandboxProcesses()
	}
	components.wait(30 * time.Second)
	return failed
}

// progress says on stderr how far the start-up is, so a slow start on a busy machine shows where it waits (stdout
// carries the lines callers read).
func progress(started time.Time, stage string) {
	fmt.Fprintf(os.Stderr, "wasp-controlplane: %5.1fs %s\n", time.Since(started).Seconds(), stage)
}

// group runs the components, each on the shared context; the first to fail stops the rest.
type group struct {
	ctx     context.Context
	mu      sync.Mutex
	failed  error
	running sync.WaitGroup
	// stopping names the components still running (guarded by mu), for the message when they take too long.
	stopping map[string]bool
	cancel   context.CancelFunc
}

func newGroup(parent context.Context) *group {
	ctx, cancel := context.WithCancel(parent)
	return &group{ctx: ctx, cancel: cancel}
}

func (g *group) start(name string, run func(context.Context) error) {
	g.running.Add(1)
	g.mu.Lock()
	if g.stopping == nil {
		g.stopping = map[string]bool{}
	}
	g.stopping[name] = true
	g.mu.Unlock()
	go func() {
		defer g.running.Done()
		defer func() { g.mu.Lock(); delete(g.stopping, name); g.mu.Unlock() }()
		err := run(g.ctx)
		if err != nil && g.ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "wasp-controlplane: %s stopped: %v\n", name, err)
			g.mu.Lock()
			if g.failed == nil {
				g.failed = fmt.Errorf("%s: %w", name, err)
			}
			g.mu.Unlock()
			g.cancel()
		}
	}()
}

func (g *group) failure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// done is closed when a component failed (or the process is stopping).
func (g *group) done() <-chan struct{} { return g.ctx.Done() }

func (g *group) wait(limit time.Duration) {
	g.cancel()
	finished := make(chan struct{})
	go func() { g.running.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(limit):
		g.mu.Lock()
		names := make([]string, 0, len(g.stopping))
		for name := range g.stopping {
			names = append(names, name)
		}
		g.mu.Unlock()
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "wasp-controlplane: components still stopping after %s (%s); exiting\n", limit, strings.Join(names, ", "))
	}
}

// waitForAPIServer polls /readyz until the API server is ready and returns an admin client.
func waitForAPIServer(ctx context.Context, components *group, kubeconfig string) (kubernetes.Interface, error) {
	config, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	deadline := time.After(90 * time.Second)
	for {
		status := 0
		client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if status == http.StatusOK {
			return client, nil
		}
		select {
		case <-components.done():
			return nil, errors.Join(errors.New("kube-apiserver did not become ready"), components.failure())
		case <-deadline:
			return nil, fmt.Errorf("kube-apiserver not ready after 90s (last /readyz status %d); see controlplane.log", status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitForDefaultServiceAccount waits for the serviceaccount controller to have made `default` in the default
// namespace: until then the ServiceAccount admission plugin refuses pods there.
func waitForDefaultServiceAccount(ctx context.Context, components *group, client kubernetes.Interface) error {
	deadline := time.After(60 * time.Second)
	for {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			klog.InfoS("waiting for the default ServiceAccount", "err", err)
		}
		select {
		case <-components.done():
			return errors.Join(errors.New("the control plane stopped while starting"), components.failure())
		case <-deadline:
			return fmt.Errorf("no default ServiceAccount after 60s: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts finds n free TCP ports on the loopback interface.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, listener := range listeners {
			listener.Close()
		}
	}()
	for range n {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, listener)
		ports = append(ports, listener.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
