use serde::{Deserialize, Serialize};
use wasp_sdk::types::Pod;
use wasp_sdk::{Cluster, NodeInfo, Normalization, Policy, Score};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)] // defaults for missing fields, errors for typos
pub struct Settings {
    pub zone: String,
}

pub struct PreferZone {
    zone: String,
}

impl Policy for PreferZone {
    type Settings = Settings;
    const NAME: &'static str = "prefer-zone";
    const SETTINGS_DOC: &'static str = "zone: the topology.kubernetes.io/zone value to prefer";

    fn new(settings: Settings) -> Result<Self, String> {
        Ok(PreferZone { zone: settings.zone }) // return Err("zone: ...") to reject settings
    }
}

impl Score for PreferZone {
    fn score(&self, _pod: &Pod, node: &NodeInfo, _cluster: &Cluster) -> i64 {
        if node.node.label("topology.kubernetes.io/zone") == Some(self.zone.as_str()) {
            1
        } else {
            0
        }
    }

    fn normalization(&self) -> Normalization {
        Normalization::MaxTo100 // best node 100, like kube-scheduler's NormalizeScore
    }
}

wasp_sdk::export_policy!(PreferZone);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn prefers_the_configured_zone() {
        let mut cluster = Cluster::new();
        let a = cluster.add_node(NodeBuilder::new("a").label("topology.kubernetes.io/zone", "east").build());
        let b = cluster.add_node(NodeBuilder::new("b").label("topology.kubernetes.io/zone", "west").build());
        let policy = wasp_sdk::testing::build::<PreferZone>(r#"{"zone": "west"}"#).unwrap();
        assert_eq!(policy.score_all(&PodBuilder::new("p").build(), &cluster, &[a, b]), vec![0, 100]);
    }
}
