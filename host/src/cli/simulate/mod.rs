//! `wasp simulate`: a scenario on the simulated API server, with the host's loops (scheduler, rescheduler,
//! autoscaler) running against it over HTTP exactly as against a real cluster, on a simulated clock: tokio's,
//! paused, which jumps ahead whenever every task waits, so a timeline of minutes runs in seconds (the host's wall
//! clock and the simulator's follow it: see `crate::clock`). The report says how the pods were placed, then what
//! each scenario event did (timeline.rs), and the cluster before and after (report.rs); `--report` writes it as an
//! HTML page too (html.rs). Progress goes to stderr, logs too and only at error level unless `RUST_LOG` asks.

mod html;
mod report;
mod timeline;

use crate::autoscaler::resource::Autoscaler;
use crate::config::HostConfig;
use crate::host::Host;
use crate::kube::{ApiClient, HostIdentity};
use crate::registry::PolicyRegistry;
use crate::runtime::Runtime;
use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use timeline::{clock_time, Timeline};
use tokio::time::Instant;
use wasp_sim::{Scenario, Simulator};

#[derive(Args)]
pub struct SimulateArgs {
    /// The scenario (see sim/scenarios/); by default sim/scenarios/small.yaml, built into the binary.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Host configuration; the built-in default uses the policies in plugins/out.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Give up waiting for the first placement after this long (simulated time).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// List every node's pods, however many nodes (by default clusters of more than 20 nodes get a summary).
    #[arg(long)]
    full: bool,
    /// Autoscalers to create (YAML, one or more documents); the configuration needs an autoscaler section.
    #[arg(long)]
    autoscalers: Option<PathBuf>,
    /// How much simulated time the timeline runs: by default until the scenario's last event (and, with
    /// Autoscalers, its longest load curve), plus 30 s, or five rescheduling intervals with a rescheduler.
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Also write the report as one self-contained HTML page, with charts.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
    /// Try a policy component without writing a configuration (repeatable): it joins the configuration where its
    /// kinds fit (filter and score in every profile, evict as a rescheduler strategy, scale in the autoscaler's
    /// list) and is used instead of any policy of the same name.
    #[arg(long = "policy", value_name = "FILE.wasm[.zst]")]
    policies: Vec<PathBuf>,
}

impl SimulateArgs {
    /// `wasp policy test`: one component tried on `scenario`, everything else as `wasp simulate` defaults it.
    pub fn trying(policy: PathBuf, scenario: PathBuf, config: Option<PathBuf>) -> SimulateArgs {
        SimulateArgs {
            scenario: Some(scenario),
            config,
            timeout: Duration::from_secs(60),
            full: false,
            autoscalers: None,
            duration: None,
            report: None,
            policies: vec![policy],
        }
    }
}

/// The cluster `wasp simulate` runs when given no scenario, wherever it is run from.
const DEFAULT_SCENARIO: &str = include_str!("../../../../sim/scenarios/small.yaml");

/// Unschedulable pods whose decision record the report shows.
const EXPLAINED_FAILURES: usize = 3;

/// How often the timeline samples the API server, in simulated time.
const TICK: Duration = Duration::from_secs(1);

/// How long the timeline runs past the last thing the scenario does, and how many rescheduling intervals when
/// there is a rescheduler (capped): time for the loops to answer it.
const TAIL: Duration = Duration::from_secs(30);
const RESCHEDULING_INTERVALS: u32 = 5;
const LONGEST_TAIL: Duration = Duration::from_secs(30 * 60);

/// Progress lines on stderr, in real time.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let scenario = match &args.scenario {
        Some(path) => Scenario::load(path)?,
        None => Scenario::parse(DEFAULT_SCENARIO).expect("the built-in scenario is valid (tested)"),
    };
    let mut config = super::config_or_built_in(args.config.as_deref())?;
    // Kept until the simulation ends: the policy directory with the tried components.
    let _staged = match args.policies.is_empty() {
        true => None,
        false => Some(try_policies(&mut config, &args.policies)?),
    };
    let autoscalers: Vec<Autoscaler> = match &args.autoscalers {
        Some(path) if config.autoscaler.is_none() => anyhow::bail!("{}: the configuration has no autoscaler section to run them", path.display()),
        Some(path) => super::manifests::read_objects(path, "Autoscaler")?,
        None => Vec::new(),
    };
    // One thread, its clock paused: time moves only when every task waits, and then straight to the next timer.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build()?;
    crate::clock::follow_the_simulator();
    runtime.block_on(simulate(&scenario, &config, &args, &autoscalers))
}

