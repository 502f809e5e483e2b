//! What one dead-host row measured, its table's lines, and the goals stagger's breaker aims at.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use stagger::{StopReason, WhenDown};

use super::{Case, Kind, Line, Scenario};
use crate::server::BUCKET;

/// How one call ended.
pub(super) struct Call {
    /// When it was made, from the start.
    pub(super) at: Duration,
    /// From then to its end.
    pub(super) took: Duration,
    /// Why it ended without its `200`; `None` when it got one.
    pub(super) why: Option<StopReason>,
    /// Whether the row's breaker was tripped when it was made.
    pub(super) tripped: bool,
}

/// The windows of new calls whose success tells the recovery.
const WINDOW: Duration = Duration::from_millis(100);
/// The share of a window's calls that must succeed.
const RECOVERED: f64 = 0.99;

/// What one row measured through one case.
pub(super) struct Figures {
    /// Attempts that reached the host per [`BUCKET`].
    pub(super) arrivals: Vec<u32>,
    /// Of those, the ones that came while it was down.
    pub(super) down_attempts: u64,
    /// When a call first found the breaker tripped, from the outage's start.
    pub(super) trip: Option<Duration>,
    /// Latencies of the calls made while the host was down, sorted.
    down_latencies: Vec<Duration>,
    /// Of those, made once the breaker had tripped, sorted.
    tripped_latencies: Vec<Duration>,
    /// Calls made while the host was down, and those of them that got their `200`.
    down_calls: usize,
    down_ok: usize,
    /// Every call, and those that got their `200`.
    calls: usize,
    ok: usize,
    /// How long after the host's return every [`WINDOW`] of new calls succeeds for [`RECOVERED`] of
    /// them; `None`: not by the end of the run.
    pub(super) recover: Option<Duration>,
    /// The most attempts in one [`BUCKET`] while the host was down, and per [`BUCKET`] on average
    /// over one [`WINDOW`] then.
    pub(super) peak_down: u32,
    pub(super) smoothed_peak_down: f64,
    /// The most new calls made in one [`BUCKET`] while the host was down.
    pub(super) offered_peak_down: u32,
    /// The most attempts in one [`BUCKET`] from the host's return on.
    pub(super) peak_after: u32,
    /// The most attempts per [`BUCKET`] on average over one [`WINDOW`], from the return on.
    pub(super) smoothed_peak_after: f64,
    /// The most new calls made in one [`BUCKET`] from the return on: the peak the offered stream
    /// brings by itself.
    pub(super) offered_peak_after: u32,
    /// The calls made while the host was down that failed, by why.
    pub(super) failures: BTreeMap<String, usize>,
}

impl Figures {
    pub(super) fn new(arrivals: Vec<u32>, calls: &[Call], scenario: &Scenario, case: Case) -> Self {
        let (down_at, back_at) = (scenario.down_at, scenario.back_at(case));
        let bucket = |t: Duration| (t.as_nanos() / BUCKET.as_nanos()) as usize;
        let down_attempts = (arrivals.iter().enumerate())
            .filter(|&(b, _)| (bucket(down_at)..bucket(back_at)).contains(&b))
            .map(|(_, &n)| u64::from(n))
            .sum();
        let down: Vec<&Call> = (calls.iter())
            .filter(|c| (down_at..back_at).contains(&c.at))
            .collect();
        let tripped_at = (down.iter()).filter(|c| c.tripped).map(|c| c.at).min();
        let sorted = |calls: &mut dyn Iterator<Item = &&Call>| {
            let mut latencies: Vec<Duration> = calls.map(|c| c.took).collect();
            latencies.sort_unstable();
            latencies
        };
        let mut failures = BTreeMap::new();
        for why in down.iter().filter_map(|c| c.why) {
            *failures.entry(why.to_string()).or_insert(0) += 1;
        }
        Self {
            down_attempts,
            trip: tripped_at.map(|at| at - down_at),
            down_latencies: sorted(&mut down.iter()),
            tripped_latencies: match tripped_at {
                Some(trip) => sorted(&mut down.iter().filter(|c| c.at >= trip)),
                None => Vec::new(),
            },
            down_calls: down.len(),
            down_ok: down.iter().filter(|c| c.why.is_none()).count(),
            calls: calls.len(),
            ok: calls.iter().filter(|c| c.why.is_none()).count(),
            recover: recovery(calls, back_at, scenario.send_for(case)),
            peak_down: arrivals
                .get(bucket(down_at)..bucket(back_at).min(arrivals.len()))
                .and_then(|down| down.iter().copied().max())
                .unwrap_or(0),
            smoothed_peak_down: smoothed_peak(
                arrivals
                    .get(bucket(down_at)..bucket(back_at).min(arrivals.len()))
                    .unwrap_or_default(),
            ),
            offered_peak_down: offered_peak_within(calls, down_at, back_at),
            peak_after: arrivals
                .iter()
                .skip(bucket(back_at))
                .copied()
                .max()
                .unwrap_or(0),
            smoothed_peak_after: smoothed_peak(&arrivals[bucket(back_at).min(arrivals.len())..]),
            offered_peak_after: offered_peak(calls, back_at),
            failures,
            arrivals,
        }
    }

