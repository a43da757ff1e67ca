//! Policy signatures in cosign's key-pair format, checked before a component is compiled or any of it runs.
//!
//! The formats are cosign's own, so a team's cosign keys and pipelines work unchanged (`cosign generate-key-pair`,
//! `cosign sign-blob --key`, `cosign verify-blob --key`, tested against cosign itself in `tests/signatures.rs`):
//! - a public key is a PEM `PUBLIC KEY` block (SubjectPublicKeyInfo): ECDSA P-256 (what cosign generates) or
//!   P-384, Ed25519 or RSA;
//! - a signature is ECDSA (or RSA PKCS#1 v1.5) over the SHA-256 of the bytes, or Ed25519 over the bytes, ASN.1 DER,
//!   base64 in a `.sig` file;
//! - a private key is PKCS#8 encrypted with NaCl's secretbox under a key that scrypt derives from the password, as
//!   JSON in a PEM block `ENCRYPTED SIGSTORE PRIVATE KEY` (`ENCRYPTED COSIGN PRIVATE KEY` from older cosign); the
//!   password comes from `COSIGN_PASSWORD`, as for cosign.
//!
//! What is signed is the uncompressed component, the `.wasm` whose sha256 the host reports: one signature holds
//! whether the component travels loose, as `NAME.wasm.zst` or in a bundle (compression is transport, and the
//! decompression before the check is bounded and runs no guest code).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use crypto_secretbox::aead::{Aead, KeyInit};
use ring::signature::{self as algorithms, KeyPair, VerificationAlgorithm};
use serde::{Deserialize, Serialize};
use spki::der::asn1::BitStringRef;
use spki::der::{Decode, Encode};
use spki::{AlgorithmIdentifierRef, ObjectIdentifier, SubjectPublicKeyInfoRef};
use std::path::{Path, PathBuf};

/// The file name ending of a component's signature: `NAME.wasm.sig` beside `NAME.wasm` (or `NAME.wasm.zst`), and in
/// a bundle.
pub const SIGNATURE_SUFFIX: &str = ".wasm.sig";
/// A signature is under 1 KiB even for RSA-8192 in base64; this bounds what a `.sig` file can make the host read.
pub const MAX_SIGNATURE_BYTES: u64 = 16 << 10;
/// A key file is a few hundred bytes; an RSA-8192 key in PEM is under 2 KiB.
pub const MAX_KEY_BYTES: u64 = 64 << 10;
/// What cosign's password environment variable is called; wasp reads the same one.
pub const PASSWORD_VARIABLE: &str = "COSIGN_PASSWORD";

const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
const RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// The PEM labels cosign writes its private keys under (the second by releases before v2).
const PRIVATE_KEY_LABELS: [&str; 2] = ["ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY"];
/// The scrypt cost of the keys cosign v2.6 writes: N = 2^16, r = 8, p = 1.
const SCRYPT_LOG_N: u8 = 16;
/// A key file may ask for more work than cosign's default, up to scrypt's 128 x r x N bytes of 1 GiB (N = 2^20 at
/// r = 8) and p = 4: beyond, a crafted key file would only exhaust the machine.
const MAX_SCRYPT_LOG_N: u8 = 20;
const MAX_SCRYPT_BYTES: u64 = 1 << 30;
const MAX_SCRYPT_P: u32 = 4;

/// A public key that may sign policies, named by the file it came from.
pub struct PublicKey {
    pub name: String,
    algorithm: &'static dyn VerificationAlgorithm,
    /// The key as the algorithm takes it: the SubjectPublicKeyInfo's bit string.
    key: Vec<u8>,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PublicKey").field("name", &self.name).finish_non_exhaustive()
    }
}

