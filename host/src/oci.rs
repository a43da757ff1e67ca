//! Policies as OCI artifacts: pushed and pulled in the CNCF TAG Runtime's wasm layout (one `application/wasm` layer,
//! a `application/vnd.wasm.config.v0+json` config: oci-wasm over oci-client), with signatures attached the way
//! `cosign sign --key` attaches them to an image, so `cosign verify` checks what wasp signed and the reverse.
//!
//! cosign's attached signature, for a manifest of digest `sha256:HEX` in repository `R`: a manifest tagged
//! `sha256-HEX.sig` in `R` whose layers are "simple signing" payloads (`application/vnd.dev.cosign.simplesigning.v1+json`,
//! JSON naming the signed digest) each with its signature, over the payload's bytes, in the annotation
//! `dev.cosignproject.cosign/signature`. The signature covers the manifest, which names the component layer by its
//! digest, and every blob is checked against its digest as it is pulled.

use crate::registry::signature::{self, PublicKey, SigningKey};
use anyhow::{bail, Context};
use base64::Engine;
use oci_client::client::{ClientConfig, Config};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use oci_wasm::{WasmClient, WasmConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How references are written where a file path could be too: `oci://REGISTRY/REPOSITORY:TAG` or `...@sha256:HEX`.
pub const SCHEME: &str = "oci://";
const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const SIGNATURE_TYPE: &str = "cosign container image signature";
const IMAGE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// A simple signing payload is a few hundred bytes; a signature manifest's layers are bounded like its count.
const MAX_PAYLOAD_BYTES: u64 = 64 << 10;
const MAX_SIGNATURES: usize = 64;
/// How long a registry may take to accept a connection, and to send the next bytes: a registry that is down or
/// blackholed costs a reload this much, not the whole pull's deadline.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// `sha256:HEX` of `bytes`, as OCI digests are written.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", crate::registry::source::sha256_hex(bytes))
}

/// Where a registry is reached and as whom.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// A Docker config file (`~/.docker/config.json`, or a `kubernetes.io/dockerconfigjson` Secret's
    /// `.dockerconfigjson`): the credentials of each registry.
    pub credentials: Option<PathBuf>,
    /// CA certificates (PEM) trusted besides the system's, for a registry with a private CA.
    pub ca_file: Option<PathBuf>,
}

/// A reference as written, `oci://` optional.
pub fn parse_reference(text: &str) -> anyhow::Result<Reference> {
    let bare = text.strip_prefix(SCHEME).unwrap_or(text);
    if !bare.contains('/') {
        bail!("{text}: an OCI reference names its registry, REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:HEX");
    }
    bare.parse().with_context(|| format!("{text}: not an OCI reference"))
}

/// One registry's entry in a Docker config file: `auth` is base64 of `user:password`.
#[derive(Deserialize, Default)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
    /// Credential helpers (`docker-credential-*` programs): not run by wasp, which says so.
    #[serde(default)]
    creds_store: Option<String>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
}

/// The credentials `file` holds for `registry` (its entry may be written `https://REGISTRY` or `REGISTRY/v1/`), or
/// anonymous access when it holds none.
fn credentials(file: Option<&Path>, registry: &str) -> anyhow::Result<RegistryAuth> {
    let Some(file) = file else { return Ok(RegistryAuth::Anonymous) };
    let text = std::fs::read(file).with_context(|| format!("reading the registry credentials {}", file.display()))?;
    let config: DockerConfig =
        serde_json::from_slice(&text).with_context(|| format!("{}: not a Docker config file ({{\"auths\": {{...}}}})", file.display()))?;
    let host = |key: &str| key.trim_start_matches("https://").trim_start_matches("http://").split('/').next().unwrap_or_default().to_string();
    let Some(entry) = config.auths.iter().find(|(key, _)| host(key) == registry).map(|(_, entry)| entry) else {
        if config.creds_store.is_some() || config.cred_helpers.contains_key(registry) {
            tracing::warn!(file = %file.display(), registry, "the credentials of this registry are in a credential helper, which wasp does not run; pulling anonymously (put them in auths)");
        }
        return Ok(RegistryAuth::Anonymous);
    };
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        return Ok(RegistryAuth::Basic(username.clone(), password.clone()));
    }
    let encoded = entry.auth.as_deref().with_context(|| format!("{}: the entry of {registry} has neither auth nor username and password", file.display()))?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).ok().and_then(|bytes| String::from_utf8(bytes).ok());
    let (username, password) = decoded
        .as_deref()
        .and_then(|text| text.split_once(':'))
        .with_context(|| format!("{}: the auth of {registry} is not base64 of USER:PASSWORD", file.display()))?;
    Ok(RegistryAuth::Basic(username.to_string(), password.to_string()))
}