/// A policy directory with the configuration's policies and the tried ones in their place, and the configuration
/// changed to use them where their kinds fit.
fn try_policies(config: &mut HostConfig, files: &[PathBuf]) -> anyhow::Result<tempfile::TempDir> {
    use crate::contract::types::PolicyKind;
    let staged = tempfile::tempdir()?;
    for entry in std::fs::read_dir(&config.policy_dir).with_context(|| format!("reading {}", config.policy_dir.display()))? {
        let entry = entry?;
        std::os::unix::fs::symlink(std::fs::canonicalize(entry.path())?, staged.path().join(entry.file_name()))?;
    }
    for file in files {
        let policy = super::policy::load(file, String::new())?;
        let name = policy.descriptor.name.clone();
        let target = staged.path().join(format!("{name}.wasm"));
        // The tried file replaces the directory's, compressed or not.
        let _ = std::fs::remove_file(&target);
        let _ = std::fs::remove_file(staged.path().join(format!("{name}.wasm.zst")));
        std::fs::write(&target, crate::registry::bundle::read_component(file)?).with_context(|| format!("writing {}", target.display()))?;
        let mut uses = Vec::new();
        for kind in &policy.descriptor.kinds {
            match kind {
                PolicyKind::Filter => config.scheduler.profiles.iter_mut().for_each(|profile| {
                    if !profile.filters.contains(&name) {
                        profile.filters.push(name.clone());
                    }
                }),
                PolicyKind::Score => config.scheduler.profiles.iter_mut().for_each(|profile| {
                    if !profile.scores.iter().any(|score| score.policy == name) {
                        profile.scores.push(crate::config::WeightedPolicy { policy: name.clone(), weight: 1 });
                    }
                }),
                PolicyKind::Evict => {
                    let section = config.rescheduler.get_or_insert_with(|| serde_yaml::from_str("strategies: []").expect("a valid section"));
                    if !section.strategies.iter().any(|strategy| strategy.policy == name) {
                        section.strategies.push(crate::config::Strategy { policy: name.clone() });
                    }
                }
                PolicyKind::Scale => {
                    let section = config.autoscaler.get_or_insert_with(|| serde_yaml::from_str("policies: []").expect("a valid section"));
                    if !section.policies.contains(&name) {
                        section.policies.push(name.clone());
                    }
                }
            }
            uses.push(match kind {
                PolicyKind::Filter => "a filter in every profile",
                PolicyKind::Score => "a score (weight 1) in every profile",
                PolicyKind::Evict => "a rescheduler strategy",
                PolicyKind::Scale => "an autoscaler policy",
            });
        }
        println!("trying {name} {} from {}: {}", policy.descriptor.version, file.display(), uses.join(", "));
    }
    config.policy_dir = staged.path().to_path_buf();
    config.validate()?;
    Ok(staged)
}

/// An API client for a simulator. kube's own retries are off: the loops back off by themselves.
fn sim_client(simulator: &Simulator) -> anyhow::Result<ApiClient> {
    ApiClient::from_config(kube::Config::new(simulator.url().parse()?))
}

/// How much simulated time the timeline runs, or none when nothing would happen after the first placement: no
/// event, no rescheduler, no Autoscaler.
fn timeline_length(scenario: &Scenario, config: &HostConfig, args: &SimulateArgs, autoscalers: &[Autoscaler]) -> Option<Duration> {
    if let Some(duration) = args.duration {
        return Some(duration);
    }
    let last_event = scenario.events.iter().map(|event| event.at).max();
    let curves = (!autoscalers.is_empty()).then(|| scenario.longest_curve());
    let rescheduling = config.rescheduler.as_ref().map(|section| (section.interval * RESCHEDULING_INTERVALS).clamp(TAIL, LONGEST_TAIL));
    if last_event.is_none() && curves.is_none() && rescheduling.is_none() {
        return None;
    }
    Some(last_event.max(curves).unwrap_or_default() + rescheduling.unwrap_or(TAIL))
}

