//! Who this process is: its own Pod (for events about the host, such as a refused policy reload) and an
//! instance id, unique per process, that names it in the Lease and in events' `reportingInstance`.

use super::events::ObjectRef;

#[derive(Debug, Clone, PartialEq)]
pub struct HostIdentity {
    /// `<pod or host name>_<random>`: a restarted process is a new instance.
    pub instance: String,
    /// The host's Pod, when the downward API gives `POD_NAMESPACE` and `POD_NAME`.
    pub pod: Option<ObjectRef>,
}

impl HostIdentity {
    /// From the downward API variables (`POD_NAME`, `POD_NAMESPACE`, `POD_UID`), else the host name.
    pub fn from_env() -> HostIdentity {
        let variable = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let pod = match (variable("POD_NAMESPACE"), variable("POD_NAME")) {
            (Some(namespace), Some(name)) => Some(ObjectRef::pod(&namespace, &name, &variable("POD_UID").unwrap_or_default())),
            _ => None,
        };
        let host = variable("POD_NAME").or_else(|| variable("HOSTNAME")).unwrap_or_else(|| "wasp".into());
        HostIdentity::named(&host, pod)
    }

    pub fn named(name: &str, pod: Option<ObjectRef>) -> HostIdentity {
        HostIdentity { instance: format!("{name}_{:08x}", fastrand::u32(..)), pod }
    }
}