impl PublicKey {
    /// The key in a PEM `PUBLIC KEY` block, or why it is not one wasp can check signatures with.
    pub fn from_pem(name: &str, text: &[u8]) -> Result<PublicKey, String> {
        let block = pem::parse(text).map_err(|error| format!("{name}: not a PEM public key: {error}"))?;
        if block.tag() != "PUBLIC KEY" {
            return Err(format!("{name}: a PEM block {:?}, where a public key (\"PUBLIC KEY\", as cosign writes cosign.pub) was expected", block.tag()));
        }
        let info = SubjectPublicKeyInfoRef::from_der(block.contents()).map_err(|error| format!("{name}: not a SubjectPublicKeyInfo: {error}"))?;
        let algorithm: &'static dyn VerificationAlgorithm = match info.algorithm.oid {
            EC_PUBLIC_KEY => match info.algorithm.parameters_oid() {
                Ok(P256) => &algorithms::ECDSA_P256_SHA256_ASN1,
                Ok(P384) => &algorithms::ECDSA_P384_SHA256_ASN1,
                other => return Err(format!("{name}: an elliptic curve other than P-256 and P-384 ({other:?})")),
            },
            ED25519 => &algorithms::ED25519,
            RSA => &algorithms::RSA_PKCS1_2048_8192_SHA256,
            other => return Err(format!("{name}: a key of algorithm {other}; ECDSA P-256 or P-384, Ed25519 and RSA are supported")),
        };
        let key = info.subject_public_key.as_bytes().ok_or_else(|| format!("{name}: the key's bit string is not whole bytes"))?.to_vec();
        Ok(PublicKey { name: name.to_string(), algorithm, key })
    }

    /// The public key in the file at `path`, named by the path.
    pub fn read(path: &Path) -> Result<PublicKey, String> {
        let name = path.display().to_string();
        let text = super::source::read_regular(path, MAX_KEY_BYTES).map_err(|error| format!("verification key {name}: {error}"))?;
        Self::from_pem(&name, &text).map_err(|error| format!("verification key {error}"))
    }

    fn signed(&self, message: &[u8], signature: &[u8]) -> bool {
        algorithms::UnparsedPublicKey::new(self.algorithm, &self.key).verify(message, signature).is_ok()
    }
}

/// The signature in a `.sig` file: base64 as cosign writes it (surrounding whitespace ignored).
pub fn decode_signature(text: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "a signature file holds base64 text, and this one is not text".to_string())?;
    BASE64.decode(text.trim()).map_err(|error| format!("a signature file holds base64 text, as cosign sign-blob writes it: {error}"))
}

/// Which of `keys` signed `component`, or why none did. `signature` is the `.sig` file's contents, if there is one.
/// The keys' names, for messages.
pub fn key_names(keys: &[&PublicKey]) -> String {
    keys.iter().map(|key| key.name.as_str()).collect::<Vec<_>>().join(", ")
}

pub fn verify<'a>(keys: &[&'a PublicKey], component: &[u8], signature: Option<&[u8]>) -> Result<&'a PublicKey, String> {
    let names = || key_names(keys);
    let signature = signature.ok_or_else(|| format!("it is not signed (no {SIGNATURE_SUFFIX} file), and a signature by one of {} is required", names()))?;
    let signature = decode_signature(signature)?;
    keys.iter()
        .copied()
        .find(|key| key.signed(component, &signature))
        .ok_or_else(|| format!("its signature is not by any of the keys {} (or the component was changed after signing)", names()))
}

/// cosign's encrypted private key: the JSON inside the PEM block (go-securesystemslib's `encrypted` format).
#[derive(Serialize, Deserialize)]
struct EncryptedKey {
    kdf: Kdf,
    cipher: Cipher,
    #[serde(with = "base64_bytes")]
    ciphertext: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Kdf {
    name: String,
    params: ScryptParams,
    #[serde(with = "base64_bytes")]
    salt: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct ScryptParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Serialize, Deserialize)]
struct Cipher {
    name: String,
    #[serde(with = "base64_bytes")]
    nonce: Vec<u8>,
}

/// Go's encoding/json writes `[]byte` as standard base64 (cosign's key files; the OCI store's artifacts too).
pub(crate) mod base64_bytes {
    use base64::Engine;
    pub fn serialize<S: serde::Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::BASE64.encode(bytes))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text: String = serde::Deserialize::deserialize(deserializer)?;
        super::BASE64.decode(text).map_err(serde::de::Error::custom)
    }
}

/// The secretbox key scrypt derives from `password` with `kdf`'s parameters.
fn derive(password: &[u8], kdf: &Kdf) -> Result<crypto_secretbox::Key, String> {
    if kdf.name != "scrypt" {
        return Err(format!("its key derivation is {:?}; cosign's keys use scrypt", kdf.name));
    }
    let ScryptParams { n, r, p } = kdf.params;
    let log_n = n.checked_ilog2().filter(|log_n| n.is_power_of_two() && *log_n <= u32::from(MAX_SCRYPT_LOG_N));
    let log_n = log_n.ok_or_else(|| format!("scrypt's N = {n} is not a power of two up to 2^{MAX_SCRYPT_LOG_N}"))? as u8;
    if r == 0 || p == 0 || p > MAX_SCRYPT_P || 128 * u64::from(r) * n > MAX_SCRYPT_BYTES {
        return Err(format!(
            "scrypt's N = {n}, r = {r} and p = {p} ask more than a key file may (128 x r x N up to {MAX_SCRYPT_BYTES} bytes, p 1..={MAX_SCRYPT_P})"
        ));
    }
    let params = scrypt::Params::new(log_n, r, p, 32).map_err(|error| format!("scrypt parameters: {error}"))?;
    let mut key = crypto_secretbox::Key::default();
    scrypt::scrypt(password, &kdf.salt, &params, &mut key).map_err(|error| format!("scrypt: {error}"))?;
    Ok(key)
}

