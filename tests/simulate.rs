//! `wasp simulate` tells the whole story: a scenario's timeline runs on the simulated clock (minutes in seconds),
//! each event is reported with its effect, evictions with where the pods went and who moved them, replica changes
//! with their times, every node before and after; `--report` writes the same as one self-contained HTML page,
//! which a headless Chromium renders chart by chart.

mod common;

use common::repo_root;
use std::collections::BTreeMap;
use std::process::Command;

/// Under `wasp simulate`, work the runtime hands off (a scheduling decision on a scoped thread, and the filtering
/// threads it uses) reads the paused clock where it stands, as the runtime's thread does: a policy's circuit
/// breaker, say, opens and closes in simulated time. (Here, not beside the clock's code: following the simulator is
/// for the whole process, and the library's other tests share theirs.)
#[tokio::test(start_paused = true)]
async fn work_off_the_runtime_reads_the_paused_clock_where_it_stands() {
    wasp::clock::follow_the_simulator();
    tokio::time::advance(std::time::Duration::from_secs(3600)).await;
    let now = tokio::time::Instant::now();
    let (here, pooled) = wasp::runtime::off_async_worker(|| (wasp::clock::instant(), rayon::join(wasp::clock::instant, wasp::clock::instant)));
    assert_eq!((here, pooled), (now, (now, now)), "an hour of simulated time, not the real clock");
}

fn wasp(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_wasp")).args(args).current_dir(repo_root()).output().unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// The lines of the report's section that starts with `heading`, up to the next blank line.
fn section<'a>(stdout: &'a str, heading: &str) -> Vec<&'a str> {
    stdout.lines().skip_while(|line| !line.starts_with(heading)).skip(1).take_while(|line| !line.is_empty()).collect()
}

#[test]
fn the_unreliable_scenario_runs_its_timeline_faster_than_real_time_and_tells_each_events_effect() {
    let (ok, stdout, stderr) = wasp(&["simulate", "--scenario", "sim/scenarios/unreliable.yaml"]);
    assert!(ok, "{stderr}");
    // The report is a report: no log line, no colour code.
    assert!(!stdout.contains('\u{1b}') && !stdout.contains(" WARN ") && !stdout.contains(" INFO "), "{stdout}");
    // 150 s of events and 30 s after them, in (much) less real time.
    let heading = stdout.lines().find(|line| line.starts_with("timeline (")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(heading.starts_with("timeline (3m00s of simulated time in ") || heading.starts_with("timeline (3m01s of simulated time in "), "{heading}");
    let real: f64 = heading.split(" in ").nth(1).unwrap().trim_end_matches("s):").parse().unwrap();
    assert!(real < 90.0, "faster than real time: {heading}");
    let timeline = section(&stdout, "timeline (");
    let events: Vec<&str> =
        timeline.iter().filter(|line| !line.starts_with("            ") && !line.contains("(before any event)")).map(|line| line.trim()).collect();
    assert_eq!(events, ["30s  fail-node worker-3", "1m30s  recover-node worker-3", "2m00s  drain worker-0", "2m30s  scale default/api to 12"], "{stdout}");
    // The drain: the pods on worker-0 left it, and their replacements were bound.
    let drain =
        timeline.iter().skip_while(|line| !line.contains("drain worker-0")).skip(1).take_while(|line| line.starts_with("            ")).collect::<Vec<_>>();
    assert!(drain.iter().any(|line| line.contains(" left worker-0: ")), "{stdout}");
    let moves = section(&stdout, "evictions and deletions (");
    let drained: Vec<Vec<&str>> = moves.iter().skip(1).map(|line| line.split_whitespace().collect()).filter(|row: &Vec<&str>| row[2] == "worker-0").collect();
    assert!(!drained.is_empty(), "{stdout}");
    for row in &drained {
        // TIME POD FROM TO BY...
        // (Usually elsewhere; the scenario cuts watches every 20 s, and a host whose view of the cordon is late
        // places the replacement as kube-scheduler with a stale cache would.)
        assert!(row[3].starts_with("worker-"), "a replacement bound: {row:?}\n{stdout}");
        assert_eq!(row[4..].join(" "), "scenario: drain worker-0", "{row:?}");
    }
    let heading = stdout.lines().find(|line| line.starts_with("evictions and deletions (")).unwrap();
    assert_eq!(heading, format!("evictions and deletions ({}):", moves.len() - 1), "every row counted");
    // The scale-up, at its time, by the scenario.
    let changes = section(&stdout, "replica changes (");
    let rows: Vec<Vec<&str>> = changes.iter().map(|line| line.split_whitespace().collect()).collect();
    assert!(rows.contains(&vec!["2m30s", "Deployment", "default/api", "9", "->", "12", "scenario:", "scale", "default/api", "to", "12"]), "{changes:?}");
    // Every node before and after, in natural order.
    let nodes: Vec<&str> = section(&stdout, "nodes before and after")
        .iter()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| name.starts_with("worker-"))
        .collect();
    let expected: Vec<String> = (0..12).map(|index| format!("worker-{index}")).collect();
    assert_eq!(nodes, expected, "{stdout}");
    // The table of nodes agrees with the evictions: worker-0 ends with what it had, less what left it, plus the
    // replacements bound there before the host saw the cordon (the drain cordons and evicts in the same instant,
    // and the host's views of nodes and of pods are two watches, as kube-scheduler's are; the drain evicts those
    // again).
    let drained_node: Vec<usize> = section(&stdout, "nodes before and after")
        .into_iter()
        .find(|line| line.starts_with("worker-0 "))
        .unwrap()
        .split_whitespace()
        .filter_map(|field| field.parse().ok())
        .collect();
    let came_back = moves.iter().skip(1).filter(|line| line.split_whitespace().nth(3) == Some("worker-0")).count();
    assert_eq!(drained_node[1] + drained.len(), drained_node[0] + came_back, "{stdout}");
}

