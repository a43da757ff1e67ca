//! A real Kubernetes control plane for a test (`controlplane/`'s `wasp-controlplane`: etcd, kube-apiserver,
//! kube-controller-manager, kwok), kubectl against it, and its audit log: what the API server recorded of every
//! request, which tests count from.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the tests on a real control plane lack here, if anything (see [`super::can_run`]).
pub fn missing() -> Option<String> {
    // Not `super::built`: the benchmarks include this file beside a `super` of their own.
    let path = super::repo_root().join("target/controlplane/wasp-controlplane");
    (!path.exists()).then(|| format!("{} is missing: build it with scripts/build-controlplane.sh (scripts/test.sh does)", path.display()))
}

/// The binary `scripts/test.sh` builds from controlplane/.
pub fn binary() -> PathBuf {
    let path = super::repo_root().join("target/controlplane/wasp-controlplane");
    assert!(
        path.exists(),
        "{} is missing: build it with `cd controlplane && go build -o ../target/controlplane/wasp-controlplane .` (scripts/test.sh does)",
        path.display()
    );
    path
}

pub struct ControlPlane {
    process: Child,
    pub dir: tempfile::TempDir,
    /// The admin kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    pub server: String,
    pub audit_log: PathBuf,
    /// Every line it printed up to `ready in` (`sandbox pid: PID`, `real node: NAME IP` with `--real-nodes`).
    pub printed: Vec<String>,
}

