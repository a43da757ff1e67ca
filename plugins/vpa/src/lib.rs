//! `vpa`: the Vertical Pod Autoscaler's recommender. Per container of the target's pods, the requests the VPA
//! recommender v1.8.1 would recommend from the same readings ([`wasp_sdk::vertical`]: decaying histograms of CPU
//! usage and of memory peaks, the 90th percentile plus 15%, bounds at the 50th and 95th widened while the history
//! is short, an out-of-memory kill bumping memory). The histograms are the policy's `state`, which the host keeps
//! in the Autoscaler's status, as the VPA keeps them in its checkpoints. The replica count is left as it is; the
//! host caps the requests to the Autoscaler's `resourcePolicy` and applies them as its `updatePolicy` says.

use wasp_sdk::types::{ContainerRecommendation, ScaleDecision, ScaleRequest};
use wasp_sdk::vertical::{Estimation, Recommender};
use wasp_sdk::{NodeFacts, Policy, Scale};

#[derive(Debug)]
pub struct Vpa {
    settings: Estimation,
}

impl Policy for Vpa {
    type Settings = Estimation;
    const NAME: &'static str = "vpa";
    const NODE_FACTS: NodeFacts = NodeFacts::NONE;
    const SETTINGS_DOC: &'static str = "targetCpuPercentile, targetMemoryPercentile: the target's percentile, in (0, 1] (default 0.9)\n\
        lowerBoundCpuPercentile, lowerBoundMemoryPercentile: the lower bound's (default 0.5)\n\
        upperBoundCpuPercentile, upperBoundMemoryPercentile: the upper bound's (default 0.95)\n\
        safetyMarginFraction: added to each percentile (default 0.15)\n\
        podMinCpuMillicores, podMinMemoryMb: the least a pod gets, shared by its containers (default 25 and 250)\n\
        oomBumpUpRatio, oomMinBumpUpBytes: memory after an out-of-memory kill, at least ratio times and this much above what it had (default 1.2 and 104857600)";

    fn new(settings: Estimation) -> Result<Self, String> {
        settings.check()?;
        Ok(Vpa { settings })
    }
}

/// `250m`, `1.5`: cores as a CPU quantity, to the millicore.
fn cores(value: Option<f64>) -> String {
    let Some(cores) = value else { return "-".into() };
    let millicores = (cores * 1000.0).round() as u64;
    if millicores.is_multiple_of(1000) {
        format!("{}", millicores / 1000)
    } else {
        format!("{millicores}m")
    }
}

/// `300Mi`: bytes in mebibytes, rounded up.
fn mebibytes(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |bytes| format!("{}Mi", (bytes / (1024.0 * 1024.0)).ceil() as u64))
}

fn describe(recommendation: &ContainerRecommendation) -> String {
    let (target, lower, upper) = (&recommendation.target, &recommendation.lower_bound, &recommendation.upper_bound);
    format!(
        "{}: cpu {} ({}-{}), memory {} ({}-{})",
        recommendation.container,
        cores(target.cpu),
        cores(lower.cpu),
        cores(upper.cpu),
        mebibytes(target.memory),
        mebibytes(lower.memory),
        mebibytes(upper.memory)
    )
}

impl Scale for Vpa {
    fn recommend(&self, request: &ScaleRequest) -> Result<ScaleDecision, String> {
        if request.containers.is_empty() {
            return Err(format!("{}: no containers to size (the Autoscaler needs an updatePolicy, and its target running pods)", request.workload));
        }
        let mut recommender = Recommender::restored(request.state.as_deref());
        recommender.observe(request, &self.settings);
        let names: Vec<&str> = request.containers.iter().map(|container| container.name.as_str()).collect();
        let resources = recommender.recommend(&names, &self.settings);
        let reason = if resources.is_empty() {
            "no usage read yet: no recommendation".to_string()
        } else {
            resources.iter().map(describe).collect::<Vec<_>>().join("; ")
        };
        Ok(ScaleDecision { desired_replicas: request.current_replicas, reason, proposals: Vec::new(), resources, state: Some(recommender.state()) })
    }
}

wasp_sdk::export_policy!(Vpa);

#[cfg(test)]
mod tests {
    use super::*;
    use wasp_sdk::guest::build;
    use wasp_sdk::testing::scale_request;
    use wasp_sdk::types::{ContainerSample, ContainerUsage, ResourceAmounts};

    fn usage(at: i64, cpu: f64, memory: f64) -> ContainerUsage {
        let none = ResourceAmounts { cpu: None, memory: None };
        let samples = vec![ContainerSample { pod: "web-1".into(), at, cpu, memory }];
        ContainerUsage { name: "app".into(), requests: none, limits: none, samples, oom_kills: Vec::new() }
    }

    #[test]
    fn the_state_carries_the_history_from_call_to_call_and_replicas_stay() {
        let vpa = build::<Vpa>("").unwrap();
        let mut request = scale_request(3, 1, 10, Vec::new());
        let mut state = None;
        for minute in 0..60 {
            request.now = 1_800_000_000 + minute * 60;
            request.containers = vec![usage(request.now, if minute < 30 { 0.2 } else { 0.8 }, 3e8)];
            request.state = state.take();
            let decision = vpa.recommend(&request).unwrap();
            assert_eq!(decision.desired_replicas, 3);
            state = decision.state;
        }
        request.containers = vec![usage(request.now + 60, 0.8, 3e8)];
        request.state = state;
        let decision = vpa.recommend(&request).unwrap();
        let target = decision.resources[0].target.cpu.unwrap();
        assert!(target > 0.8 && target < 1.0, "the 90th percentile of an hour half at 0.8 core, plus 15%: {target}");
        assert!(decision.reason.starts_with("app: cpu "), "{}", decision.reason);
        // Without the state, only the one new reading counts.
        request.state = None;
        let fresh = vpa.recommend(&request).unwrap();
        assert_eq!(fresh.resources[0].target.cpu, decision.resources[0].target.cpu, "one reading at 0.8 core gives the same bucket");
        assert!(fresh.resources[0].upper_bound.cpu > decision.resources[0].upper_bound.cpu, "but a wider upper bound: less confidence");
    }

    #[test]
    fn no_containers_is_an_error_and_bad_settings_are_refused() {
        let vpa = build::<Vpa>("").unwrap();
        let error = vpa.recommend(&scale_request(1, 1, 1, Vec::new())).unwrap_err();
        assert!(error.contains("updatePolicy"), "{error}");
        assert!(build::<Vpa>(r#"{"targetCpuPercentile": 1.5}"#).unwrap_err().contains("targetCpuPercentile"));
        assert!(build::<Vpa>(r#"{"oomBumpUpRatio": 0.5}"#).unwrap_err().contains("oomBumpUpRatio"));
        assert!(build::<Vpa>(r#"{"histogram": 1}"#).is_err(), "unknown settings");
        assert_eq!(cores(Some(0.25)), "250m");
        assert_eq!(cores(Some(2.0)), "2");
        assert_eq!(mebibytes(Some(3e8)), "287Mi");
    }
}
