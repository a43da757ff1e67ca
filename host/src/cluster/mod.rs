//! The host's view of the cluster, shared by every loop: Kubernetes objects converted to contract records
//! ([`convert`]); nodes and bound pods with usage totals and the delta log that keeps every policy instance's
//! own view current ([`ClusterState`], with what-if forks); the informers that keep it current ([`informer`]);
//! the shared handle loops read and subscribe to ([`SharedCluster`]) with what the loops note about waiting pods
//! ([`waiting`]: reasons, conditions, nominations) and what each namespace's waiting pods may hold
//! ([`waiting_budget`]); the placement hints the rescheduler leaves
//! for the scheduler ([`hints`]); what each policy's view receives of it ([`View`], [`SelectedKeys`]); and the
//! claims, volumes and storage classes a pod's volumes resolve against ([`volumes`]); the pod groups gangs are
//! placed by ([`groups`]); every pod as the autoscaler reads it ([`scaled_pods`]).

pub mod convert;
pub mod groups;
pub mod hints;
pub mod informer;
mod scaled_pods;
mod selected;
mod shared;
mod state;
mod view;
pub mod volumes;
mod waiting;
pub mod waiting_budget;

pub use hints::{PlacementHints, Workload};
pub use scaled_pods::ScaledPod;
pub use selected::{named_keys, SelectedKeys};
pub use shared::{ClusterEvent, ScheduledCondition, SharedCluster, Synced, UnreadablePod};
pub use state::{pod_requests, to_vector, ClusterState, DeltaSink, EvictionConsent, PodChange, PodMeta, Rewind, SyncPoint, EVICT_ANNOTATION};
pub use view::View;
pub use waiting::Nomination;