/// A private key that signs policies: ECDSA P-256, as `cosign generate-key-pair` makes them.
pub struct SigningKey {
    pair: algorithms::EcdsaKeyPair,
}

impl SigningKey {
    /// The key in cosign's encrypted private key file, decrypted with `password`.
    pub fn decrypt(name: &str, text: &[u8], password: &[u8]) -> Result<SigningKey, String> {
        let block = pem::parse(text).map_err(|error| format!("{name}: not a PEM private key: {error}"))?;
        if !PRIVATE_KEY_LABELS.contains(&block.tag()) {
            return Err(format!("{name}: a PEM block {:?}, where cosign's private key ({:?}) was expected", block.tag(), PRIVATE_KEY_LABELS[0]));
        }
        let encrypted: EncryptedKey = serde_json::from_slice(block.contents()).map_err(|error| format!("{name}: not cosign's encrypted key: {error}"))?;
        if encrypted.cipher.name != "nacl/secretbox" || encrypted.cipher.nonce.len() != 24 {
            return Err(format!(
                "{name}: its cipher is {:?} with a {}-byte nonce; cosign's keys use nacl/secretbox with 24",
                encrypted.cipher.name,
                encrypted.cipher.nonce.len()
            ));
        }
        let key = derive(password, &encrypted.kdf).map_err(|error| format!("{name}: {error}"))?;
        let nonce = crypto_secretbox::Nonce::from_slice(&encrypted.cipher.nonce);
        let pkcs8 = crypto_secretbox::XSalsa20Poly1305::new(&key)
            .decrypt(nonce, encrypted.ciphertext.as_slice())
            .map_err(|_| format!("{name}: cannot be decrypted: the password ({PASSWORD_VARIABLE}) is wrong or the file was changed"))?;
        let pair = algorithms::EcdsaKeyPair::from_pkcs8(&algorithms::ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &ring::rand::SystemRandom::new())
            .map_err(|error| format!("{name}: not an ECDSA P-256 private key, the kind wasp signs with ({error})"))?;
        Ok(SigningKey { pair })
    }

    /// The key in cosign's private key file at `path`, decrypted with `password`.
    pub fn read(path: &Path, password: &[u8]) -> Result<SigningKey, String> {
        let name = path.display().to_string();
        let text = super::source::read_regular(path, MAX_KEY_BYTES).map_err(|error| format!("{name}: {error}"))?;
        Self::decrypt(&name, &text, password)
    }

    /// A new key, random.
    pub fn generate() -> Result<(SigningKey, Vec<u8>), String> {
        let random = ring::rand::SystemRandom::new();
        let pkcs8 = algorithms::EcdsaKeyPair::generate_pkcs8(&algorithms::ECDSA_P256_SHA256_ASN1_SIGNING, &random)
            .map_err(|error| format!("generating a key: {error}"))?;
        let pair =
            algorithms::EcdsaKeyPair::from_pkcs8(&algorithms::ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &random).map_err(|error| error.to_string())?;
        Ok((SigningKey { pair }, pkcs8.as_ref().to_vec()))
    }

    /// The signature file's contents for `component`: base64 of the ASN.1 DER signature, as `cosign sign-blob`.
    pub fn sign(&self, component: &[u8]) -> Result<String, String> {
        let signature = self.pair.sign(&ring::rand::SystemRandom::new(), component).map_err(|error| format!("signing: {error}"))?;
        Ok(BASE64.encode(signature.as_ref()))
    }

    /// The public key as cosign writes `cosign.pub`.
    pub fn public_key_pem(&self) -> String {
        let curve = P256.to_der().expect("an object identifier encodes");
        let info = SubjectPublicKeyInfoRef {
            algorithm: AlgorithmIdentifierRef { oid: EC_PUBLIC_KEY, parameters: Some(spki::der::AnyRef::from_der(&curve).expect("just encoded")) },
            subject_public_key: BitStringRef::from_bytes(self.pair.public_key().as_ref()).expect("a point is whole bytes"),
        };
        pem::encode(&pem::Pem::new("PUBLIC KEY", info.to_der().expect("a key encodes")))
    }
}

