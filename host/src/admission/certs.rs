//! A certificate authority and a serving certificate for the webhook's Service, for clusters without
//! cert-manager (`wasp certs`) and for tests.

use anyhow::Context;
use jiff::tz::TimeZone;
use jiff::{ToSpan, Zoned};
use rcgen::{date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

/// PEM texts, as a `kubernetes.io/tls` Secret holds them.
#[derive(Debug, Clone)]
pub struct ServingCertificate {
    /// The CA's certificate: the webhook configurations' `caBundle` is its base64.
    pub ca: String,
    pub certificate: String,
    pub private_key: String,
}

/// The DNS names the API server may check a Service webhook's certificate against.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![format!("{service}.{namespace}.svc"), format!("{service}.{namespace}.svc.cluster.local"), format!("{service}.{namespace}"), service.to_string()]
}

/// An IP address, or a DNS name of RFC 1123 labels.
fn check_name(name: &str) -> anyhow::Result<()> {
    let label = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.parse::<std::net::IpAddr>().is_ok() || (name.len() <= 253 && name.split('.').all(label)) {
        Ok(())
    } else {
        anyhow::bail!("{name:?}: a name is neither a DNS name nor an IP address")
    }
}

/// Valid from yesterday (clocks drift) until `days` from now.
fn validity(params: &mut CertificateParams, days: i64) -> anyhow::Result<()> {
    let now = Zoned::now().with_time_zone(TimeZone::UTC);
    let date = |zoned: Zoned| date_time_ymd(i32::from(zoned.year()), zoned.month() as u8, zoned.day() as u8);
    params.not_before = date(now.checked_sub(1.day())?);
    params.not_after = date(now.checked_add(days.days())?);
    Ok(())
}

/// A new CA valid ten times `days`, and a certificate for `names` (DNS names or IP addresses) valid `days`,
/// signed by it.
pub fn generate(names: &[String], days: u32) -> anyhow::Result<ServingCertificate> {
    names.iter().try_for_each(|name| check_name(name))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.distinguished_name.push(DnType::CommonName, "wasp webhook CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    validity(&mut ca_params, i64::from(days) * 10)?;
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?).context("signing the CA")?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params.distinguished_name.push(DnType::CommonName, names.first().map(String::as_str).unwrap_or("wasp"));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut params, i64::from(days))?;
    let key = KeyPair::generate()?;
    let certificate = params.signed_by(&key, &*ca).context("signing the serving certificate")?;
    Ok(ServingCertificate { ca: ca.pem(), certificate: certificate.pem(), private_key: key.serialize_pem() })
}