/// A client of one registry, with its credentials.
pub struct RegistryClient {
    client: WasmClient,
    auth: RegistryAuth,
}

/// A component pulled with what proves where it came from: the manifest (whose digest a pinned reference names and a
/// signature covers) and the signatures attached to it, so it can be checked again offline, from the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Artifact {
    /// The manifest's digest, `sha256:HEX`.
    pub digest: String,
    #[serde(with = "crate::registry::signature::base64_bytes")]
    pub manifest: Vec<u8>,
    #[serde(skip)]
    pub component: Vec<u8>,
    /// The simple signing payloads attached (as cosign attaches them) and their signatures, unchecked.
    pub signatures: Vec<AttachedSignature>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttachedSignature {
    #[serde(with = "crate::registry::signature::base64_bytes")]
    pub payload: Vec<u8>,
    /// Base64, as in the annotation.
    pub signature: String,
}

impl Artifact {
    /// Whether the parts hold together: the manifest is the digest's, in the wasm layout, and names the component
    /// as its one layer. Checked after a pull and again when the store is read.
    pub fn check(&self) -> Result<(), String> {
        let manifest_digest = sha256_digest(&self.manifest);
        if manifest_digest != self.digest {
            return Err(format!("the manifest's digest is {manifest_digest}, not {}", self.digest));
        }
        let manifest: OciImageManifest = serde_json::from_slice(&self.manifest).map_err(|error| format!("not an OCI image manifest: {error}"))?;
        if manifest.config.media_type != oci_wasm::WASM_MANIFEST_CONFIG_MEDIA_TYPE {
            return Err(format!("its config is {:?}, not a wasm artifact's ({})", manifest.config.media_type, oci_wasm::WASM_MANIFEST_CONFIG_MEDIA_TYPE));
        }
        let [layer] = manifest.layers.as_slice() else {
            return Err(format!("a wasm artifact has one layer, this one {}", manifest.layers.len()));
        };
        let component_digest = sha256_digest(&self.component);
        if layer.media_type != oci_wasm::WASM_LAYER_MEDIA_TYPE || layer.digest != component_digest {
            return Err(format!("its layer is {} of {:?}, the component {component_digest}", layer.digest, layer.media_type));
        }
        Ok(())
    }

    /// Which of `keys` signed this manifest, by the signatures attached to it, or why none did.
    pub fn signer<'a>(&self, keys: &[&'a PublicKey]) -> Result<&'a PublicKey, String> {
        let names = signature::key_names(keys);
        if self.signatures.is_empty() {
            return Err(format!("no signature is attached to {} (cosign's sha256-HEX.sig), and one by {names} is required", self.digest));
        }
        let signs_this = |payload: &[u8]| {
            serde_json::from_slice::<SimpleSigning>(payload)
                .is_ok_and(|claim| claim.critical.kind == SIGNATURE_TYPE && claim.critical.image.digest == self.digest)
        };
        self.signatures
            .iter()
            .filter(|attached| signs_this(&attached.payload))
            .find_map(|attached| signature::verify(keys, &attached.payload, Some(attached.signature.as_bytes())).ok())
            .ok_or_else(|| format!("no signature attached to {} is by any of the keys {names}", self.digest))
    }
}

