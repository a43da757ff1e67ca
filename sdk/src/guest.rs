//! Glue between the generated component exports and a [`Policy`]: one state per instance holding the cluster
//! view and the configured policy. [`export_policy!`](crate::export_policy) expands to calls into this module.

use crate::cluster::Cluster;
use crate::policy::{Evict, Filter, Policy, Scale, Score};
use crate::types::{
    ClusterDelta, Descriptor, EvictContext, Eviction, FailedPod, FilterResult, NodeId, PendingPod, Pod, PodPlace, PolicyKind, ScaleDecision, ScaleRequest,
    ViewScope,
};

pub struct GuestState<P: Policy> {
    cluster: Cluster,
    policy: Option<P>,
    exports: Exports<P>,
    /// The pod the next filter or score call decides for.
    subject: Option<Pod>,
    /// Pending and failed pods sent for the next propose call.
    call: EvictContext,
}

/// What a policy type implements, found at compile time by [`export_policy!`](crate::export_policy): a policy
/// implements [`Filter`], [`Score`], [`Evict`] or [`Scale`] and is exported as such, with nothing to wire by hand
/// and no instance to build (so its settings may have no valid default).
pub struct Exports<P> {
    pub filter: fn(&P) -> Option<&dyn Filter>,
    pub score: fn(&P) -> Option<&dyn Score>,
    pub evict: fn(&P) -> Option<&dyn Evict>,
    pub scale: fn(&P) -> Option<&dyn Scale>,
    /// filter, score, evict, scale.
    pub implemented: [bool; 4],
}

impl<P> Exports<P> {
    pub fn kinds(&self) -> Vec<PolicyKind> {
        let kinds = [PolicyKind::Filter, PolicyKind::Score, PolicyKind::Evict, PolicyKind::Scale];
        kinds.into_iter().zip(self.implemented).filter_map(|(kind, implemented)| implemented.then_some(kind)).collect()
    }
}

/// Autoref specialization on the concrete policy type of [`export_policy!`](crate::export_policy): for
/// `(&&Probe::<P>::new())`, a method of the `Implements*` traits (impl for `&Probe<P>`, where `P` has the trait)
/// is found before the `Lacks*` fallback (impl for `Probe<P>`, one dereference away).
#[doc(hidden)]
pub mod detect {
    use super::{Evict, Filter, Scale, Score};
    use std::marker::PhantomData;

    pub struct Probe<P>(PhantomData<P>);

    impl<P> Probe<P> {
        #[allow(clippy::new_without_default)]
        pub const fn new() -> Self {
            Probe(PhantomData)
        }
    }

    macro_rules! detector {
        ($kind:ident, $implements:ident, $lacks:ident, $as:ident, $has:ident) => {
            pub trait $implements<P> {
                fn $as<'a>(&self, policy: &'a P) -> Option<&'a dyn $kind>;
                fn $has(&self) -> bool {
                    true
                }
            }
            impl<P: $kind> $implements<P> for &Probe<P> {
                fn $as<'a>(&self, policy: &'a P) -> Option<&'a dyn $kind> {
                    Some(policy)
                }
            }
            pub trait $lacks<P> {
                fn $as<'a>(&self, _policy: &'a P) -> Option<&'a dyn $kind> {
                    None
                }
                fn $has(&self) -> bool {
                    false
                }
            }
            impl<P> $lacks<P> for Probe<P> {}
        };
    }

    detector!(Filter, ImplementsFilter, LacksFilter, as_filter, is_filter);
    detector!(Score, ImplementsScore, LacksScore, as_score, is_score);
    detector!(Evict, ImplementsEvict, LacksEvict, as_evict, is_evict);
    detector!(Scale, ImplementsScale, LacksScale, as_scale, is_scale);
}