/// A new key pair in cosign's files: the private key encrypted with `password` (cosign's scrypt cost), and the
/// public key.
pub fn generate_key_pair(password: &[u8]) -> Result<(String, String), String> {
    use ring::rand::SecureRandom;
    let (key, pkcs8) = SigningKey::generate()?;
    let random = ring::rand::SystemRandom::new();
    let (mut salt, mut nonce) = (vec![0u8; 32], vec![0u8; 24]);
    random.fill(&mut salt).and_then(|()| random.fill(&mut nonce)).map_err(|_| "no randomness from the system".to_string())?;
    let kdf = Kdf { name: "scrypt".into(), params: ScryptParams { n: 1 << SCRYPT_LOG_N, r: 8, p: 1 }, salt };
    let secret = derive(password, &kdf)?;
    let ciphertext = crypto_secretbox::XSalsa20Poly1305::new(&secret)
        .encrypt(crypto_secretbox::Nonce::from_slice(&nonce), pkcs8.as_slice())
        .map_err(|_| "encrypting the key".to_string())?;
    let encrypted = EncryptedKey { kdf, cipher: Cipher { name: "nacl/secretbox".into(), nonce }, ciphertext };
    let private = pem::encode(&pem::Pem::new(PRIVATE_KEY_LABELS[0], serde_json::to_vec(&encrypted).map_err(|error| error.to_string())?));
    Ok((private, key.public_key_pem()))
}

/// Where a component's signature is looked for by default: `NAME.wasm.sig` beside `NAME.wasm` or `NAME.wasm.zst`.
pub fn signature_path(component: &Path) -> PathBuf {
    let text = component.to_string_lossy();
    let stem = text.strip_suffix(".zst").unwrap_or(&text);
    let stem = stem.strip_suffix(".wasm").unwrap_or(stem);
    PathBuf::from(format!("{stem}{SIGNATURE_SUFFIX}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key pair with an empty password: scrypt at cosign's cost takes a moment, so the tests share one.
    fn key_pair() -> &'static (String, String) {
        static PAIR: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
        PAIR.get_or_init(|| generate_key_pair(b"secret").unwrap())
    }

    #[test]
    fn a_signature_checks_with_its_key_and_not_after_a_change_or_with_another_key() {
        let (private, public) = key_pair();
        let signer = SigningKey::decrypt("cosign.key", private.as_bytes(), b"secret").unwrap();
        let key = PublicKey::from_pem("cosign.pub", public.as_bytes()).unwrap();
        let signature = signer.sign(b"\0asm component").unwrap();
        let keys = [&key];
        assert_eq!(verify(&keys, b"\0asm component", Some(signature.as_bytes())).unwrap().name, "cosign.pub");
        let tampered = verify(&keys, b"\0asm componenT", Some(signature.as_bytes())).unwrap_err();
        assert!(tampered.contains("not by any of the keys cosign.pub"), "{tampered}");
        let unsigned = verify(&keys, b"\0asm component", None).unwrap_err();
        assert!(unsigned.contains("not signed (no .wasm.sig file)"), "{unsigned}");
        let (_, other_public) = generate_key_pair(b"").unwrap();
        let other = PublicKey::from_pem("other.pub", other_public.as_bytes()).unwrap();
        let other = [&other];
        assert!(verify(&other, b"\0asm component", Some(signature.as_bytes())).is_err());
        assert!(verify(&keys, b"\0asm component", Some(b"not base64!")).unwrap_err().contains("base64"));
    }

    #[test]
    fn a_private_key_needs_its_password_and_names_the_variable() {
        let (private, _) = key_pair();
        let error = SigningKey::decrypt("cosign.key", private.as_bytes(), b"wrong").err().unwrap();
        assert_eq!(error, "cosign.key: cannot be decrypted: the password (COSIGN_PASSWORD) is wrong or the file was changed");
        let error = SigningKey::decrypt("cosign.pub", key_pair().1.as_bytes(), b"").err().unwrap();
        assert!(error.contains("a PEM block \"PUBLIC KEY\""), "{error}");
    }

    #[test]
    fn key_files_that_are_not_keys_are_named_with_the_reason() {
        let error = PublicKey::from_pem("k.pub", b"hello").unwrap_err();
        assert!(error.starts_with("k.pub: not a PEM public key"), "{error}");
        let (private, _) = key_pair();
        let error = PublicKey::from_pem("cosign.key", private.as_bytes()).unwrap_err();
        assert!(error.contains("ENCRYPTED SIGSTORE PRIVATE KEY"), "{error}");
    }

    #[test]
    fn a_hostile_scrypt_cost_is_refused_before_any_work() {
        let kdf = Kdf { name: "scrypt".into(), params: ScryptParams { n: 1 << 30, r: 8, p: 1 }, salt: vec![0; 32] };
        assert!(derive(b"", &kdf).unwrap_err().contains("up to 2^20"));
        let kdf = Kdf { name: "scrypt".into(), params: ScryptParams { n: 1000, r: 8, p: 1 }, salt: vec![0; 32] };
        assert!(derive(b"", &kdf).unwrap_err().contains("not a power of two"));
    }

    #[test]
    fn the_signature_sits_beside_the_uncompressed_name() {
        assert_eq!(signature_path(Path::new("out/a.wasm")), Path::new("out/a.wasm.sig"));
        assert_eq!(signature_path(Path::new("out/a.wasm.zst")), Path::new("out/a.wasm.sig"));
    }
}