/// Creates the Autoscaler CRD and the Autoscalers, each in its namespace (`default` when it names none).
async fn create_autoscalers(client: &Client, autoscalers: &[Autoscaler]) -> anyhow::Result<()> {
    let crd = <Autoscaler as kube::CustomResourceExt>::crd();
    Api::all(client.clone()).create(&PostParams::default(), &crd).await?;
    for autoscaler in autoscalers {
        let mut autoscaler = autoscaler.clone();
        let namespace = autoscaler.metadata.namespace.get_or_insert_with(|| "default".into()).clone();
        Api::<Autoscaler>::namespaced(client.clone(), &namespace).create(&PostParams::default(), &autoscaler).await?;
    }
    Ok(())
}

async fn simulate(scenario: &Scenario, config: &HostConfig, args: &SimulateArgs, autoscalers: &[Autoscaler]) -> anyhow::Result<()> {
    // Policies load (and compile) before the simulated cluster starts, so the scenario's timed events happen
    // at their time relative to the scheduler's first decisions.
    let policies = Arc::new(PolicyRegistry::new(&Runtime::new(None)?, config.clone(), None)?);
    let real = std::time::Instant::now();
    let simulator = Simulator::start(scenario, "127.0.0.1:0".parse()?).await?;
    let started = Instant::now();
    let api = sim_client(&simulator)?;
    let client = api.client.clone();
    if !autoscalers.is_empty() {
        create_autoscalers(&client, autoscalers).await?;
    }
    let host = Host::new(api, policies, HostIdentity::named("wasp-simulate", None));
    host.scheduler.keep_report();
    let profiles = host.scheduler.profile_names();
    println!("scenario {:?}: {} nodes; profiles {}; API server {}", scenario.name, scenario.node_names().len(), profiles.join(", "), simulator.url());
    // Every loop the configuration enables, as `wasp run` runs them.
    let loops = tokio::spawn(host.clone().run_loops());
    settle(&client, &host, &profiles, started, args.timeout).await?;
    let placed_at = started.elapsed();
    let before = report::node_loads(&host.cluster.read());
    println!();
    println!("placement (at {} of simulated time):", clock_time(placed_at));
    print!("{}", report::placement(&client, &before, &profiles, args.full).await?);
    let mut story = html::Story { scenario: scenario.name.clone(), before: before.clone(), ..html::Story::default() };
    if let Some(length) = timeline_length(scenario, config, args, autoscalers) {
        let timeline = follow(&client, &host, scenario, started, length, real).await?;
        let after = report::node_loads(&host.cluster.read());
        let moves = timeline.moves(&host.records, &scenario.events);
        println!();
        let stretches = report::stretches(&scenario.events, &timeline.happenings);
        print!("{}", report::timeline(&stretches, started.elapsed(), real.elapsed()));
        println!();
        print!("{}", report::moves(&moves));
        println!();
        print!("{}", report::replica_changes(&timeline.happenings));
        if !timeline.autoscalers.is_empty() {
            println!();
            print!("{}", report::autoscalers(&timeline.autoscalers, Duration::from_secs(5)));
        }
        println!();
        println!("nodes before and after the timeline:");
        print!("{}", report::before_and_after(&before, &after, args.full));
        story.after = after;
        story.moves = moves;
        story.autoscalers = timeline.autoscalers;
        story.stretches = stretches;
    }
    let waiting = closing(&host, &profiles, started.elapsed());
    story.waiting = waiting;
    story.simulated = started.elapsed();
    story.policy_calls = html::policy_calls(&host);
    host.stop();
    loops.abort();
    if let Some(path) = &args.report {
        std::fs::write(path, html::page(&story)).with_context(|| format!("writing the report {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}

/// Runs the timeline for `length` of simulated time since `started`, sampling the API server every tick; says
/// where it is on stderr every few seconds of real time.
async fn follow(client: &Client, host: &Host, scenario: &Scenario, started: Instant, length: Duration, real: std::time::Instant) -> anyhow::Result<Timeline> {
    let scale_events: Vec<&wasp_sim::scenario::TimedEvent> =
        scenario.events.iter().filter(|event| matches!(event.action, wasp_sim::scenario::Action::Scale { .. })).collect();
    let mut timeline = Timeline::default();
    let mut progress = std::time::Instant::now();
    loop {
        let at = started.elapsed();
        let runs = host.rescheduler.stats.runs.load(Ordering::Relaxed);
        let summary = host.rescheduler.last_run().filter(|run| run.evicted > 0 || !run.skipped.is_empty()).map(|run| {
            let proposed: Vec<String> =
                run.policies.iter().filter(|policy| policy.proposed > 0).map(|policy| format!("{} proposed {}", policy.policy, policy.proposed)).collect();
            format!("{} evicted of {} candidates ({}); skipped {:?}", run.evicted, run.candidates, proposed.join(", "), run.skipped)
        });
        // A sample the API server failed (an injected fault, say) is skipped: the next tick compares with the last.
        if let Err(error) = timeline.sample(client, at, &scale_events, Some((runs, summary))).await {
            eprintln!("  simulated {}: sampling the API server failed ({error:#}); trying again next tick", clock_time(at));
        }
        if progress.elapsed() > PROGRESS_EVERY {
            eprintln!(
                "  simulated {} of {} ({:.0}s real): {} changes so far",
                clock_time(at),
                clock_time(length),
                real.elapsed().as_secs_f64(),
                timeline.happenings.len()
            );
            progress = std::time::Instant::now();
        }
        if at >= length {
            return Ok(timeline);
        }
        tokio::time::sleep(TICK).await;
    }
}

/// What still waits and why (with the decision records of the first few), and the profiles' figures; returns
/// the waiting pods and their messages.
fn closing(host: &Host, profiles: &[String], elapsed: Duration) -> Vec<(String, String)> {
    let scheduler = &host.scheduler;
    let details = scheduler.stats.report().unwrap_or_default();
    let failures = details.last_failure;
    if !failures.is_empty() {
        println!();
        println!("unschedulable:");
        for (pod, message) in &failures {
            println!("  {pod}: {message}");
        }
        // What `wasp explain pod` would show in a cluster, for the first few.
        for key in failures.keys().take(EXPLAINED_FAILURES) {
            if let Some(record) = host.records.placements.get(key) {
                println!();
                print!("{}", crate::explain::render::placement(&record));
            }
        }
        if failures.len() > EXPLAINED_FAILURES {
            println!("({} more unschedulable pods; their records read the same)", failures.len() - EXPLAINED_FAILURES);
        }
    }
    let percentile = |mut values: Vec<Duration>, p: f64| {
        values.sort();
        values.get(((values.len() as f64 - 1.0) * p).round() as usize).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    let scheduled = scheduler.stats.scheduled.load(Ordering::Relaxed);
    println!();
    println!(
        "profiles {}: {scheduled} bound, {} unschedulable, {} binding errors in {} of simulated time; decisions took p50 {:.2} ms, p99 {:.2} ms; queue-to-bound p50 {:.0} ms, p99 {:.0} ms of simulated time",
        profiles.join(", "),
        failures.len(),
        scheduler.stats.bind_errors.load(Ordering::Relaxed),
        clock_time(elapsed),
        percentile(details.decisions.clone(), 0.5),
        percentile(details.decisions, 0.99),
        percentile(details.latencies.clone(), 0.5),
        percentile(details.latencies, 0.99),
    );
    failures.into_iter().collect()
}

/// Waits until every pod of our profiles is bound or waits as unschedulable, and that holds for a moment;
/// reports progress on stderr; gives up at `timeout` of simulated time after `started`.
async fn settle(client: &Client, host: &Host, profiles: &[String], started: Instant, timeout: Duration) -> anyhow::Result<()> {
    let scheduler = &host.scheduler;
    let pods: Api<Pod> = Api::all(client.clone());
    let mut settled_since: Option<Instant> = None;
    let mut progress = std::time::Instant::now();
    let ours = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.scheduler_name.as_deref()).is_some_and(|name| profiles.iter().any(|profile| profile == name));
    let bound = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()).is_some();
    loop {
        let list = pods.list(&ListParams::default()).await?.items;
        let mine: Vec<&Pod> = list.iter().filter(|pod| ours(pod) && pod.metadata.deletion_timestamp.is_none()).collect();
        let bound_count = mine.iter().filter(|pod| bound(pod)).count();
        let sizes = scheduler.queue().sizes();
        let settled = !mine.is_empty() && sizes.active == 0 && sizes.backoff == 0 && bound_count + sizes.unschedulable >= mine.len();
        if progress.elapsed() > PROGRESS_EVERY {
            eprintln!(
                "  placing: {bound_count}/{} bound, {} unschedulable, at {} of simulated time",
                mine.len(),
                sizes.unschedulable,
                clock_time(started.elapsed())
            );
            progress = std::time::Instant::now();
        }
        settled_since = if settled { settled_since.or(Some(Instant::now())) } else { None };
        if settled_since.is_some_and(|since| since.elapsed() > Duration::from_millis(500)) || started.elapsed() > timeout {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