/// Where Debian's chromium is (`.ci/run` installs it), if it is.
fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().find(|path| std::path::Path::new(path).exists())
}

fn headless(page: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let url = format!("file://{}", page.display());
    let mut args = vec!["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--virtual-time-budget=5000"];
    args.extend_from_slice(extra);
    args.push(&url);
    Command::new(chromium().expect("checked by the test")).args(&args).output().unwrap()
}

const STORY: &str = "name: story
kubelet: {readyDelay: 1s}
nodeGroups:
- {name: node, count: 5, cpu: '8', memory: 32Gi, zones: [zone-a, zone-b]}
workloads:
- name: web
  replicas: 2
  schedulerName: wasp
  cpu: 100m
  memory: 128Mi
  load: &ramp
    cpu: [{at: 0s, value: 0.1}]
    cpuPerRequest: 10
    qps: [{at: 0s, value: 8}, {at: 20s, value: 8}, {at: 60s, value: 60}, {at: 90s, value: 60}, {at: 110s, value: 8}]
- {name: api, replicas: 2, schedulerName: wasp, cpu: 100m, memory: 128Mi, load: *ramp}
- {name: worker, replicas: 1, schedulerName: wasp, cpu: 200m, memory: 256Mi}
- {name: too-big, replicas: 1, schedulerName: wasp, cpu: '32', memory: 1Gi}
externalMetrics:
  queue_depth: [{at: 0s, value: 10}, {at: 30s, value: 150}, {at: 100s, value: 20}]
events:
- {at: 40s, action: cordon, node: node-4}
";

#[test]
fn the_report_page_renders_every_chart_in_headless_chromium() {
    let missing = chromium().is_none().then(|| "chromium is missing: install Debian's chromium package (.ci/run does)".to_string());
    if !common::can_run(&[missing]) {
        return;
    }
    let directory = tempfile::tempdir().unwrap();
    let scenario = directory.path().join("story.yaml");
    std::fs::write(&scenario, STORY).unwrap();
    let page = directory.path().join("report.html");
    let (ok, stdout, stderr) = wasp(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--config",
        "examples/config/autoscale.yaml",
        "--autoscalers",
        "examples/autoscalers.yaml",
        "--report",
        page.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("http://") && !html.contains("https://") && !html.contains(" src="), "self-contained: nothing from the network");

    // What the text report says there is to draw.
    let waiting_reasons: std::collections::BTreeSet<&str> =
        section(&stdout, "unschedulable:").iter().filter_map(|line| line.split_once(": ").map(|(_, message)| message)).collect();
    assert_eq!(waiting_reasons.len(), 1, "too-big waits, for one reason: {stdout}");
    let changes = section(&stdout, "replica changes (");
    let by_autoscaler = |name: &str| changes.iter().filter(|line| line.contains(&format!("Autoscaler default/{name} "))).count();
    assert!(by_autoscaler("web") > 0 && by_autoscaler("api") > 0, "the load ramp scales both: {changes:?}");

    let dumped = headless(&page, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dumped.stdout);
    let rendered = dom
        .split("<pre id=\"rendered\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("no count in the DOM: {}", String::from_utf8_lossy(&dumped.stderr)));
    let rendered: BTreeMap<String, usize> = serde_json::from_str(rendered).unwrap_or_else(|error| panic!("{error}: {rendered}"));
    assert_eq!(rendered["nodes-before"], 5, "a cell per node: {rendered:?}");
    assert_eq!(rendered["nodes-after"], 5, "{rendered:?}");
    assert_eq!(rendered["pending"], waiting_reasons.len(), "a bar per reason: {rendered:?}");
    // One chart per Autoscaler, in name order (api, web, worker): both lines, and a mark per change of desired replicas.
    for (index, name) in ["api", "web", "worker"].into_iter().enumerate() {
        let drawn = rendered[&format!("autoscaler-{index}")];
        assert!(drawn >= 2 + usize::from(by_autoscaler(name) > 0), "{name}: {rendered:?}");
    }
    // A bar per policy that was called: the profile's filters and scores, and the scale policies the Autoscalers name.
    assert!(rendered["policy-latency"] >= 3, "{rendered:?}");
    for (chart, count) in &rendered {
        let expected = html.split(&format!("data-chart=\"{chart}\" data-expected=\"")).nth(1).and_then(|rest| rest.split('"').next()).unwrap();
        assert_eq!(expected.parse::<usize>().unwrap(), *count, "{chart}: every mark the page drew was laid out");
    }

    // A screenshot, kept beside the build for a look (the README's picture is one).
    let screenshot = repo_root().join("target/simulate-report.png");
    let _ = std::fs::remove_file(&screenshot);
    let shot = headless(&page, &["--hide-scrollbars", "--window-size=1280,2200", &format!("--screenshot={}", screenshot.display())]);
    let png = std::fs::read(&screenshot).unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&shot.stderr)));
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a picture of {} bytes", png.len());
}