/// The [`Exports`] of a concrete policy type (what [`export_policy!`](crate::export_policy) uses; tests may too).
#[macro_export]
macro_rules! exports_of {
    ($policy:ty) => {{
        // Only anonymous imports and full paths: the user's type may have any name (`Probe`, say), and a name
        // brought in here would take its place in `$policy`.
        #[allow(unused_imports)]
        use $crate::guest::detect::{
            ImplementsEvict as _, ImplementsFilter as _, ImplementsScale as _, ImplementsScore as _, LacksEvict as _, LacksFilter as _, LacksScale as _,
            LacksScore as _,
        };
        fn filter(policy: &$policy) -> ::std::option::Option<&dyn $crate::Filter> {
            (&&$crate::guest::detect::Probe::<$policy>::new()).as_filter(policy)
        }
        fn score(policy: &$policy) -> ::std::option::Option<&dyn $crate::Score> {
            (&&$crate::guest::detect::Probe::<$policy>::new()).as_score(policy)
        }
        fn evict(policy: &$policy) -> ::std::option::Option<&dyn $crate::Evict> {
            (&&$crate::guest::detect::Probe::<$policy>::new()).as_evict(policy)
        }
        fn scale(policy: &$policy) -> ::std::option::Option<&dyn $crate::Scale> {
            (&&$crate::guest::detect::Probe::<$policy>::new()).as_scale(policy)
        }
        let probe = &&$crate::guest::detect::Probe::<$policy>::new();
        $crate::guest::Exports::<$policy> {
            filter,
            score,
            evict,
            scale,
            implemented: [probe.is_filter(), probe.is_score(), probe.is_evict(), probe.is_scale()],
        }
    }};
}

pub fn describe<P: Policy>(version: &str, exports: &Exports<P>) -> Descriptor {
    Descriptor {
        name: P::NAME.to_string(),
        version: version.to_string(),
        kinds: exports.kinds(),
        view: P::VIEW,
        pod_facts: P::POD_FACTS,
        node_facts: P::NODE_FACTS,
        default_settings: serde_json::to_string(&P::Settings::default()).unwrap_or_else(|_| "{}".to_string()),
        settings_doc: P::SETTINGS_DOC.to_string(),
    }
}

/// Parses settings JSON (empty means all defaults) and builds the policy, or says what is wrong.
pub fn build<P: Policy>(settings: &str) -> Result<P, String> {
    let parsed: P::Settings = crate::settings::parse(settings).map_err(|error| format!("invalid settings for {}: {error}", P::NAME))?;
    P::new(parsed).map_err(|error| format!("invalid settings for {}: {error}", P::NAME))
}

impl<P: Policy> GuestState<P> {
    pub fn new(exports: Exports<P>) -> Self {
        GuestState { cluster: Cluster::for_policy::<P>(), policy: None, exports, subject: None, call: EvictContext::default() }
    }

    pub fn describe(&self, version: &str) -> Descriptor {
        describe(version, &self.exports)
    }

    /// Answers the label keys the settings name (see [`Policy::label_keys`]).
    pub fn configure(&mut self, settings: &str) -> Result<Vec<String>, String> {
        let policy = build::<P>(settings)?;
        let keys = policy.label_keys();
        self.policy = Some(policy);
        Ok(keys)
    }

    /// [`GuestState::apply`] of the bytes the contract's `apply` takes: a `list<cluster-delta>` in postcard's
    /// encoding.
    pub fn apply_encoded(&mut self, deltas: &[u8]) -> Result<(), String> {
        let deltas: Vec<ClusterDelta> = postcard::from_bytes(deltas)
            .map_err(|error| format!("{}: the deltas sent are not a list<cluster-delta> of wasp:policy@{}: {error}", P::NAME, crate::CONTRACT_VERSION))?;
        self.apply(deltas);
        Ok(())
    }

    pub fn apply(&mut self, deltas: Vec<ClusterDelta>) {
        for delta in deltas {
            match delta {
                ClusterDelta::PodUpsert((_, PodPlace::Subject, pod)) => self.subject = Some(pod),
                ClusterDelta::PodUpsert((_, PodPlace::Pending(reason), pod)) => self.call.pending.push(PendingPod { pod, reason }),
                ClusterDelta::PodUpsert((id, PodPlace::Failed(node), pod)) => self.call.failed.push(FailedPod { id, node, pod }),
                delta if matches!(P::VIEW, ViewScope::Nodes) => self.cluster.apply_to_view::<false>(delta),
                delta => self.cluster.apply_to_view::<true>(delta),
            }
        }
    }

    fn subject(&self) -> Result<&Pod, String> {
        self.subject.as_ref().ok_or_else(|| "no subject pod was sent before the call".to_string())
    }

    fn policy(&self) -> Result<&P, String> {
        self.policy.as_ref().ok_or_else(|| format!("{} was called before configure", P::NAME))
    }

    fn missing(kind: &str) -> String {
        format!("{} does not implement {kind}", P::NAME)
    }

    pub fn filter(&self, candidates: &[NodeId]) -> Result<FilterResult, String> {
        let filter = (self.exports.filter)(self.policy()?).ok_or_else(|| Self::missing("filter"))?;
        Ok(filter.filter_all(self.subject()?, &self.cluster, candidates))
    }

