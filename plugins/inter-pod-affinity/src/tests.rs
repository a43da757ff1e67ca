use super::*;
use wasp_sdk::guest::build;
use wasp_sdk::testing::{affinity_term, verdicts, NodeBuilder, PodBuilder};

/// Nodes a1, a2 in zone a, b1 in zone b, and `bare` with no labels but its hostname.
fn cluster() -> (Cluster, Vec<NodeId>) {
    let mut cluster = Cluster::for_policy::<InterPodAffinity>();
    let ids = [("a1", Some("a")), ("a2", Some("a")), ("b1", Some("b")), ("bare", None)]
        .iter()
        .map(|(name, zone)| {
            let node = NodeBuilder::new(name).label("kubernetes.io/hostname", name);
            let node = match zone {
                Some(zone) => node.label("zone", zone),
                None => node,
            };
            cluster.add_node(node.build())
        })
        .collect();
    (cluster, ids)
}

fn policy() -> InterPodAffinity {
    build::<InterPodAffinity>("").unwrap()
}

fn passing(pod: &Pod, cluster: &Cluster) -> Vec<String> {
    verdicts(&policy(), pod, cluster).into_iter().filter(|(_, verdict)| verdict.is_pass()).map(|(node, _)| node).collect()
}

#[test]
fn required_anti_affinity_puts_replicas_one_per_node() {
    let (mut cluster, ids) = cluster();
    let replica =
        |name: &str| PodBuilder::new(name).label("app", "web").require_anti_affinity(affinity_term("kubernetes.io/hostname", &[("app", "web")])).build();
    cluster.bind(replica("web-0"), ids[0]);
    assert_eq!(passing(&replica("web-1"), &cluster), ["a2", "b1", "bare"]);
    let result = policy().filter_all(&replica("web-1"), &cluster, &ids);
    assert_eq!(result.rejections, vec![vec![ANTI_AFFINITY_NOT_MATCH.to_string()]]);
}

#[test]
fn existing_pods_anti_affinity_repels_the_new_pod_symmetry() {
    let (mut cluster, ids) = cluster();
    let loner = PodBuilder::new("loner").require_anti_affinity(affinity_term("zone", &[("app", "noisy")])).build();
    cluster.bind(loner, ids[0]);
    let noisy = PodBuilder::new("noisy").label("app", "noisy").build();
    assert_eq!(passing(&noisy, &cluster), ["b1", "bare"], "zone a holds a pod that refuses noisy neighbours");
    let result = policy().filter_all(&noisy, &cluster, &ids[..2]);
    assert_eq!(result.rejections, vec![vec![EXISTING_ANTI_AFFINITY_NOT_MATCH.to_string()]]);
    let quiet = PodBuilder::new("quiet").label("app", "quiet").build();
    assert_eq!(passing(&quiet, &cluster).len(), 4);
}

#[test]
fn required_affinity_co_locates_and_the_first_pod_may_go_anywhere_with_the_key() {
    let (mut cluster, ids) = cluster();
    let cache = |name: &str| PodBuilder::new(name).label("app", "cache").require_affinity(affinity_term("zone", &[("app", "cache")])).build();
    assert_eq!(passing(&cache("cache-0"), &cluster), ["a1", "a2", "b1"], "first pod: anywhere the zone label exists");
    cluster.bind(cache("cache-0"), ids[2]);
    assert_eq!(passing(&cache("cache-1"), &cluster), ["b1"]);
    let web = PodBuilder::new("web").label("app", "web").require_affinity(affinity_term("zone", &[("app", "db")])).build();
    assert!(passing(&web, &cluster).is_empty(), "no db anywhere and the pod is not a db itself");
    let result = policy().filter_all(&web, &cluster, &ids);
    assert_eq!(result.rejections, vec![vec![AFFINITY_NOT_MATCH.to_string()]]);
}

