//! What one tail row measured, and the table's lines.

use std::fmt::Write;
use std::time::Duration;

use super::SEND_FOR;
use super::server::Counts;

/// What one row measured.
pub(crate) struct Figures {
    /// The delay the row hedged after, if it hedged.
    pub(super) hedge_after: Option<Duration>,
    /// Time from each call's start to its final response, sorted.
    pub(super) latencies: Vec<Duration>,
    /// Calls whose final response is not a `200`, or an error.
    pub(super) failed: usize,
    /// Attempts and hedges, as the calls' `RetryInfo`s tell.
    pub(super) attempts: u64,
    pub(super) hedges: u64,
    /// What the server and the network saw.
    pub(super) counts: Counts,
    pub(super) workers: usize,
    /// The service time of every attempt served.
    pub(super) work: Duration,
    /// Attempts that waited for a worker.
    pub(super) queued: u64,
}

impl Figures {
    pub(super) fn requests(&self) -> usize {
        self.latencies.len()
    }

    /// The nearest-rank percentile of the calls' latencies.
    pub(super) fn latency(&self, percentile: f64) -> Duration {
        let rank = (percentile / 100.0 * self.latencies.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies.len().max(1)) - 1;
        self.latencies.get(index).copied().unwrap_or_default()
    }

    /// Attempts the server got per request, minus one.
    pub(super) fn extra_load(&self) -> f64 {
        self.counts.served as f64 / self.requests().max(1) as f64 - 1.0
    }

    /// The server's work over what its workers can do while the requests come.
    pub(super) fn busy(&self) -> f64 {
        self.work.as_secs_f64() / (self.workers as f64 * SEND_FOR.as_secs_f64())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The table's columns after the row's name: the two lines of their heading, and their width.
const COLUMNS: [(&str, &str, usize); 12] = [
    ("hedge", "after", 6),
    ("p50", "ms", 6),
    ("p99", "ms", 6),
    ("p99.9", "ms", 7),
    ("max", "ms", 6),
    ("extra", "load", 6),
    ("hedges", "", 6),
    ("hedge", "won", 6),
    ("slow", "", 5),
    ("slow", "cancelled", 9),
    ("busy", "", 5),
    ("queued", "", 6),
];

pub(super) fn header() -> String {
    let mut top = format!("{:<28}", "row");
    let mut bottom = format!("{:<28}", "");
    for (first, second, width) in COLUMNS {
        let _ = write!(top, " {first:>width$}");
        let _ = write!(bottom, " {second:>width$}");
    }
    top.trim_end().to_string() + "\n" + bottom.trim_end() + "\n"
}

pub(super) fn row(name: &str, figures: &Figures) -> String {
    let hedge_after = figures
        .hedge_after
        .map_or_else(|| "-".into(), |d| format!("{:.0} ms", ms(d)));
    format!(
        "{:<28} {:>6} {:>6.0} {:>6.0} {:>7.0} {:>6.0} {:>5.1}% {:>6} {:>6} {:>5} {:>9} {:>4.0}% {:>6}\n",
        name,
        hedge_after,
        ms(figures.latency(50.0)),
        ms(figures.latency(99.0)),
        ms(figures.latency(99.9)),
        ms(figures.latency(100.0)),
        figures.extra_load() * 100.0,
        figures.hedges,
        figures.counts.hedges_won,
        figures.counts.slow,
        figures.counts.slow_cancelled,
        figures.busy() * 100.0,
        figures.queued,
    )
}

/// The checks every row should pass, and the side by side with the paper: its anchor, then the
/// ample server's rows that hedge against its row without hedging.
pub(super) fn notes(rows: &[(&str, Figures)]) -> String {
    let mut text = String::from("\n");
    for (name, f) in rows {
        let mut odd = Vec::new();
        if f.counts.served != f.attempts || f.counts.sent != f.attempts {
            odd.push(format!(
                "the server got {} attempts, the clients' services sent {}, their RetryInfo counts {}",
                f.counts.served, f.counts.sent, f.attempts
            ));
        }
        if f.attempts != f.requests() as u64 + f.hedges {
            odd.push(format!(
                "{} attempts for {} requests and {} hedges",
                f.attempts,
                f.requests(),
                f.hedges
            ));
        }
        // Each race has one loser, the first attempt or the hedge.
        if f.counts.cancelled != f.hedges {
            odd.push(format!(
                "{} hedges and {} attempts cancelled",
                f.hedges, f.counts.cancelled
            ));
        }
        if f.failed > 0 {
            odd.push(format!("{} calls failed", f.failed));
        }
        if !odd.is_empty() {
            let _ = writeln!(text, "{name}: {}", odd.join("; "));
        }
    }
    if text.len() == 1 {
        text += "Every row: attempts served = sent = counted by RetryInfo = requests + hedges; every \
                 race cancelled one attempt, its loser; no call failed.\n";
    }
    let _ = writeln!(
        text,
        "The Tail at Scale (Dean & Barroso 2013), a hedge after 10 ms: p99.9 1800 ms -> 74 ms, +2 % requests."
    );
    // The ample server's rows: the first without hedging, the others with.
    let mut ample = rows.iter().filter(|(name, _)| !name.starts_with("busy"));
    let Some((_, base)) = ample.next() else {
        return text;
    };
    for (name, f) in ample {
        let _ = writeln!(
            text,
            "Here, {name}: p99.9 {:.0} ms -> {:.0} ms, {:+.1} % requests.",
            ms(base.latency(99.9)),
            ms(f.latency(99.9)),
            f.extra_load() * 100.0,
        );
    }
    text
}