    pub fn score(&self, candidates: &[NodeId]) -> Result<Vec<u32>, String> {
        let score = (self.exports.score)(self.policy()?).ok_or_else(|| Self::missing("score"))?;
        Ok(score.score_all(self.subject()?, &self.cluster, candidates))
    }

    /// The pending and failed pods sent for this call are used once, then forgotten.
    pub fn propose(&mut self, now: i64) -> Result<Vec<Eviction>, String> {
        let context = EvictContext { now, ..std::mem::take(&mut self.call) };
        let evict = (self.exports.evict)(self.policy()?).ok_or_else(|| Self::missing("evict"))?;
        Ok(evict.propose(&self.cluster, &context))
    }

    pub fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {
        (self.exports.scale)(self.policy()?).ok_or_else(|| Self::missing("scale"))?.recommend(request)
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
        // Full paths and `__Wasp` names only: the user's type may be called `Component`, `Descriptor`,
        // `Eviction` or anything else, and must still be what `$policy` names.
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __WaspComponent;

            ::std::thread_local! {
                static __WASP_STATE: ::std::cell::RefCell<$crate::guest::GuestState<$policy>> =
                    ::std::cell::RefCell::new($crate::guest::GuestState::new($crate::exports_of!($policy)));
            }

            impl $crate::bindings::exports::wasp::policy::policy::Guest for __WaspComponent {
                fn describe() -> $crate::types::Descriptor {
                    __WASP_STATE.with_borrow(|state| state.describe(env!("CARGO_PKG_VERSION")))
                }
                fn configure(settings: ::std::string::String) -> ::std::result::Result<::std::vec::Vec<::std::string::String>, ::std::string::String> {
                    __WASP_STATE.with_borrow_mut(|state| state.configure(&settings))
                }
                fn apply(deltas: ::std::vec::Vec<u8>) -> ::std::result::Result<(), ::std::string::String> {
                    __WASP_STATE.with_borrow_mut(|state| state.apply_encoded(&deltas))
                }
            }
            impl $crate::bindings::exports::wasp::policy::filter::Guest for __WaspComponent {
                fn filter(candidates: ::std::vec::Vec<$crate::types::NodeId>) -> ::std::result::Result<$crate::types::FilterResult, ::std::string::String> {
                    __WASP_STATE.with_borrow(|state| state.filter(&candidates))
                }
            }
            impl $crate::bindings::exports::wasp::policy::score::Guest for __WaspComponent {
                fn score(candidates: ::std::vec::Vec<$crate::types::NodeId>) -> ::std::result::Result<::std::vec::Vec<u32>, ::std::string::String> {
                    __WASP_STATE.with_borrow(|state| state.score(&candidates))
                }
            }
            impl $crate::bindings::exports::wasp::policy::evict::Guest for __WaspComponent {
                fn propose(
                    context: $crate::bindings::wasp::policy::types::EvictContext,
                ) -> ::std::result::Result<::std::vec::Vec<$crate::types::Eviction>, ::std::string::String> {
                    __WASP_STATE.with_borrow_mut(|state| state.propose(context.now))
                }
            }
            impl $crate::bindings::exports::wasp::policy::scale::Guest for __WaspComponent {
                fn recommend(request: $crate::types::ScaleRequest) -> ::std::result::Result<$crate::types::ScaleDecision, ::std::string::String> {
                    __WASP_STATE.with_borrow(|state| state.recommend(&request))
                }
            }

    $crate::bindings::__export_policy_component!(__WaspComponent with_types_in $crate::bindings);
        };
    };
}

#[cfg(test)]
mod tests {
    use crate::types::{Pod, PolicyKind};
    use crate::{Cluster, Filter, NoSettings, NodeInfo, Policy, Score, Verdict};

    /// A filter and score whose settings have no valid default.
    struct Picky;

    impl Policy for Picky {
        type Settings = NoSettings;
        const NAME: &'static str = "picky";

        fn new(_: NoSettings) -> Result<Self, String> {
            Err("zone: required".into())
        }
    }

    impl Filter for Picky {
        fn filter(&self, _pod: &Pod, _node: &NodeInfo, _cluster: &Cluster) -> Verdict {
            Verdict::Pass
        }
    }

    impl Score for Picky {
        fn score(&self, _pod: &Pod, _node: &NodeInfo, _cluster: &Cluster) -> i64 {
            1
        }
    }