impl RegistryClient {
    /// A client for the registry of `reference`.
    pub fn new(options: &RegistryOptions, reference: &Reference) -> anyhow::Result<RegistryClient> {
        // reqwest's rustls takes the process's crypto provider: ring, the build's only one (see Cargo.toml).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = ClientConfig::default();
        if let Some(ca_file) = &options.ca_file {
            let data = std::fs::read(ca_file).with_context(|| format!("reading the CA file {}", ca_file.display()))?;
            config.extra_root_certificates.push(oci_client::client::Certificate { encoding: oci_client::client::CertificateEncoding::Pem, data });
        }
        // A wasm artifact has no platforms to choose between.
        config.platform_resolver = None;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(READ_TIMEOUT);
        let auth = credentials(options.credentials.as_deref(), reference.resolve_registry())?;
        Ok(RegistryClient { client: WasmClient::new(Client::new(config)), auth })
    }

    /// Pushes `component` to `reference`; the manifest's digest, as the registry named it when it took the manifest
    /// (not read back by tag, which another push may have moved), checked to name this component.
    pub async fn push(&self, reference: &Reference, component: Vec<u8>) -> anyhow::Result<String> {
        let component_digest = sha256_digest(&component);
        let (config, layer) = WasmConfig::from_raw_component(component, None).context("reading the component for its OCI config")?;
        let pushed = self.client.push(reference, &self.auth, layer, config, None).await.with_context(|| format!("pushing to {}", reference.whole()))?;
        let digest = match pushed.manifest_url.rsplit('/').next().filter(|last| last.starts_with("sha256:")) {
            Some(digest) => digest.to_string(),
            None => bail!("{}: the registry did not name the pushed manifest by its digest ({})", reference.whole(), pushed.manifest_url),
        };
        let pinned = reference.clone_with_digest(digest.clone());
        let (manifest, _) = self.client.pull_image_manifest(&pinned, &self.auth).await.with_context(|| format!("reading back {}", pinned.whole()))?;
        if manifest.layers.iter().map(|layer| layer.digest.as_str()).ne([component_digest.as_str()]) {
            bail!("{}: the manifest the registry named is not the one pushed (its layers are not the component {component_digest})", pinned.whole());
        }
        Ok(digest)
    }

    /// Pulls the component `reference` names (by tag or digest; by digest, exactly that manifest), with the
    /// signatures attached to it. Every blob is checked against its digest.
    pub async fn fetch(&self, reference: &Reference) -> anyhow::Result<Artifact> {
        let accepted = [oci_wasm::WASM_MANIFEST_MEDIA_TYPE];
        let (manifest, _) = self.client.pull_manifest_raw(reference, &self.auth, &accepted).await.with_context(|| format!("pulling {}", reference.whole()))?;
        let digest = sha256_digest(&manifest);
        if let Some(pinned) = reference.digest() {
            if pinned != digest {
                bail!("{}: the registry answered a manifest of digest {digest}", reference.whole());
            }
        }
        let parsed: OciImageManifest = serde_json::from_slice(&manifest).with_context(|| format!("{}: not an OCI image manifest", reference.whole()))?;
        let layer = parsed.layers.first().with_context(|| format!("{}: a manifest without layers", reference.whole()))?;
        let component = self
            .pull_bounded(reference, layer, crate::registry::source::MAX_POLICY_BYTES)
            .await
            .with_context(|| format!("pulling the component layer of {}", reference.whole()))?;
        let signatures = self.attached_signatures(reference, &digest).await?;
        let artifact = Artifact { digest, manifest: manifest.to_vec(), component, signatures };
        artifact.check().map_err(|error| anyhow::anyhow!("{}: {error}", reference.whole()))?;
        Ok(artifact)
    }

