package main

// sandbox.go owns the private namespaces real nodes run in (`--real-nodes`): the command re-executes itself in
// new mount, network and PID namespaces, so that kubelets, containerd, their pods, the CNI bridges and the node
// addresses exist only there. Nothing on the host is configured: no sysctl is written (the few a kubelet insists
// on are read from files bind-mounted over /proc/sys inside), no interface or route appears, and when the
// sandbox's first process exits the kernel ends every process in it, containers included. What does touch the
// host are the kubelets' cgroups (a folder of our own in each hierarchy), removed when the sandbox has ended, and
// the empty mountpoint /var/lib/cni, removed when the last sandbox running at once has ended.
//
// The API server listens inside (0.0.0.0:443: the `kubernetes` Service's address 10.96.0.1 is one of the
// sandbox's own, so pods reach it as in-cluster clients do); clients on the host reach it through a listener this
// process opens on the host's 127.0.0.1 before entering and hands to the sandbox, which relays each connection
// to the API server (TLS passes through untouched).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// sandboxEnv marks the re-executed process: it is inside the namespaces; its value is the cgroup folder.
	sandboxEnv = "WASP_CONTROLPLANE_SANDBOX"
	// sandboxAPIPort is the API server's port inside the sandbox: the `kubernetes` Service's port, so that
	// in-cluster clients' KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT reach it with no proxy.
	sandboxAPIPort = 443
	// hostListenerFD is the host listener's descriptor in the sandbox (the first of exec's ExtraFiles).
	hostListenerFD = 3
	// cniCacheDir is libcni's result cache, a path containerd cannot move: a folder of the data directory is
	// mounted over it inside.
	cniCacheDir = "/var/lib/cni"
)

// cniMountpoint is this sandbox's share of /var/lib/cni on the host. Sandboxes running at once share it: each
// holds a shared lock on sandboxLock while it runs; the one that made the folder leaves a marker, and the last
// to end (the one that can take the lock exclusively) removes the folder only if a sandbox made it. A folder the
// host had before is never removed.
type cniMountpoint struct{ lock *os.File }

const (
	sandboxLock = "/run/wasp-controlplane.lock"
	cniMadeMark = "/run/wasp-controlplane-made-var-lib-cni"
)

func claimCNIMountpoint() (*cniMountpoint, error) {
	lock, err := os.OpenFile(sandboxLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	// Shared for the sandbox's life: it waits only while the last sandbox to end removes the folder (release
	// holds the lock exclusively then). An exclusive lock here would wait for every running sandbox to end.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_SH); err != nil {
		lock.Close()
		return nil, fmt.Errorf("locking %s: %w", sandboxLock, err)
	}
	// Two sandboxes may both find no folder: both make it (MkdirAll takes an existing one) and both mark it, which
	// says the same; one that finds it there leaves the marker as it is, absent when the host had the folder.
	if _, err := os.Stat(cniCacheDir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(cniCacheDir, 0o755); err != nil {
			lock.Close()
			return nil, fmt.Errorf("the mountpoint %s: %w", cniCacheDir, err)
		}
		if err := os.WriteFile(cniMadeMark, nil, 0o600); err != nil {
			lock.Close()
			return nil, err
		}
	}
	return &cniMountpoint{lock: lock}, nil
}

// release removes the folder if this is the last sandbox and a sandbox made it.
func (c *cniMountpoint) release() {
	defer c.lock.Close()
	if syscall.Flock(int(c.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return // another sandbox still runs on it
	}
	if _, err := os.Stat(cniMadeMark); err == nil {
		os.Remove(cniCacheDir)
		os.Remove(cniMadeMark)
	}
}

// inSandbox says whether this process is the re-executed one, inside the namespaces.
func inSandbox() bool { return os.Getenv(sandboxEnv) != "" }

// runSandboxed is the host side of `--real-nodes`: it opens the host listener, re-executes this command in new
// namespaces, relays SIGINT and SIGTERM to it, and once it has ended removes what it left on the host.
func runSandboxed(opts options) error {
	if os.Geteuid() != 0 {
		return errors.New("--real-nodes needs root: the kubelets and containerd make cgroups, mounts and network namespaces")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		return errors.New("--real-nodes supports cgroup v1 hosts only for now (no /sys/fs/cgroup/memory)")
	}
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", opts.port))
	if err != nil {
		return fmt.Errorf("the API server's host address: %w", err)
	}
	listenerFile, err := listener.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	listener.Close()
	cniMountpoint, err := claimCNIMountpoint()
	if err != nil {
		return err
	}
	defer cniMountpoint.release()
	// The data directory is removed from here, once the sandbox has ended: inside, containers' and volumes' mounts
	// lie below it (a hostPath volume's is the host's own folder) until the kernel has taken the namespace down.
	dataDir := opts.dataDir
	if dataDir == "" {
		if dataDir, err = os.MkdirTemp("", "wasp-controlplane-"); err != nil {
			return err
		}
		if !opts.keep {
			defer os.RemoveAll(dataDir)
		}
	}
	cgroupFolder := fmt.Sprintf("wasp-controlplane-%d", os.Getpid())
	defer removeCgroups(cgroupFolder)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self, append(os.Args[1:], "--data-dir", dataDir)...)
	child.Env = append(os.Environ(), sandboxEnv+"="+cgroupFolder)
	child.Stdin, child.Stdout, child.Stderr = nil, os.Stdout, os.Stderr
	child.ExtraFiles = []*os.File{listenerFile}
	child.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID,
		// If this process dies, the sandbox goes with it.
		Pdeathsig: syscall.SIGKILL,
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	if err := child.Start(); err != nil {
		return fmt.Errorf("entering the sandbox: %w", err)
	}
	listenerFile.Close()
	// Callers enter the sandbox with `nsenter -t PID -m -n` (pod addresses, kubelet ports).
	fmt.Printf("sandbox pid: %d\n", child.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	for {
		select {
		case received := <-signals:
			child.Process.Signal(received)
		case err := <-exited:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				// The sandbox said why on stderr.
				return fmt.Errorf("the sandbox exited with %s", exit.ProcessState)
			}
			return err
		}
	}
}