    #[test]
    fn the_kinds_are_what_the_type_implements_without_building_it() {
        let exports = crate::exports_of!(Picky);
        assert_eq!(exports.kinds(), [PolicyKind::Filter, PolicyKind::Score]);
        assert!((exports.filter)(&Picky).is_some() && (exports.score)(&Picky).is_some());
        assert!((exports.evict)(&Picky).is_none() && (exports.scale)(&Picky).is_none());
        let descriptor = super::describe("1.0.0", &exports);
        assert_eq!((descriptor.name.as_str(), descriptor.kinds.len()), ("picky", 2));
    }

    /// Proposes every pending and failed pod it is told of.
    struct Echo;

    impl Policy for Echo {
        type Settings = NoSettings;
        const NAME: &'static str = "echo";

        fn new(_: NoSettings) -> Result<Self, String> {
            Ok(Echo)
        }
    }

    impl crate::Evict for Echo {
        fn propose(&self, _cluster: &Cluster, context: &crate::types::EvictContext) -> Vec<crate::types::Eviction> {
            let pending = context.pending.iter().map(|pending| crate::types::Eviction::new(0, format!("{} {}", pending.pod.name, pending.reason)));
            let failed = context.failed.iter().map(|failed| crate::types::Eviction::new(failed.id, format!("{} on {}", failed.pod.name, failed.node)));
            pending.chain(failed).collect()
        }
    }

    impl Filter for Echo {
        fn filter(&self, pod: &Pod, _node: &NodeInfo, _cluster: &Cluster) -> Verdict {
            if pod.name == "wanted" {
                Verdict::Pass
            } else {
                Verdict::reject("not wanted")
            }
        }
    }

    #[test]
    fn the_pods_of_a_call_arrive_as_deltas_and_are_used_once() {
        use crate::testing::{NodeBuilder, PodBuilder};
        use crate::types::{ClusterDelta, PodPlace};
        let mut state = super::GuestState::new(crate::exports_of!(Echo));
        state.configure("").unwrap();
        let node = ClusterDelta::NodeUpsert((0, NodeBuilder::new("n").build(), crate::cluster::empty_usage()));
        assert!(state.filter(&[0]).unwrap_err().contains("no subject pod"), "a filter before its pod is an error, not a guess");
        state.apply(vec![node, ClusterDelta::PodUpsert((0, PodPlace::Subject, PodBuilder::new("wanted").build()))]);
        assert_eq!(state.filter(&[0]).unwrap().verdicts, vec![0]);
        state.apply(vec![
            ClusterDelta::PodUpsert((0, PodPlace::Pending("0/1 nodes are available".into()), PodBuilder::new("waiting").build())),
            ClusterDelta::PodUpsert((7, PodPlace::Failed("n".into()), PodBuilder::new("broken").build())),
        ]);
        let reasons: Vec<String> = state.propose(0).unwrap().into_iter().map(|eviction| eviction.reason).collect();
        assert_eq!(reasons, ["waiting 0/1 nodes are available", "broken on n"]);
        assert!(state.propose(0).unwrap().is_empty(), "forgotten after the call");
        assert_eq!(state.filter(&[0]).unwrap().verdicts, vec![0], "the subject stays until the next one");
    }

    #[test]
    fn bytes_that_are_not_a_list_of_deltas_are_an_error_naming_the_policy_and_the_contract_and_change_nothing() {
        use crate::testing::{NodeBuilder, PodBuilder};
        use crate::types::{ClusterDelta, PodPlace};
        let mut state = super::GuestState::new(crate::exports_of!(Echo));
        state.configure("").unwrap();
        let node = ClusterDelta::NodeUpsert((0, NodeBuilder::new("n").build(), crate::cluster::empty_usage()));
        state.apply(vec![node, ClusterDelta::PodUpsert((0, PodPlace::Subject, PodBuilder::new("wanted").build()))]);
        // One delta, of a variant index no cluster-delta has (0-7 are node-upsert to reset).
        let error = state.apply_encoded(&[1, 8]).unwrap_err();
        assert!(error.contains("echo: the deltas sent are not a list<cluster-delta> of wasp:policy@0.10.0"), "{error}");
        // Two announced, `node-remove(0)` (variant 2) and nothing after it: nothing of it is applied.
        assert!(state.apply_encoded(&[2, 2, 0]).is_err());
        assert_eq!(state.filter(&[0]).unwrap().verdicts, vec![0], "node n and the subject are still there");
        state.apply_encoded(&[1, 2, 0]).unwrap();
        assert_eq!(state.cluster.node_count(), 0, "a well-formed list is applied");
    }
}
