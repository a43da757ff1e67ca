//! `wasp simulate --report FILE.html`: the report as one self-contained page, plain SVG drawn here (no script or
//! style from the network, no charting library): each node's requested CPU as a heatmap before and after the
//! timeline, pending pods grouped by reason, each Autoscaler's replicas against its first metric over time with
//! its decisions marked, and the policies' call latencies. A small inline script counts what each chart
//! rendered (`data-rendered`), which the tests read back from a headless Chromium.

use super::report::{NodeLoad, Stretch};
use super::timeline::{clock_time, AutoscalerSample, Move};
use crate::host::Host;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// Everything the page shows.
#[derive(Default)]
pub struct Story {
    pub scenario: String,
    pub simulated: Duration,
    pub before: Vec<NodeLoad>,
    /// Empty when no timeline ran.
    pub after: Vec<NodeLoad>,
    /// The timeline, cut at each scenario event.
    pub stretches: Vec<Stretch>,
    pub moves: Vec<Move>,
    pub autoscalers: Vec<AutoscalerSample>,
    /// Pods still waiting, and the scheduler's message for each.
    pub waiting: Vec<(String, String)>,
    pub policy_calls: Vec<PolicyCalls>,
}

/// One policy's calls, from the host's own `wasp_policy_call_duration_seconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyCalls {
    pub policy: String,
    pub calls: u64,
    pub mean_ms: f64,
    /// The upper bound of the histogram bucket that holds the 99th percentile.
    pub p99_ms: f64,
}

/// Every policy's calls (all operations together), read from the host's metrics as `/metrics` serves them.
pub fn policy_calls(host: &Host) -> Vec<PolicyCalls> {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &host.endpoints.metrics).is_err() {
        return Vec::new();
    }
    calls_from_metrics(&text)
}

/// A label's value in a sample line's label set: `policy` in `{operation="filter",policy="x",le="0.1"}`.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let end = labels[start..].find('"')? + start;
    Some(&labels[start..end])
}

fn calls_from_metrics(text: &str) -> Vec<PolicyCalls> {
    // Per policy: sum, count, and cumulative counts by bucket bound (summed over operations).
    let mut policies: BTreeMap<String, (f64, u64, BTreeMap<u64, u64>)> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("wasp_policy_call_duration_seconds_") else { continue };
        let (Some(open), Some(close)) = (rest.find('{'), rest.rfind('}')) else { continue };
        let (series, labels, value) = (&rest[..open], &rest[open + 1..close], rest[close + 1..].trim());
        let Some(policy) = label(labels, "policy") else { continue };
        let entry = policies.entry(policy.to_string()).or_default();
        match series {
            "sum" => entry.0 += value.parse::<f64>().unwrap_or(0.0),
            "count" => entry.1 += value.parse::<u64>().unwrap_or(0),
            "bucket" => {
                // Bounds as nanoseconds, so they order and add up exactly; +Inf last.
                let bound = label(labels, "le").and_then(|le| le.parse::<f64>().ok()).map_or(u64::MAX, |seconds| (seconds * 1e9) as u64);
                *entry.2.entry(bound).or_default() += value.parse::<u64>().unwrap_or(0);
            }
            _ => {}
        }
    }
    policies
        .into_iter()
        .filter(|(_, (_, count, _))| *count > 0)
        .map(|(policy, (sum, count, buckets))| {
            let wanted = (count as f64 * 0.99).ceil() as u64;
            let p99 = buckets.iter().find(|(_, cumulative)| **cumulative >= wanted).map_or(f64::INFINITY, |(bound, _)| *bound as f64 / 1e6);
            PolicyCalls { policy, calls: count, mean_ms: sum * 1e3 / count as f64, p99_ms: p99 }
        })
        .collect()
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// White at 0% to red at 100% and past it.
fn heat(percent: f64) -> String {
    let share = (percent / 100.0).clamp(0.0, 1.0);
    let (red, green, blue) = (255.0 - 40.0 * share, 255.0 - 200.0 * share, 255.0 - 220.0 * share);
    format!("rgb({:.0},{:.0},{:.0})", red, green, blue)
}

const CELL: usize = 30;