#[test]
fn affinity_in_other_namespaces_by_name_and_by_selector() {
    let (mut cluster, ids) = cluster();
    cluster.set_namespace("data", &[("team", "storage")]);
    cluster.bind(PodBuilder::new("db").namespace("data").label("app", "db").build(), ids[2]);
    let mut term = affinity_term("zone", &[("app", "db")]);
    let wants = |term: PodAffinityTerm| PodBuilder::new("web").require_affinity(term).build();
    assert!(passing(&wants(term.clone()), &cluster).is_empty(), "its own namespace has no db");
    term.namespaces = vec!["data".into()];
    assert_eq!(passing(&wants(term.clone()), &cluster), ["b1"]);
    term.namespaces.clear();
    term.namespace_selector = Some(wasp_sdk::types::LabelSelector { match_labels: vec![("team".into(), "storage".into())], match_expressions: vec![] });
    assert_eq!(passing(&wants(term), &cluster), ["b1"]);
}

#[test]
fn score_prefers_affinity_avoids_anti_affinity_and_normalizes_min_max() {
    let (mut cluster, ids) = cluster();
    cluster.bind(PodBuilder::new("db").label("app", "db").build(), ids[0]);
    cluster.bind(PodBuilder::new("batch").label("app", "batch").build(), ids[2]);
    let web = PodBuilder::new("web")
        .prefer_affinity(10, affinity_term("zone", &[("app", "db")]))
        .prefer_anti_affinity(5, affinity_term("zone", &[("app", "batch")]))
        .build();
    // Raw: a1 +10, a2 +10 (same zone), b1 -5, bare 0 (no zone): min -5, max 10.
    assert_eq!(policy().score_all(&web, &cluster, &ids), vec![100, 100, 0, 33]);
}

#[test]
fn existing_pods_required_affinity_scores_with_hard_weight() {
    let (mut cluster, ids) = cluster();
    cluster.bind(PodBuilder::new("sidecar").require_affinity(affinity_term("zone", &[("app", "web")])).build(), ids[2]);
    let web = PodBuilder::new("web").label("app", "web").build();
    assert_eq!(policy().score_all(&web, &cluster, &ids), vec![0, 0, 100, 0]);
    let ignoring = build::<InterPodAffinity>(r#"{"hardPodAffinityWeight": 0}"#).unwrap();
    assert_eq!(ignoring.score_all(&web, &cluster, &ids), vec![0, 0, 0, 0]);
    let only_own = build::<InterPodAffinity>(r#"{"ignorePreferredTermsOfExistingPods": true}"#).unwrap();
    assert_eq!(only_own.score_all(&web, &cluster, &ids), vec![0, 0, 0, 0]);
}

#[test]
fn settings_are_checked() {
    let error = build::<InterPodAffinity>(r#"{"hardPodAffinityWeight": 101}"#).err().unwrap();
    assert!(error.contains("hardPodAffinityWeight: 101 is not in 0..=100"), "{error}");
}

#[test]
fn a_node_relabelled_between_two_decisions_counts_in_its_new_zone() {
    let (mut cluster, ids) = cluster();
    let web = PodBuilder::new("web").label("app", "web").build();
    cluster.bind(web, ids[0]);
    let near_web = PodBuilder::new("cache").require_affinity(affinity_term("zone", &[("app", "web")])).build();
    assert_eq!(passing(&near_web, &cluster), ["a1", "a2"], "the view's zones are built on this first decision");
    // b1 moves to zone a, and `bare` gets a zone of its own: the view kept from the first decision follows.
    let moved = NodeBuilder::new("b1").label("kubernetes.io/hostname", "b1").label("zone", "a").build();
    cluster.apply(wasp_sdk::types::ClusterDelta::NodeUpsert((ids[2], moved, wasp_sdk::cluster::empty_usage())));
    let zoned = NodeBuilder::new("bare").label("kubernetes.io/hostname", "bare").label("zone", "c").build();
    cluster.apply(wasp_sdk::types::ClusterDelta::NodeUpsert((ids[3], zoned, wasp_sdk::cluster::empty_usage())));
    assert_eq!(passing(&near_web, &cluster), ["a1", "a2", "b1"]);
}
