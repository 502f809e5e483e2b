//! What one rate-limit row measured, and its lines of the table.

use std::collections::BTreeMap;
use std::time::Duration;

use http::StatusCode;
use stagger::RetryInfo;

use super::{SEND_FOR, SLOT};
use crate::peers::Ended;

/// What a server answered, counted per [`SLOT`] since the start.
#[derive(Default)]
pub(super) struct Answers {
    /// `200`s per slot.
    served: Vec<u32>,
    /// `429`s per slot.
    refused: Vec<u32>,
}

impl Answers {
    /// Counts an answer sent `now`: a `200` if `served`, else a `429`.
    pub(super) fn count(&mut self, now: Duration, served: bool) {
        let slot = (now.as_nanos() / SLOT.as_nanos()) as usize;
        if self.served.len() <= slot {
            self.served.resize(slot + 1, 0);
            self.refused.resize(slot + 1, 0);
        }
        let counts = if served {
            &mut self.served
        } else {
            &mut self.refused
        };
        counts[slot] += 1;
    }
}

/// How one call ended, and when.
pub(super) struct Call {
    /// Time from the caller's send to the call's final response (or error).
    pub(super) took: Duration,
    /// Time from t = 0 to then.
    pub(super) ended: Duration,
    pub(super) outcome: Outcome,
}

/// How one call ended, as its client tells.
pub(super) struct Outcome {
    /// Whether it ended with a `200`.
    ok: bool,
    /// Attempts the server saw.
    pub(super) attempts: u32,
    /// Time the first attempt waited for the host's pause.
    held: Duration,
    /// Why a call that failed stopped.
    why: Option<String>,
}

impl Outcome {
    /// A call through stagger that ended with a response of `status`, or with an error (`None`).
    pub(super) fn stagger(status: Option<StatusCode>, info: RetryInfo) -> Self {
        let ok = status == Some(StatusCode::OK);
        let why = || {
            info.stop_reason()
                .map_or("unknown".into(), |r| r.to_string())
        };
        Self {
            ok,
            attempts: info.attempts(),
            held: info.cooldown(),
            why: (!ok).then(why),
        }
    }

    pub(super) fn reqwest_retry(ended: &Ended) -> Self {
        Self {
            ok: ended.status == Some(StatusCode::OK),
            attempts: ended.attempts,
            held: Duration::ZERO,
            why: ended.why.map(str::to_string),
        }
    }
}

/// What one row measured.
pub(super) struct Figures {
    /// `200`s per `SLOT`, as the server sent them.
    pub(super) served: Vec<u32>,
    /// `429`s per `SLOT`.
    pub(super) refused: Vec<u32>,
    /// Calls made.
    offered: usize,
    /// Time from each successful call's send to its `200`, sorted.
    latencies: Vec<Duration>,
    /// Calls that did not end with a `200`, by why they stopped.
    failures: BTreeMap<String, usize>,
    /// Calls whose first attempt waited for a host's pause, and how long in all.
    held: (usize, Duration),
    /// When the last call ended.
    pub(super) last: Duration,
}

impl Figures {
    pub(super) fn new(answers: Answers, calls: &[Call]) -> Self {
        let Answers { served, refused } = answers;
        let successes = calls.iter().filter(|c| c.outcome.ok);
        let mut latencies: Vec<_> = successes.map(|c| c.took).collect();
        latencies.sort_unstable();
        let outcomes = || calls.iter().map(|c| &c.outcome);
        let mut failures = BTreeMap::new();
        for why in outcomes().filter_map(|o| o.why.clone()) {
            *failures.entry(why).or_insert(0) += 1;
        }
        let held = outcomes().filter(|o| !o.held.is_zero());
        Self {
            served,
            refused,
            offered: calls.len(),
            latencies,
            failures,
            held: (held.clone().count(), held.map(|o| o.held).sum()),
            last: calls.iter().map(|c| c.ended).max().unwrap_or_default(),
        }
    }

    pub(super) fn attempts(&self) -> u64 {
        self.served
            .iter()
            .chain(&self.refused)
            .map(|&n| u64::from(n))
            .sum()
    }

    fn refusals(&self) -> u64 {
        self.refused.iter().map(|&n| u64::from(n)).sum()
    }

    /// `200`s per second while the callers send.
    fn goodput(&self) -> f64 {
        let slots = (SEND_FOR.as_nanos() / SLOT.as_nanos()) as usize;
        let served: u64 = self.served.iter().take(slots).map(|&n| u64::from(n)).sum();
        served as f64 / SEND_FOR.as_secs_f64()
    }

    fn failed(&self) -> usize {
        self.failures.values().sum()
    }

    /// The nearest-rank percentile of the successful calls' latencies; zero without any.
    fn latency(&self, percentile: f64) -> Duration {
        let rank = (percentile / 100.0 * self.latencies.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies.len().max(1)) - 1;
        self.latencies.get(index).copied().unwrap_or_default()
    }
}

/// The table of one server's rows: the header, a line per row, a blank line, and a note per row that
/// failed calls or held them.
pub(super) fn table(rows: &[(&str, &Figures)], quota: f64) -> String {
    let mut text = header();
    for (name, figures) in rows {
        text += &row(name, figures, quota);
    }
    text + "\n" + &notes(rows)
}

fn header() -> String {
    let columns = [
        "offered", "attempts", "429s", "200/s", "of quota", "p50 ms", "p99 ms",
    ];
    let [offered, attempts, refusals, goodput, share, p50, p99] = columns;
    format!(
        "{:<30} {offered:>7} {attempts:>8} {refusals:>7} {goodput:>6} {share:>8} {p50:>7} {p99:>7} \
         {:>7} {:>10}\n",
        "row", "failed", "tries/call"
    )
}

fn row(name: &str, figures: &Figures, quota: f64) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let goodput = figures.goodput();
    format!(
        "{:<30} {:>7} {:>8} {:>7} {:>6.0} {:>7.0}% {:>7.0} {:>7.0} {:>7} {:>10.2}\n",
        name,
        figures.offered,
        figures.attempts(),
        figures.refusals(),
        goodput,
        goodput / quota * 100.0,
        ms(figures.latency(50.0)),
        ms(figures.latency(99.0)),
        figures.failed(),
        figures.attempts() as f64 / figures.offered as f64,
    )
}

/// Why the failed calls stopped, and how long the calls a host's pause held waited.
fn notes(rows: &[(&str, &Figures)]) -> String {
    let mut text = String::new();
    for (name, figures) in rows {
        let mut notes = Vec::new();
        if figures.failed() > 0 {
            let reasons: Vec<String> = (figures.failures.iter())
                .map(|(why, n)| format!("{n} {why}"))
                .collect();
            notes.push(format!("failed: {}", reasons.join(", ")));
        }
        let (held, waited) = figures.held;
        if held > 0 {
            let mean = waited.as_secs_f64() * 1e3 / held as f64;
            notes.push(format!(
                "{held} calls held by the cooldown before their first attempt, {mean:.0} ms on average"
            ));
        }
        if !notes.is_empty() {
            text += &format!("{name}: {}\n", notes.join("; "));
        }
    }
    text
}