/// What kubectl did: whether it succeeded, its stdout and its stderr.
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl ControlPlane {
    /// Starts a control plane in a new directory and returns once it serves (the default ServiceAccount exists).
    pub fn start() -> ControlPlane {
        Self::start_with(&[])
    }

    /// [`ControlPlane::start`] with more of wasp-controlplane's flags (`--kube-scheduler`, `--hpa-sync-period=5s`).
    pub fn start_with(flags: &[&str]) -> ControlPlane {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let mut process = Command::new(binary())
            .arg("--data-dir")
            .arg(dir.path())
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("wasp-controlplane starts");
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let mut printed = Vec::new();
        // Lines `NAME: VALUE`, in the order wasp-controlplane prints them, the last `ready in DURATION`.
        let mut field = |name: &str| -> String {
            loop {
                let line = lines
                    .next()
                    .unwrap_or_else(|| panic!("wasp-controlplane exited before printing {name:?}; see {}/controlplane.log", dir.path().display()))
                    .unwrap();
                printed.push(line.clone());
                if let Some(value) = line.strip_prefix(&format!("{name}: ")).or_else(|| line.strip_prefix(&format!("{name} "))) {
                    return value.to_string();
                }
            }
        };
        let kubeconfig = PathBuf::from(field("kubeconfig"));
        let server = field("server");
        let audit_log = PathBuf::from(field("audit log"));
        let ready = field("ready in");
        eprintln!("control plane at {server} ready in {ready} ({:.1}s with the process start)", started.elapsed().as_secs_f64());
        // Its later lines ("stopping") must find a reader, or the write kills it before its clean stop.
        std::thread::spawn(move || lines.for_each(drop));
        ControlPlane { process, dir, kubeconfig, server, audit_log, printed }
    }

    /// The value of a line `NAME: VALUE` it printed while starting.
    pub fn printed(&self, name: &str) -> Option<&str> {
        self.printed.iter().find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
    }

    /// The process's id (with `--real-nodes`, the host side of the sandbox).
    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// kubectl as the admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl_with(&self.kubeconfig, args, None)
    }

    /// kubectl as the admin, with `input` on its standard input.
    pub fn kubectl_input(&self, args: &[&str], input: &str) -> Output {
        kubectl_with(&self.kubeconfig, args, Some(input))
    }

    /// kubectl as the admin; fails the test if kubectl fails.
    pub fn must(&self, args: &[&str]) -> String {
        let output = self.kubectl(args);
        assert!(output.ok, "kubectl {}: {}", args.join(" "), output.stderr);
        output.stdout
    }

    /// `kubectl get ... -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        serde_json::from_str(&self.must(&args)).unwrap()
    }

    /// A kubeconfig for `namespace/service_account`, with a token from the TokenRequest API (what a pod of that
    /// ServiceAccount is given), written next to the admin's.
    pub fn service_account_kubeconfig(&self, namespace: &str, service_account: &str) -> PathBuf {
        let token = self.must(&["create", "token", service_account, "-n", namespace, "--duration=2h"]);
        self.write_kubeconfig(&format!("{namespace}-{service_account}"), serde_json::json!({"token": token.trim()}))
    }

    /// A kubeconfig for this cluster with `user`'s credentials, written next to the admin's as NAME.kubeconfig.
    fn write_kubeconfig(&self, name: &str, user: Value) -> PathBuf {
        let admin: Value = serde_yaml::from_str(&std::fs::read_to_string(&self.kubeconfig).unwrap()).unwrap();
        let authority = admin["clusters"][0]["cluster"]["certificate-authority-data"].as_str().unwrap();
        let text = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": {"server": self.server, "certificate-authority-data": authority}}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": "cluster", "user": name}}],
            "current-context": name,
        });
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, serde_json::to_string_pretty(&text).unwrap()).unwrap();
        path
    }

    /// A kubeconfig for user `user` in `groups` holding a client certificate, issued as a cluster's users get
    /// theirs: a CertificateSigningRequest for kube-apiserver's client signer, approved, signed by
    /// kube-controller-manager with the cluster's client CA.
    pub fn client_certificate_kubeconfig(&self, user: &str, groups: &[&str]) -> PathBuf {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, user);
        for group in groups {
            params.distinguished_name.push(rcgen::DnType::OrganizationName, *group);
        }
        let request = params.serialize_request(&key).unwrap().pem().unwrap();
        let base64 = |text: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, text);
        let name = format!("{user}-client");
        let csr = serde_json::json!({
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": base64(&request), "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"], "expirationSeconds": 7200},
        });
        let created = self.kubectl_input(&["create", "-f", "-"], &csr.to_string());
        assert!(created.ok, "{}", created.stderr);
        self.must(&["certificate", "approve", &name]);
        let mut certificate = String::new();
        wait_for(&format!("the CertificateSigningRequest {name} signed"), Duration::from_secs(30), || {
            certificate = self.get_json(&["get", "csr", &name])["status"]["certificate"].as_str().unwrap_or_default().to_string();
            !certificate.is_empty()
        });
        self.write_kubeconfig(user, serde_json::json!({"client-certificate-data": certificate, "client-key-data": base64(&key.serialize_pem())}))
    }

    /// What the control plane's process (etcd, kube-apiserver, the controllers and kwok, all in one) has used so
    /// far.
    pub fn usage(&self) -> Usage {
        process_usage(self.process.id())
    }

    /// Every request the API server has recorded so far (audit events at Metadata level, stage ResponseComplete
    /// or Panic), oldest first.
    pub fn audit(&self) -> Vec<AuditEvent> {
        let text = std::fs::read_to_string(&self.audit_log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| event["stage"] == "ResponseComplete" || event["stage"] == "Panic")
            .map(AuditEvent)
            .collect()
    }

    /// Creates `count` Ready nodes (kwok keeps them so) named `{prefix}-{i}`, spread over `zones`, each with
    /// `cpu` and `memory` allocatable.
    pub fn create_nodes(&self, prefix: &str, count: usize, zones: &[&str], cpu: &str, memory: &str) {
        let mut documents = String::new();
        for index in 0..count {
            let name = format!("{prefix}-{index}");
            let zone = zones[index % zones.len()];
            documents.push_str(&format!(
                "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{kubernetes.io/hostname: {name}, kubernetes.io/os: linux, topology.kubernetes.io/zone: {zone}}}\n  annotations: {{kwok.x-k8s.io/node: fake}}\nstatus:\n  allocatable: {{cpu: '{cpu}', memory: {memory}, pods: '110'}}\n  capacity: {{cpu: '{cpu}', memory: {memory}, pods: '110'}}\n"
            ));
        }
        let output = self.kubectl_input(&["create", "-f", "-"], &documents);
        assert!(output.ok, "creating nodes: {}", output.stderr);
        wait_for(&format!("{count} {prefix} nodes Ready"), Duration::from_secs(60), || {
            let nodes = self.get_json(&["get", "nodes", "-l", "kubernetes.io/os=linux"]);
            nodes["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|node| node["metadata"]["name"].as_str().unwrap().starts_with(&format!("{prefix}-")))
                .filter(|node| {
                    node["status"]["conditions"].as_array().is_some_and(|conditions| conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                })
                .count()
                == count
        });
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        stop(&mut self.process, Duration::from_secs(30));
    }
}

/// wasp's built-in configuration (host/src/config/default-config.yaml: the default policy set), its policy
/// directory made absolute, for a configuration written elsewhere to extend.
pub fn built_in_config() -> String {
    let built_in = std::fs::read_to_string(super::repo_root().join("host/src/config/default-config.yaml")).unwrap();
    let policies = super::repo_root().join("plugins/out");
    let absolute = built_in.replace("policyDir: plugins/out", &format!("policyDir: {}", policies.display()));
    assert!(absolute.contains(&format!("policyDir: {}", policies.display())), "the built-in configuration names plugins/out");
    absolute
}

impl ControlPlane {
    /// `wasp run` on this control plane as its admin, without leader election, its log in `log`: how the
    /// benchmarks run wasp beside the tool it is compared with. Policies are compiled once for every run, in
    /// target/side-by-side-cache: start-up is not what they compare.
    pub fn run_wasp(&self, config: &Path, log: &Path) -> Child {
        Command::new(env!("CARGO_BIN_EXE_wasp"))
            .args(["run", "--no-leader-election", "--listen", "127.0.0.1:0", "--insecure-listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .arg("--cache-dir")
            .arg(super::repo_root().join("target/side-by-side-cache"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "warn")
            .current_dir(super::repo_root())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("wasp runs")
    }
}

/// What the kernel counted for a process: CPU seconds (user and system) and peak resident memory.
pub struct Usage {
    pub cpu_seconds: f64,
    pub peak_mib: f64,
}

/// A running process's [`Usage`], from /proc.
pub fn process_usage(pid: u32) -> Usage {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat of a running process");
    // Fields after the command's closing parenthesis: state is the 3rd field, utime the 14th, stime the 15th.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks: f64 = [11, 12].iter().filter_map(|index| fields.get(*index)?.parse::<f64>().ok()).sum();
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status of a running process");
    let peak_kib: f64 =
        status.lines().find_map(|line| line.strip_prefix("VmHWM:")).and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok()).expect("VmHWM");
    Usage { cpu_seconds: ticks / ticks_per_second, peak_mib: peak_kib / 1024.0 }
}

/// Stops a child process: SIGTERM, then SIGKILL after `patience`.
pub fn stop(process: &mut Child, patience: Duration) {
    // Reaped already: its pid may belong to another process by now.
    if let Ok(Some(_)) = process.try_wait() {
        return;
    }
    let _ = Command::new("kill").arg("-TERM").arg(process.id().to_string()).status();
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = process.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = process.kill();
    let _ = process.wait();
}

/// kubectl with `kubeconfig`.
pub fn kubectl_with(kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Output {
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    Output {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Polls `condition` every 100 ms until it holds; fails the test naming `what` after `patience`.
pub fn wait_for(what: &str, patience: Duration, condition: impl FnMut() -> bool) {
    wait_for_or_explain(what, patience, condition, String::new);
}

/// [`wait_for`], with `explain`'s account of the cluster in the failure.
pub fn wait_for_or_explain(what: &str, patience: Duration, mut condition: impl FnMut() -> bool, explain: impl FnOnce() -> String) {
    let deadline = Instant::now() + patience;
    while !condition() {
        if Instant::now() >= deadline {
            panic!("timed out after {patience:?} waiting for {what}\n{}", explain());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One request as the API server's audit log records it.
pub struct AuditEvent(pub Value);

impl AuditEvent {
    pub fn user(&self) -> &str {
        self.0["user"]["username"].as_str().unwrap_or("")
    }
    pub fn verb(&self) -> &str {
        self.0["verb"].as_str().unwrap_or("")
    }
    pub fn resource(&self) -> &str {
        self.0["objectRef"]["resource"].as_str().unwrap_or("")
    }
    pub fn subresource(&self) -> &str {
        self.0["objectRef"]["subresource"].as_str().unwrap_or("")
    }
    pub fn name(&self) -> &str {
        self.0["objectRef"]["name"].as_str().unwrap_or("")
    }
    pub fn namespace(&self) -> &str {
        self.0["objectRef"]["namespace"].as_str().unwrap_or("")
    }
    pub fn code(&self) -> u64 {
        self.0["responseStatus"]["code"].as_u64().unwrap_or(0)
    }
    pub fn uri(&self) -> &str {
        self.0["requestURI"].as_str().unwrap_or("")
    }
}
