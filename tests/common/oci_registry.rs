//! A real OCI registry on loopback for a test: Debian's `docker-registry` (the CNCF distribution registry), with TLS
//! from a CA of the test's own and basic auth (an htpasswd file from apache2-utils' `htpasswd`), its blobs on disk
//! where a test can tamper with them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const USER: &str = "team";
pub const PASSWORD: &str = "registry password";

pub struct Registry {
    process: Option<Child>,
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// The CA that signed the registry's certificate (PEM).
    pub ca_file: PathBuf,
    /// A Docker config file with the registry's credentials (`auths`, as a dockerconfigjson Secret holds), named
    /// `config.json` in its own folder (`DOCKER_CONFIG` for cosign).
    pub credentials: PathBuf,
    config: PathBuf,
}

/// What the tests with a registry lack here, if anything (see [`super::can_run`]).
pub fn missing() -> Option<String> {
    let installed = |path: &str| Path::new(path).exists();
    (!installed("/usr/bin/docker-registry") || !installed("/usr/bin/htpasswd"))
        .then(|| "docker-registry or htpasswd is missing: install Debian's docker-registry and apache2-utils packages (.ci/run does)".to_string())
}

fn binary() -> &'static str {
    let path = "/usr/bin/docker-registry";
    assert!(Path::new(path).exists(), "{path} is missing: install Debian's docker-registry and apache2-utils packages (.ci/run does)");
    path
}

impl Registry {
    pub fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        let serving = wasp::admission::certs::generate(&["127.0.0.1".to_string()], 1).unwrap();
        let (ca_file, certificate, key) = (path.join("ca.crt"), path.join("tls.crt"), path.join("tls.key"));
        std::fs::write(&ca_file, &serving.ca).unwrap();
        std::fs::write(&certificate, &serving.certificate).unwrap();
        std::fs::write(&key, &serving.private_key).unwrap();
        let htpasswd = Command::new("htpasswd").args(["-Bbn", USER, PASSWORD]).output().expect("htpasswd (apache2-utils) runs");
        assert!(htpasswd.status.success(), "htpasswd: {}", String::from_utf8_lossy(&htpasswd.stderr));
        std::fs::write(path.join("htpasswd"), &htpasswd.stdout).unwrap();
        let address = format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
        let config = path.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: {address}\n  tls: {{certificate: {}, key: {}}}\nauth:\n  htpasswd: {{realm: wasp-test, path: {}}}\n",
                path.join("storage").display(),
                certificate.display(),
                key.display(),
                path.join("htpasswd").display()
            ),
        )
        .unwrap();
        std::fs::create_dir(path.join("docker")).unwrap();
        let credentials = path.join("docker/config.json");
        let auth = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("{USER}:{PASSWORD}"));
        std::fs::write(&credentials, serde_json::json!({"auths": {&address: {"auth": auth}}}).to_string()).unwrap();
        let mut registry = Registry { process: None, dir, address, ca_file, credentials, config };
        registry.run();
        registry
    }

    /// Starts the registry process and waits until it answers (401: it asks for credentials).
    fn run(&mut self) {
        let log = std::fs::File::options().create(true).append(true).open(self.dir.path().join("registry.log")).unwrap();
        let process =
            Command::new(binary()).arg("serve").arg(&self.config).stdout(Stdio::from(log.try_clone().unwrap())).stderr(Stdio::from(log)).spawn().unwrap();
        self.process = Some(process);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&self.address).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not listen: {}",
                std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the registry (its storage stays): a registry that is down.
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            super::control_plane::stop(&mut process, Duration::from_secs(10));
        }
    }

    /// Starts it again on the same address and storage.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// The file the registry keeps the blob `sha256:HEX` in.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.path().join("storage/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }

    /// What cosign needs to reach the registry: its CA trusted, its credentials.
    pub fn cosign_environment(&self) -> Vec<(&'static str, PathBuf)> {
        vec![("SSL_CERT_FILE", self.ca_file.clone()), ("DOCKER_CONFIG", self.credentials.parent().unwrap().to_path_buf())]
    }

    /// `oci://127.0.0.1:PORT/REPOSITORY`.
    pub fn reference(&self, repository: &str) -> String {
        format!("oci://{}/{repository}", self.address)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