// prepareSandbox makes the namespaces this process was started in ready for nodes: mounts private to them, the
// loopback interface up with the Service address and the nodes' addresses, forwarding between the CNI bridges,
// a /proc of this PID namespace, tmpfs over the folders containerd and the kubelet hard-code, and the sysctls a
// kubelet checks faked by files (it runs with protectKernelDefaults: it reads them and never writes).
func prepareSandbox(dataDir string, nodes []realNode) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	commands := [][]string{{"ip", "link", "set", "lo", "up"}, {"ip", "addr", "add", serviceClusterIP + "/32", "dev", "lo"}}
	for _, node := range nodes {
		commands = append(commands, []string{"ip", "addr", "add", node.ip + "/32", "dev", "lo"})
	}
	for _, command := range commands {
		if output, err := exec.Command(command[0], command[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(command, " "), err, output)
		}
	}
	// The network namespace's own setting: pods on one node's bridge reach another's through it.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("forwarding in the sandbox: %w", err)
	}
	for _, dir := range []string{"/run", "/var/log"} {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=755"); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", dir, err)
		}
	}
	cniCache := filepath.Join(dataDir, "cni-cache")
	if err := os.MkdirAll(cniCache, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(cniCache, cniCacheDir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("mounting %s over %s: %w", cniCache, cniCacheDir, err)
	}
	fakes := filepath.Join(dataDir, "sysctl")
	if err := os.MkdirAll(fakes, 0o755); err != nil {
		return err
	}
	for sysctl, value := range map[string]string{"kernel/panic": "10", "kernel/panic_on_oops": "1", "vm/overcommit_memory": "1"} {
		fake := filepath.Join(fakes, strings.ReplaceAll(sysctl, "/", "."))
		if err := os.WriteFile(fake, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
		if err := syscall.Mount(fake, "/proc/sys/"+sysctl, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("faking %s: %w", sysctl, err)
		}
	}
	return nil
}

// endSandboxProcesses ends every other process of the sandbox (kubelets, containerd, the pods' containers), as
// this process is the first of its PID namespace: their connections would otherwise hold the API server's
// graceful stop for its request timeout, and a node is not stopped gracefully anyway (its state goes with the
// data directory).
func endSandboxProcesses() {
	syscall.Kill(-1, syscall.SIGKILL)
}

// relayHostListener serves the host listener handed over by runSandboxed: each connection is relayed to the API
// server inside, until ctx is done.
func relayHostListener(ctx context.Context, listener net.Listener) error {
	go func() { <-ctx.Done(); listener.Close() }()
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(sandboxAPIPort))
	for {
		client, err := listener.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer client.Close()
			server, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer server.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(server, client); server.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { io.Copy(client, server); client.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

// cgroupHierarchies lists the mounted cgroup hierarchies: a kubelet checks that its cgroup root exists in every
// one, the named systemd hierarchy included.
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var hierarchies []string
	for _, entry := range entries {
		if entry.IsDir() {
			hierarchies = append(hierarchies, filepath.Join("/sys/fs/cgroup", entry.Name()))
		}
	}
	return hierarchies
}

// makeCgroup creates folder/sub (sub may be empty) in every hierarchy; cpuset's new folders get their parent's
// CPUs and memory nodes (v1 leaves them empty, and a cgroup with no CPUs takes no process).
func makeCgroup(folder, sub string) error {
	for _, hierarchy := range cgroupHierarchies() {
		parent := hierarchy
		for _, part := range []string{folder, sub} {
			if part == "" {
				continue
			}
			dir := filepath.Join(parent, part)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
			if filepath.Base(hierarchy) == "cpuset" {
				for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
					value, err := os.ReadFile(filepath.Join(parent, file))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, file), value, 0o644); err != nil {
						return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, file), err)
					}
				}
			}
			parent = dir
		}
	}
	return nil
}

// removeCgroups removes folder and everything below it from every hierarchy, deepest first (a cgroup folder is
// removed with rmdir once it holds no process; the sandbox's processes have all ended by now).
func removeCgroups(folder string) {
	for _, hierarchy := range cgroupHierarchies() {
		root := filepath.Join(hierarchy, folder)
		var dirs []string
		filepath.WalkDir(root, func(path string, entry os.DirEntry, err error) error {
			if err == nil && entry.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			// The processes the kernel ended with the sandbox may take a moment to leave their cgroups.
			err := syscall.Rmdir(dirs[i])
			for tries := 0; errors.Is(err, syscall.EBUSY) && tries < 100; tries++ {
				time.Sleep(100 * time.Millisecond)
				err = syscall.Rmdir(dirs[i])
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				fmt.Fprintf(os.Stderr, "wasp-controlplane: cgroup %s left behind: %v\n", dirs[i], err)
			}
		}
	}
}