    /// The share of the calls made while the host was down that got their `200`.
    pub(super) fn ok_down(&self) -> f64 {
        self.down_ok as f64 / self.down_calls.max(1) as f64
    }

    /// The share of every call that got its `200`.
    pub(super) fn ok_all(&self) -> f64 {
        self.ok as f64 / self.calls.max(1) as f64
    }

    /// The nearest-rank percentile of the latencies of the calls made while the host was down.
    pub(super) fn down_latency(&self, percentile: f64) -> Option<Duration> {
        nearest_rank(&self.down_latencies, percentile)
    }

    /// The same, of those made once the breaker had tripped.
    pub(super) fn tripped_latency(&self, percentile: f64) -> Option<Duration> {
        nearest_rank(&self.tripped_latencies, percentile)
    }
}

/// The most attempts per [`BUCKET`] on average over one [`WINDOW`] of `buckets`.
fn smoothed_peak(buckets: &[u32]) -> f64 {
    let per_window = (WINDOW.as_nanos() / BUCKET.as_nanos()) as usize;
    (buckets.chunks(per_window))
        .map(|window| f64::from(window.iter().sum::<u32>()) / per_window as f64)
        .fold(0.0, f64::max)
}

/// The most calls made in one [`BUCKET`] from `from` on.
fn offered_peak(calls: &[Call], from: Duration) -> u32 {
    offered_peak_within(calls, from, Duration::MAX)
}

/// The most calls made in one [`BUCKET`] from `from` until `until`.
fn offered_peak_within(calls: &[Call], from: Duration, until: Duration) -> u32 {
    let mut made = std::collections::HashMap::new();
    for call in calls.iter().filter(|c| c.at >= from && c.at < until) {
        *made
            .entry(call.at.as_nanos() / BUCKET.as_nanos())
            .or_insert(0) += 1;
    }
    made.into_values().max().unwrap_or(0)
}