    /// The blob `layer` describes, refused once it grows past `limit` bytes (whatever the manifest declares) and
    /// checked against its digest.
    async fn pull_bounded(&self, reference: &Reference, layer: &OciDescriptor, limit: u64) -> anyhow::Result<Vec<u8>> {
        use futures::StreamExt;
        if !(0..=limit as i64).contains(&layer.size) {
            bail!("a blob of {} bytes declared, outside 0..={limit}", layer.size);
        }
        let mut stream = self.client.pull_blob_stream(reference, layer).await?;
        let mut bytes = Vec::with_capacity(layer.size as usize);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if (bytes.len() + chunk.len()) as u64 > limit {
                bail!("the blob grew past {limit} bytes");
            }
            bytes.extend_from_slice(&chunk);
        }
        if sha256_digest(&bytes) != layer.digest {
            bail!("the blob is not its digest {}", layer.digest);
        }
        Ok(bytes)
    }

    /// The manifest of the signatures attached to `digest` (cosign's `sha256-HEX.sig`), or none when the registry
    /// says there is none; any other failure is an error (a registry that fails is not a registry without
    /// signatures).
    async fn signature_manifest(&self, signatures: &Reference) -> anyhow::Result<Option<OciImageManifest>> {
        match self.client.pull_image_manifest(signatures, &self.auth).await {
            Ok((manifest, _)) => Ok(Some(manifest)),
            Err(error) if says_not_found(&error) => Ok(None),
            Err(error) => Err(anyhow::Error::new(error).context(format!("reading the signatures {}", signatures.whole()))),
        }
    }

    /// The signatures cosign's way attaches to manifest `digest`: none when there is no `sha256-HEX.sig`.
    async fn attached_signatures(&self, reference: &Reference, digest: &str) -> anyhow::Result<Vec<AttachedSignature>> {
        let signatures = signature_reference(reference, digest)?;
        let Some(manifest) = self.signature_manifest(&signatures).await? else { return Ok(Vec::new()) };
        let mut attached = Vec::new();
        for layer in manifest.layers.iter().filter(|layer| layer.media_type == SIMPLE_SIGNING_MEDIA_TYPE).take(MAX_SIGNATURES) {
            let Some(signature) = layer.annotations.as_ref().and_then(|annotations| annotations.get(SIGNATURE_ANNOTATION)) else { continue };
            let payload = self
                .pull_bounded(&signatures, layer, MAX_PAYLOAD_BYTES)
                .await
                .with_context(|| format!("pulling a signature payload of {}", signatures.whole()))?;
            attached.push(AttachedSignature { payload, signature: signature.clone() });
        }
        Ok(attached)
    }

    /// Attaches a signature of the manifest `digest` of `reference`'s repository by `key`, as `cosign sign --key`
    /// does: beside the signatures already there.
    pub async fn attach_signature(&self, reference: &Reference, digest: &str, key: &SigningKey) -> anyhow::Result<Reference> {
        let payload = serde_json::to_vec(&SimpleSigning::of(reference, digest)).expect("a payload serializes");
        let signature = key.sign(&payload).map_err(anyhow::Error::msg)?;
        let signatures = signature_reference(reference, digest)?;
        // Beside the signatures there: refused rather than overwriting them when they cannot be read.
        let mut layers = self.signature_manifest(&signatures).await?.map(|manifest| manifest.layers).unwrap_or_default();
        let payload_digest = sha256_digest(&payload);
        self.client.push_blob(&signatures, payload.clone(), &payload_digest).await.context("pushing the signature payload")?;
        let annotations = BTreeMap::from([(SIGNATURE_ANNOTATION.to_string(), signature)]);
        layers.push(OciDescriptor {
            media_type: SIMPLE_SIGNING_MEDIA_TYPE.into(),
            digest: payload_digest.clone(),
            size: payload.len() as i64,
            urls: None,
            annotations: Some(annotations),
            artifact_type: None,
        });
        let diff_ids: Vec<&str> = layers.iter().map(|layer| layer.digest.as_str()).collect();
        let config = serde_json::json!({"architecture": "", "os": "", "config": {}, "rootfs": {"type": "layers", "diff_ids": diff_ids}});
        let config = Config { data: serde_json::to_vec(&config)?.into(), media_type: IMAGE_CONFIG_MEDIA_TYPE.into(), annotations: None };
        let config_digest = sha256_digest(&config.data);
        self.client.push_blob(&signatures, config.data.clone(), &config_digest).await.context("pushing the signature config")?;
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.into()),
            config: OciDescriptor {
                media_type: IMAGE_CONFIG_MEDIA_TYPE.into(),
                digest: config_digest,
                size: config.data.len() as i64,
                urls: None,
                annotations: None,
                artifact_type: None,
            },
            layers,
            ..Default::default()
        };
        self.client.push_manifest(&signatures, &OciManifest::Image(manifest)).await.with_context(|| format!("pushing the signature {}", signatures.whole()))?;
        Ok(signatures)
    }
}

