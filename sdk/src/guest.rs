//! Glue between the generated component exports and a [`Policy`]: one state per instance holding the cluster
//! view and the configured policy. [`export_policy!`](crate::export_policy) expands to calls into this module.

use crate::cluster::Cluster;
use crate::policy::Policy;
use crate::types::{
    ClusterDelta, Descriptor, EvictContext, Eviction, FilterResult, NodeId, Pod, PolicyKind, ScaleDecision, ScaleRequest,
};

pub struct GuestState<P: Policy> {
    cluster: Cluster,
    policy: Option<P>,
}

impl<P: Policy> Default for GuestState<P> {
    fn default() -> Self {
        GuestState { cluster: Cluster::new(), policy: None }
    }
}

/// The kinds a policy implements, read off an instance built with the default settings.
pub fn kinds<P: Policy>() -> Vec<PolicyKind> {
    let Ok(policy) = P::new(P::Settings::default()) else {
        return Vec::new();
    };
    [
        (policy.as_filter().is_some(), PolicyKind::Filter),
        (policy.as_score().is_some(), PolicyKind::Score),
        (policy.as_evict().is_some(), PolicyKind::Evict),
        (policy.as_scale().is_some(), PolicyKind::Scale),
    ]
    .into_iter()
    .filter_map(|(implemented, kind)| implemented.then_some(kind))
    .collect()
}

pub fn describe<P: Policy>(version: &str) -> Descriptor {
    Descriptor {
        name: P::NAME.to_string(),
        version: version.to_string(),
        kinds: kinds::<P>(),
        view: P::VIEW,
        default_settings: serde_json::to_string(&P::Settings::default()).unwrap_or_else(|_| "{}".to_string()),
        settings_doc: P::SETTINGS_DOC.to_string(),
    }
}

/// Parses settings JSON (empty means all defaults) and builds the policy, or says what is wrong.
pub fn build<P: Policy>(settings: &str) -> Result<P, String> {
    let settings = if settings.trim().is_empty() { "{}" } else { settings };
    // The error names the field (`label: invalid type: integer `3`, expected a string`), not only a column.
    let parsed: P::Settings = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(settings)).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        match path.as_str() {
            // The whole document, or a syntax error before any field.
            "." | "?" => format!("invalid settings for {}: {inner}", P::NAME),
            _ => format!("invalid settings for {}: {path}: {inner}", P::NAME),
        }
    })?;
    P::new(parsed).map_err(|error| format!("invalid settings for {}: {error}", P::NAME))
}

impl<P: Policy> GuestState<P> {
    pub fn configure(&mut self, settings: &str) -> Result<(), String> {
        self.policy = Some(build::<P>(settings)?);
        Ok(())
    }

    pub fn apply(&mut self, deltas: Vec<ClusterDelta>) {
        for delta in deltas {
            self.cluster.apply(delta);
        }
    }

    fn policy(&self) -> Result<&P, String> {
        self.policy.as_ref().ok_or_else(|| format!("{} was called before configure", P::NAME))
    }

    fn missing(kind: &str) -> String {
        format!("{} does not implement {kind}", P::NAME)
    }

    pub fn filter(&self, pod: &Pod, candidates: &[NodeId]) -> Result<FilterResult, String> {
        let filter = self.policy()?.as_filter().ok_or_else(|| Self::missing("filter"))?;
        Ok(filter.filter_all(pod, &self.cluster, candidates))
    }

    pub fn score(&self, pod: &Pod, candidates: &[NodeId]) -> Result<Vec<u32>, String> {
        let score = self.policy()?.as_score().ok_or_else(|| Self::missing("score"))?;
        Ok(score.score_all(pod, &self.cluster, candidates))
    }

    pub fn propose(&self, context: &EvictContext) -> Result<Vec<Eviction>, String> {
        let evict = self.policy()?.as_evict().ok_or_else(|| Self::missing("evict"))?;
        Ok(evict.propose(&self.cluster, context))
    }

    pub fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {
        self.policy()?.as_scale().ok_or_else(|| Self::missing("scale"))?.recommend(request)
    }
}

/// Exports a [`Policy`] as the component's implementation of the contract.
///
/// ```text
/// wasp_sdk::export_policy!(ResourcesFit);
/// ```
/// Natively (for `cargo test`) this expands to nothing.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::bindings::exports::wasp::policy as exports;
            use $crate::types::{
                ClusterDelta, Descriptor, EvictContext, Eviction, FilterResult, NodeId, Pod, ScaleDecision, ScaleRequest,
            };
            use ::std::cell::RefCell;

            struct Component;

            ::std::thread_local! {
                static STATE: RefCell<$crate::guest::GuestState<$policy>> = RefCell::new(Default::default());
            }

            impl exports::policy::Guest for Component {
                fn describe() -> Descriptor {
                    $crate::guest::describe::<$policy>(env!("CARGO_PKG_VERSION"))
                }
                fn configure(settings: String) -> Result<(), String> {
                    STATE.with_borrow_mut(|state| state.configure(&settings))
                }
                fn apply(deltas: Vec<ClusterDelta>) {
                    STATE.with_borrow_mut(|state| state.apply(deltas))
                }
            }
            impl exports::filter::Guest for Component {
                fn filter(pod: Pod, candidates: Vec<NodeId>) -> Result<FilterResult, String> {
                    STATE.with_borrow(|state| state.filter(&pod, &candidates))
                }
            }
            impl exports::score::Guest for Component {
                fn score(pod: Pod, candidates: Vec<NodeId>) -> Result<Vec<u32>, String> {
                    STATE.with_borrow(|state| state.score(&pod, &candidates))
                }
            }
            impl exports::evict::Guest for Component {
                fn propose(context: EvictContext) -> Result<Vec<Eviction>, String> {
                    STATE.with_borrow(|state| state.propose(&context))
                }
            }
            impl exports::scale::Guest for Component {
                fn recommend(request: ScaleRequest) -> Result<ScaleDecision, String> {
                    STATE.with_borrow(|state| state.recommend(&request))
                }
            }

            $crate::bindings::__export_policy_component!(Component with_types_in $crate::bindings);
        };
    };
}