/// Each node a cell coloured by its requested CPU, labelled with its pods; its title says all.
fn heatmap(name: &str, loads: &[NodeLoad]) -> String {
    let columns = loads.len().clamp(1, 25);
    let rows = loads.len().div_ceil(columns).max(1);
    let (width, height) = (columns * CELL, rows * CELL);
    let mut svg = format!(r#"<svg data-chart="{name}" data-expected="{}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#, loads.len());
    for (index, load) in loads.iter().enumerate() {
        let (x, y) = ((index % columns) * CELL, (index / columns) * CELL);
        let title = format!("{}: {} pods, cpu {:.0}%, memory {:.0}%", load.name, load.pods, load.cpu, load.memory);
        let _ = write!(
            svg,
            r##"<g><title>{}</title><rect class="mark" x="{x}" y="{y}" width="{}" height="{}" fill="{}" stroke="#999"/><text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text></g>"##,
            escape(&title),
            CELL - 2,
            CELL - 2,
            heat(load.cpu),
            x + CELL / 2 - 1,
            y + CELL / 2 + 3,
            load.pods
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Horizontal bars, one per item, labelled with the value; the label shortened, whole in the bar's title.
fn bars(name: &str, items: &[(String, f64)], unit: &str) -> String {
    const LABEL: usize = 260;
    const BAR: usize = 360;
    let height = items.len().max(1) * 22;
    let largest = items.iter().map(|(_, value)| *value).filter(|value| value.is_finite()).fold(0.0, f64::max).max(f64::MIN_POSITIVE);
    let mut svg = format!(r#"<svg data-chart="{name}" data-expected="{}" width="{}" height="{height}">"#, items.len(), LABEL + BAR + 90);
    for (index, (label, value)) in items.iter().enumerate() {
        let y = index * 22;
        let length = if value.is_finite() { (value / largest * BAR as f64).max(1.0) } else { BAR as f64 };
        let _ = write!(
            svg,
            r#"<g><title>{}</title><text x="{}" y="{}" font-size="12" text-anchor="end">{}</text><rect class="mark" x="{}" y="{}" width="{length:.1}" height="16" fill="steelblue"/><text x="{}" y="{}" font-size="12">{}{unit}</text></g>"#,
            escape(label),
            LABEL - 6,
            y + 13,
            escape(&crate::text::truncated(label, 40)),
            LABEL,
            y + 2,
            LABEL as f64 + length + 4.0,
            y + 13,
            match value {
                value if !value.is_finite() => "> 2600".to_string(),
                value if value.fract() == 0.0 => format!("{value}"),
                value => format!("{value:.3}"),
            }
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The first metric's reading in an Autoscaler's targets (`cpu: 120%/50%, qps: 12/10` reads 120), if it was read.
fn first_reading(targets: &str) -> Option<f64> {
    let first = targets.split(", ").next()?;
    let metric = first.rsplit_once(": ").map_or(first, |(_, metric)| metric);
    metric.split('/').next()?.trim_end_matches('%').parse().ok()
}

/// One Autoscaler's replicas (left axis) and first metric reading (right axis) over time, a mark at each change
/// of its replicas.
fn autoscaler_chart(name: &str, samples: &[&AutoscalerSample], decisions: &[(Duration, i32)]) -> String {
    const WIDTH: f64 = 640.0;
    const HEIGHT: f64 = 180.0;
    const PAD: f64 = 30.0;
    let end = samples.last().map_or(1.0, |sample| sample.at.as_secs_f64()).max(1.0);
    let replicas_top = samples.iter().map(|sample| sample.current.max(sample.desired)).max().unwrap_or(1).max(1) as f64 * 1.2;
    let reading_top = samples.iter().filter_map(|sample| first_reading(&sample.targets)).fold(0.0, f64::max).max(1.0) * 1.2;
    let x = |at: f64| PAD + at / end * (WIDTH - 2.0 * PAD);
    let y = |value: f64, top: f64| HEIGHT - PAD - value / top * (HEIGHT - 2.0 * PAD);
    let line = |points: Vec<(f64, f64)>| points.iter().map(|(px, py)| format!("{px:.1},{py:.1}")).collect::<Vec<_>>().join(" ");
    let replicas = line(samples.iter().map(|sample| (x(sample.at.as_secs_f64()), y(sample.current as f64, replicas_top))).collect());
    let readings = line(samples.iter().filter_map(|sample| Some((x(sample.at.as_secs_f64()), y(first_reading(&sample.targets)?, reading_top)))).collect());
    // Each line is a mark when it has two points or more (one point draws nothing).
    let lines = [&replicas, &readings].into_iter().filter(|points| points.contains(' ')).count();
    let mut svg = format!(r#"<svg data-chart="{name}" data-expected="{}" width="{WIDTH}" height="{HEIGHT}">"#, decisions.len() + lines);
    let _ = write!(svg, r##"<line x1="{PAD}" y1="{0}" x2="{1}" y2="{0}" stroke="#999"/>"##, HEIGHT - PAD, WIDTH - PAD);
    for (points, colour, width) in [(&replicas, "steelblue", "2"), (&readings, "darkorange", "1.5")] {
        let class = if points.contains(' ') { "mark" } else { "empty" };
        let _ = write!(svg, r#"<polyline class="{class}" points="{points}" fill="none" stroke="{colour}" stroke-width="{width}"/>"#);
    }
    for (at, to) in decisions {
        let (cx, cy) = (x(at.as_secs_f64()), y(*to as f64, replicas_top));
        let _ = write!(svg, r#"<g><title>{}: {to} replicas</title><circle class="mark" cx="{cx:.1}" cy="{cy:.1}" r="4" fill="crimson"/></g>"#, clock_time(*at));
    }
    let _ = write!(svg, r#"<text x="{PAD}" y="14" font-size="11" fill="steelblue">replicas (max {:.0})</text>"#, replicas_top / 1.2);
    let _ = write!(
        svg,
        r#"<text x="{}" y="14" font-size="11" fill="darkorange" text-anchor="end">first metric (max {:.0})</text>"#,
        WIDTH - PAD,
        reading_top / 1.2
    );
    let _ =
        write!(svg, r#"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"#, WIDTH - PAD, HEIGHT - 8.0, clock_time(Duration::from_secs_f64(end)));
    svg.push_str("</svg>");
    svg
}

/// Counts, in each chart, the marks the browser laid out with a size, and says so on the chart and in
/// `#rendered` (read by the tests through Chromium's `--dump-dom`).
const COUNT_RENDERED: &str = r#"<script>
window.addEventListener('load', () => {
  const counts = {};
  for (const chart of document.querySelectorAll('svg[data-chart]')) {
    const drawn = [...chart.querySelectorAll('.mark')].filter((mark) => { const box = mark.getBBox(); return box.width > 0 || box.height > 0; });
    chart.setAttribute('data-rendered', drawn.length);
    counts[chart.dataset.chart] = drawn.length;
  }
  document.getElementById('rendered').textContent = JSON.stringify(counts);
});
</script>"#;

const STYLE: &str = "<style>body{font-family:sans-serif;margin:24px;color:#222}h2{margin-top:32px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;font-size:13px}td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #eee}\
.side{display:inline-block;vertical-align:top;margin-right:32px}#rendered{display:none}</style>";

pub fn page(story: &Story) -> String {
    let mut html = format!("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>wasp simulate: {}</title>{STYLE}</head><body>", escape(&story.scenario));
    let _ = write!(
        html,
        "<h1>wasp simulate: {}</h1><p>{} nodes, {} of simulated time.</p>",
        escape(&story.scenario),
        story.before.len(),
        clock_time(story.simulated)
    );
    html.push_str("<h2>Nodes: requested CPU (colour) and pods (number)</h2>");
    let _ = write!(html, r#"<div class="side"><h3>after the first placement</h3>{}</div>"#, heatmap("nodes-before", &story.before));
    if !story.after.is_empty() {
        let _ = write!(html, r#"<div class="side"><h3>at the end of the timeline</h3>{}</div>"#, heatmap("nodes-after", &story.after));
    }
    html.push_str("<h2>Pending pods by reason (how many)</h2>");
    let mut by_reason: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, message) in &story.waiting {
        *by_reason.entry(message.as_str()).or_default() += 1;
    }
    let reasons: Vec<(String, f64)> = by_reason.into_iter().map(|(reason, count)| (reason.to_string(), count as f64)).collect();
    if reasons.is_empty() {
        html.push_str("<p>None: every pod was placed.</p>");
    }
    let _ = write!(html, "{}", bars("pending", &reasons, ""));
    if !story.stretches.is_empty() {
        html.push_str("<h2>Timeline</h2><table><tr><th>time</th><th>event</th><th>what followed</th></tr>");
        for stretch in &story.stretches {
            let followed: Vec<String> = stretch.effect.iter().map(|line| escape(line)).collect();
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                stretch.at.map(clock_time).unwrap_or_default(),
                escape(&stretch.event),
                followed.join("<br>")
            );
        }
        html.push_str("</table>");
        let _ = write!(
            html,
            "<h2>Evictions and deletions ({})</h2><table><tr><th>time</th><th>pod</th><th>from</th><th>to</th><th>by</th><th>reason</th></tr>",
            story.moves.len()
        );
        for moved in &story.moves {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                clock_time(moved.at),
                escape(&moved.pod),
                escape(&moved.from),
                escape(moved.to.as_deref().unwrap_or("-")),
                escape(&moved.by),
                escape(&moved.reason)
            );
        }
        html.push_str("</table>");
    }
    let mut autoscalers: BTreeMap<&str, Vec<&AutoscalerSample>> = BTreeMap::new();
    for sample in &story.autoscalers {
        autoscalers.entry(sample.autoscaler.as_str()).or_default().push(sample);
    }
    if !autoscalers.is_empty() {
        html.push_str("<h2>Autoscalers: replicas (blue), first metric (orange), decisions (red)</h2>");
    }
    for (index, (name, samples)) in autoscalers.iter().enumerate() {
        let decisions: Vec<(Duration, i32)> =
            samples.windows(2).filter(|pair| pair[1].desired != pair[0].desired).map(|pair| (pair[1].at, pair[1].desired)).collect();
        let _ = write!(html, "<h3>{}</h3>{}", escape(name), autoscaler_chart(&format!("autoscaler-{index}"), samples, &decisions));
    }
    html.push_str("<h2>Policy calls: mean latency</h2>");
    let p99 = |ms: f64| if ms.is_finite() { format!("p99 <= {ms} ms") } else { "p99 past the histogram's last bucket".to_string() };
    let latencies: Vec<(String, f64)> =
        story.policy_calls.iter().map(|calls| (format!("{} ({} calls, {})", calls.policy, calls.calls, p99(calls.p99_ms)), calls.mean_ms)).collect();
    let _ = write!(html, "{}", bars("policy-latency", &latencies, " ms"));
    html.push_str("<pre id=\"rendered\"></pre>");
    html.push_str(COUNT_RENDERED);
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_calls_are_read_from_the_histogram_as_served() {
        let text = "# TYPE wasp_policy_call_duration_seconds histogram\n\
            wasp_policy_call_duration_seconds_sum{policy=\"fit\",operation=\"filter\"} 0.03\n\
            wasp_policy_call_duration_seconds_count{policy=\"fit\",operation=\"filter\"} 100\n\
            wasp_policy_call_duration_seconds_bucket{le=\"0.00001\",policy=\"fit\",operation=\"filter\"} 0\n\
            wasp_policy_call_duration_seconds_bucket{le=\"0.00004\",policy=\"fit\",operation=\"filter\"} 90\n\
            wasp_policy_call_duration_seconds_bucket{le=\"0.00016\",policy=\"fit\",operation=\"filter\"} 99\n\
            wasp_policy_call_duration_seconds_bucket{le=\"+Inf\",policy=\"fit\",operation=\"filter\"} 100\n";
        assert_eq!(calls_from_metrics(text), [PolicyCalls { policy: "fit".into(), calls: 100, mean_ms: 0.3, p99_ms: 0.16 }]);
    }

    #[test]
    fn the_page_is_self_contained_and_escapes_what_it_quotes() {
        let load = NodeLoad { name: "n-<1>".into(), zone: "-".into(), pods: 2, cpu: 50.0, memory: 10.0 };
        let story =
            Story { scenario: "s".into(), before: vec![load], waiting: vec![("default/p".into(), "0/1 nodes are available: <x>".into())], ..Story::default() };
        let page = page(&story);
        assert!(!page.contains("http://") && !page.contains("https://") && !page.contains(" src="), "no network: {page}");
        assert!(page.contains("n-&lt;1&gt;: 2 pods") && page.contains("available: &lt;x&gt;"), "{page}");
        assert_eq!(page.matches("class=\"mark\"").count(), 2, "one cell, one bar: {page}");
    }

    #[test]
    fn the_first_metric_is_the_first_number() {
        assert_eq!(first_reading("cpu: 120%/50%, qps: 12/10"), Some(120.0));
        assert_eq!(first_reading("cpu: <unknown>/50%"), None);
        assert_eq!(first_reading(""), None);
    }
}