/// Whether the registry answered that the manifest does not exist (a 404, or the distribution API's
/// `MANIFEST_UNKNOWN` or `NAME_UNKNOWN`), as opposed to failing.
fn says_not_found(error: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError, OciErrorCode};
    match error {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().any(|error| matches!(error.code, OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown))
        }
        _ => false,
    }
}

/// Where cosign attaches the signatures of manifest `digest`: the tag `sha256-HEX.sig` of the same repository.
fn signature_reference(reference: &Reference, digest: &str) -> anyhow::Result<Reference> {
    let hex = digest.strip_prefix("sha256:").with_context(|| format!("{digest}: only sha256 digests are signed"))?;
    Ok(Reference::with_tag(reference.registry().to_string(), reference.repository().to_string(), format!("sha256-{hex}.sig")))
}

/// cosign's "simple signing" payload: what a signature attached to an image says it signs.
#[derive(Serialize, Deserialize)]
struct SimpleSigning {
    critical: Critical,
    optional: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Serialize, Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Serialize, Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Serialize, Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

impl SimpleSigning {
    fn of(reference: &Reference, digest: &str) -> SimpleSigning {
        let repository = format!("{}/{}", reference.registry(), reference.repository());
        SimpleSigning {
            critical: Critical {
                identity: Identity { docker_reference: repository },
                image: Image { digest: digest.to_string() },
                kind: SIGNATURE_TYPE.into(),
            },
            optional: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_their_registry_and_oci_scheme_is_optional() {
        let reference = parse_reference("oci://127.0.0.1:5000/team/zone-pin:1.0").unwrap();
        assert_eq!((reference.registry(), reference.repository(), reference.tag()), ("127.0.0.1:5000", "team/zone-pin", Some("1.0")));
        assert!(parse_reference("zone-pin:1.0").unwrap_err().to_string().contains("names its registry"));
        let digest = format!("sha256:{}", "a".repeat(64));
        let pinned = parse_reference(&format!("registry.example/p@{digest}")).unwrap();
        assert_eq!(signature_reference(&pinned, &digest).unwrap().whole(), format!("registry.example/p:sha256-{}.sig", "a".repeat(64)));
    }

    #[test]
    fn credentials_come_from_a_docker_config_by_registry() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        std::fs::write(&file, r#"{"auths": {"https://127.0.0.1:5000/v1/": {"auth": "dXNlcjpwYXNz"}, "other:1": {"username": "u", "password": "p"}}}"#).unwrap();
        assert!(matches!(credentials(Some(&file), "127.0.0.1:5000").unwrap(), RegistryAuth::Basic(user, password) if user == "user" && password == "pass"));
        assert!(matches!(credentials(Some(&file), "other:1").unwrap(), RegistryAuth::Basic(user, _) if user == "u"));
        assert!(matches!(credentials(Some(&file), "elsewhere").unwrap(), RegistryAuth::Anonymous));
        std::fs::write(&file, r#"{"auths": {"r:1": {"auth": "bm9jb2xvbg=="}}}"#).unwrap();
        assert!(credentials(Some(&file), "r:1").err().unwrap().to_string().contains("not base64 of USER:PASSWORD"));
    }
}