fn nearest_rank(sorted: &[Duration], percentile: f64) -> Option<Duration> {
    let rank = (percentile / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// How long after `back_at` the calls made in every [`WINDOW`] from then until `end` succeed for
/// at least [`RECOVERED`] of them (a window without calls passes); `None` if the last window fails.
fn recovery(calls: &[Call], back_at: Duration, end: Duration) -> Option<Duration> {
    let windows = ((end.saturating_sub(back_at)).as_nanos()).div_ceil(WINDOW.as_nanos()) as usize;
    let mut made = vec![(0usize, 0usize); windows.max(1)];
    for call in calls.iter().filter(|c| c.at >= back_at && c.at < end) {
        let window = ((call.at - back_at).as_nanos() / WINDOW.as_nanos()) as usize;
        made[window].0 += 1;
        made[window].1 += usize::from(call.why.is_none());
    }
    let failing = |&(calls, ok): &(usize, usize)| (ok as f64) < RECOVERED * calls as f64;
    match made.iter().rposition(failing) {
        None => Some(Duration::ZERO),
        Some(last) if last + 1 == made.len() => None,
        Some(last) => Some(WINDOW * (last as u32 + 1)),
    }
}

/// The table's columns after the row's name: the two lines of their heading, and their width.
const COLUMNS: [(&str, &str, usize); 14] = [
    ("attempts", "while down", 10),
    ("of no", "breaker", 7),
    ("trip", "at s", 6),
    ("p50 ms", "down", 7),
    ("p99 ms", "down", 7),
    ("p50 ms", "tripped", 7),
    ("p99 ms", "tripped", 7),
    ("ok", "down", 6),
    ("ok", "all", 6),
    ("recover", "s", 7),
    ("down peak", "/10ms", 9),
    ("down/10ms", "over 100ms", 10),
    ("peak", "/10ms", 5),
    ("peak/10ms", "over 100ms", 10),
];
const NAME_WIDTH: usize = 26;

/// `d` in milliseconds: a decimal under 10 ms, `-` for none.
pub(super) fn ms(d: Option<Duration>) -> String {
    match d.map(|d| d.as_secs_f64() * 1e3) {
        None => "-".into(),
        Some(ms) if ms < 10.0 => format!("{ms:.1}"),
        Some(ms) => format!("{ms:.0}"),
    }
}

/// `d` in seconds to a tenth, `never` for none.
pub(super) fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "never".into(), |d| format!("{:.1}", d.as_secs_f64()))
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// One case's table: a line per row.
pub(super) fn table(lines: &[&Line<'_>]) -> String {
    let mut top = format!("{:<NAME_WIDTH$}", "row");
    let mut bottom = format!("{:<NAME_WIDTH$}", "");
    for (first, second, width) in COLUMNS {
        let _ = write!(top, " {first:>width$}");
        let _ = write!(bottom, " {second:>width$}");
    }
    let mut text = top.trim_end().to_string() + "\n" + bottom.trim_end() + "\n";
    let none = no_breaker(lines).map(|l| l.figures.down_attempts);
    for line in lines {
        let f = &line.figures;
        let share = none.filter(|&n| n > 0).map_or_else(
            || "-".into(),
            |n| percent(f.down_attempts as f64 / n as f64),
        );
        let cells = [
            f.down_attempts.to_string(),
            share,
            f.trip
                .map_or_else(|| "-".into(), |t| format!("{:.2}", t.as_secs_f64())),
            ms(f.down_latency(50.0)),
            ms(f.down_latency(99.0)),
            ms(f.tripped_latency(50.0)),
            ms(f.tripped_latency(99.0)),
            percent(f.ok_down()),
            percent(f.ok_all()),
            secs(f.recover),
            f.peak_down.to_string(),
            format!("{:.1}", f.smoothed_peak_down),
            f.peak_after.to_string(),
            format!("{:.1}", f.smoothed_peak_after),
        ];
        let mut row = format!("{:<NAME_WIDTH$}", line.row.name);
        for (cell, (_, _, width)) in cells.iter().zip(COLUMNS) {
            let _ = write!(row, " {cell:>width$}");
        }
        text += &row;
        text += "\n";
    }
    if let Some(first) = lines.first() {
        let _ = writeln!(
            text,
            "\nThe new calls alone: at most {} in 10 ms while the host was down, {} after its return.",
            first.figures.offered_peak_down, first.figures.offered_peak_after
        );
    }
    text += "Calls made while the host was down that failed, by why:\n";
    for line in lines {
        let why: Vec<String> = (line.figures.failures.iter())
            .map(|(why, n)| format!("{n} {why}"))
            .collect();
        let why = if why.is_empty() {
            "none".into()
        } else {
            why.join(", ")
        };
        let _ = writeln!(text, "  {:<NAME_WIDTH$} {why}", line.row.name);
    }
    text
}

fn no_breaker<'a, 'b>(lines: &'a [&'b Line<'b>]) -> Option<&'a Line<'b>> {
    (lines.iter().copied()).find(|l| matches!(l.row.kind, Kind::Stagger(None)))
}

/// The rows of stagger's breaker, and whether each holds.
fn breakers<'a, 'b>(lines: &'a [&'b Line<'b>]) -> Vec<(&'a Line<'b>, WhenDown)> {
    (lines.iter().copied())
        .filter_map(|l| match l.row.kind {
            Kind::Stagger(Some(breaker)) => Some((l, breaker.when_down())),
            _ => None,
        })
        .collect()
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT MET" }
}

/// The goals stagger's breaker aims at in `case`, each met or not, with the figures.
pub(super) fn goals(case: Case, lines: &[&Line<'_>], scenario: &Scenario) -> String {
    let mut text = String::from("\n");
    let Some(none) = no_breaker(lines) else {
        return text;
    };
    let offered = (scenario.rate * BUCKET.as_secs_f64()).round() as u32;
    let peers: Vec<&Line> = (lines.iter().copied())
        .filter(|l| !matches!(l.row.kind, Kind::Stagger(_)))
        .collect();
    for (line, when_down) in breakers(lines) {
        let f = &line.figures;
        let mut goals: Vec<(String, bool)> = Vec::new();
        if case == Case::Restarts {
            goals.push((
                format!("every call succeeds ({})", percent(f.ok_all())),
                f.ok == f.calls,
            ));
            goals.push((
                format!(
                    "fewer attempts while down than no breaker ({} vs {})",
                    f.down_attempts, none.figures.down_attempts
                ),
                f.down_attempts < none.figures.down_attempts,
            ));
            let (p50, none_p50) = (f.down_latency(50.0), none.figures.down_latency(50.0));
            goals.push((
                format!(
                    "p50 no longer than no breaker's ({} vs {} ms)",
                    ms(p50),
                    ms(none_p50)
                ),
                p50 <= none_p50,
            ));
        } else {
            let limit = none.figures.down_attempts / 100;
            goals.push((
                format!(
                    "attempts while down <= 1 % of no breaker's ({} <= {limit})",
                    f.down_attempts
                ),
                f.down_attempts <= limit,
            ));
            if when_down == WhenDown::FailFast {
                let (p50, p99) = (f.tripped_latency(50.0), f.tripped_latency(99.0));
                let within = |d: Option<Duration>, limit: u64| {
                    d.is_some_and(|d| d <= Duration::from_millis(limit))
                };
                goals.push((
                    format!("after the trip p50 <= 1 ms ({} ms)", ms(p50)),
                    within(p50, 1),
                ));
                goals.push((
                    format!("after the trip p99 <= 10 ms ({} ms)", ms(p99)),
                    within(p99, 10),
                ));
            }
        }
        goals.push((
            format!(
                "99 % of new calls succeed within 1 s of the return ({} s)",
                secs(f.recover)
            ),
            f.recover.is_some_and(|r| r <= Duration::from_secs(1)),
        ));
        goals.push((
            format!(
                "peak per 10 ms after the return <= 2x offered, over 100 ms ({:.1} <= {}; \
                 in one 10 ms {}, the new calls alone {})",
                f.smoothed_peak_after,
                2 * offered,
                f.peak_after,
                f.offered_peak_after,
            ),
            f.smoothed_peak_after <= f64::from(2 * offered),
        ));
        let p99 = f.down_latency(99.0);
        let behind: Vec<&str> = (peers.iter())
            .filter(|p| {
                !(f.down_attempts < p.figures.down_attempts && p99 <= p.figures.down_latency(99.0))
            })
            .map(|p| p.row.name)
            .collect();
        goals.push((
            format!(
                "fewer attempts while down than every peer, at an equal or lower p99{}",
                list(&behind)
            ),
            behind.is_empty(),
        ));
        // A peer whose breaker never tripped kept sending: it has nothing to recover from.
        let recover = |l: &Line| l.figures.recover.unwrap_or(Duration::MAX);
        let slower: Vec<&str> = (peers.iter())
            .filter(|p| p.figures.trip.is_some() && recover(line) > recover(p))
            .map(|p| p.row.name)
            .collect();
        goals.push((
            format!(
                "recovers no later than every peer whose breaker tripped{}",
                list(&slower)
            ),
            slower.is_empty(),
        ));
        let _ = writeln!(text, "{}:", line.row.name);
        for (goal, met) in goals {
            let _ = writeln!(text, "  {goal}: {}", verdict(met));
        }
    }
    text
}

/// `names` as `" (not: a, b)"`, or nothing.
fn list(names: &[&str]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(" (not: {})", names.join(", "))
    }
}
