//! What one outages row measured, and the table's lines.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use super::{GOAL, Kind, Line, seconds};
use crate::server::BUCKET;

/// How one call ended.
pub(super) struct Call {
    /// Time from the request's send to its final answer.
    pub(super) took: Duration,
    /// Whether it got its `200`.
    pub(super) ok: bool,
    pub(super) attempts: u32,
    /// Whether its first attempt got a `502`.
    pub(super) met_outage: bool,
    /// Why it stopped without a `200`.
    pub(super) why: Option<String>,
}

/// What one row measured through one outage.
pub(super) struct Figures {
    /// Every request made.
    requests: usize,
    /// The requests whose first attempt got a `502`.
    pub(super) met: usize,
    /// Of those, the ones that ended with a `200`.
    recovered: usize,
    /// Their attempts, as the clients tell.
    met_attempts: u64,
    /// The most attempts one of them made.
    most_attempts: u32,
    /// Those that did not get their `200`, by why they stopped.
    failures: BTreeMap<String, usize>,
    /// Time from the send of each of them that got its `200` to that `200`, sorted.
    latencies: Vec<Duration>,
    /// The most attempts the proxy got in one [`BUCKET`] once the backend was back.
    peak_after: u32,
    /// Every attempt the proxy got, which is every attempt the clients tell.
    attempts: u64,
}

impl Figures {
    /// The figures of a run whose proxy saw `seen` attempts per [`BUCKET`] and whose backend was back
    /// at `back_at`; checks that the clients report every attempt the proxy saw.
    pub(super) fn new(seen: Vec<u32>, back_at: Duration, calls: &[Call]) -> Self {
        let attempts: u64 = seen.iter().map(|&n| u64::from(n)).sum();
        let reported: u64 = calls.iter().map(|c| u64::from(c.attempts)).sum();
        assert_eq!(
            reported, attempts,
            "the clients report every attempt the proxy saw"
        );
        let met: Vec<&Call> = calls.iter().filter(|c| c.met_outage).collect();
        let mut latencies: Vec<_> = (met.iter()).filter(|c| c.ok).map(|c| c.took).collect();
        latencies.sort_unstable();
        let first = (back_at.as_nanos() / BUCKET.as_nanos()) as usize;
        let mut failures = BTreeMap::new();
        for why in met.iter().filter_map(|c| c.why.clone()) {
            *failures.entry(why).or_insert(0) += 1;
        }
        Self {
            requests: calls.len(),
            met: met.len(),
            recovered: latencies.len(),
            met_attempts: met.iter().map(|c| u64::from(c.attempts)).sum(),
            most_attempts: met.iter().map(|c| c.attempts).max().unwrap_or(0),
            failures,
            latencies,
            peak_after: seen.iter().skip(first).copied().max().unwrap_or(0),
            attempts,
        }
    }

    /// The attempts of the requests that met the outage, per request; `None` without any.
    pub(super) fn attempts_per_request(&self) -> Option<f64> {
        (self.met > 0).then(|| self.met_attempts as f64 / self.met as f64)
    }

    /// The share of the requests that met the outage and got their `200`; `None` without any.
    pub(super) fn success(&self) -> Option<f64> {
        (self.met > 0).then(|| self.recovered as f64 / self.met as f64)
    }

    /// The nearest-rank percentile of the latencies of the requests that met the outage and got
    /// their `200`; `None` without any.
    fn latency(&self, percentile: f64) -> Option<Duration> {
        let rank = (percentile / 100.0 * self.latencies.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies.len().max(1)) - 1;
        self.latencies.get(index).copied()
    }
}

/// The table's columns after the outage and the row's name: the two lines of their heading, and their
/// width.
const COLUMNS: [(&str, &str, usize); 7] = [
    ("met", "outage", 6),
    ("success", "", 7),
    ("tries", "/request", 8),
    ("p50 ms", "of 200s", 7),
    ("p99 ms", "of 200s", 7),
    ("most", "tries", 5),
    ("peak/10ms", "when back", 9),
];
const OUTAGE_WIDTH: usize = 6;
const NAME_WIDTH: usize = 28;

fn header() -> String {
    let mut top = format!("{:<OUTAGE_WIDTH$} {:<NAME_WIDTH$}", "outage", "client");
    let mut bottom = format!("{:<OUTAGE_WIDTH$} {:<NAME_WIDTH$}", "", "");
    for (first, second, width) in COLUMNS {
        let _ = write!(top, " {first:>width$}");
        let _ = write!(bottom, " {second:>width$}");
    }
    top.trim_end().to_string() + "\n" + bottom.trim_end() + "\n"
}

fn row(line: &Line<'_>) -> String {
    let f = &line.figures;
    let ms = |d: Option<Duration>| {
        d.map_or_else(|| "-".into(), |d| format!("{:.0}", d.as_secs_f64() * 1e3))
    };
    let success = f
        .success()
        .map_or_else(|| "-".into(), |s| format!("{:.1}%", s * 100.0));
    let tries = (f.attempts_per_request()).map_or_else(|| "-".into(), |t| format!("{t:.2}"));
    format!(
        "{:<OUTAGE_WIDTH$} {:<NAME_WIDTH$} {:>6} {:>7} {:>8} {:>7} {:>7} {:>5} {:>9}\n",
        seconds(line.outage),
        line.row.name,
        f.met,
        success,
        tries,
        ms(f.latency(50.0)),
        ms(f.latency(99.0)),
        f.most_attempts,
        f.peak_after,
    )
}

/// The table, a blank line between outages, then the check of every row and whether stagger's
/// defaults reached the goal after each outage.
pub(super) fn table(lines: &[Line<'_>]) -> String {
    let mut text = header();
    for (i, line) in lines.iter().enumerate() {
        if i > 0 && lines[i - 1].outage != line.outage {
            text += "\n";
        }
        text += &row(line);
    }
    let attempts: u64 = lines.iter().map(|l| l.figures.attempts).sum();
    let _ = writeln!(
        text,
        "\nEvery row: the attempts the proxy saw = the attempts the clients report ({attempts} in all)."
    );
    for line in lines
        .iter()
        .filter(|l| matches!(l.row.kind, Kind::StaggerDefaults))
    {
        let f = &line.figures;
        let _ = write!(text, "{} outage: {}", seconds(line.outage), line.row.name);
        let Some(success) = f.success() else {
            let _ = writeln!(text, ": no request met it");
            continue;
        };
        let verdict = if success >= GOAL { "reached" } else { "under" };
        let _ = write!(
            text,
            " got a 200 for {:.1} % of the {} requests that met it (of {}): {verdict} {:.0} %",
            success * 100.0,
            f.met,
            f.requests,
            GOAL * 100.0,
        );
        let failures: Vec<String> = (f.failures.iter())
            .map(|(why, n)| format!("{n} {why}"))
            .collect();
        if !failures.is_empty() {
            let _ = write!(text, "; failed: {}", failures.join(", "));
        }
        text += "\n";
    }
    text
}
