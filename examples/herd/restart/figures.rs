//! What one restart row measured, the table's lines and the goal's verdict.

use std::fmt::Write;
use std::time::Duration;

use super::{Kind, LOSS, PEAK_GOAL, Row, UP_GOAL, back_at};
use crate::server::BUCKET;

/// What one row's workers did through the outage.
pub(crate) struct Figures {
    kind: Kind,
    /// Connection attempts per [`BUCKET`] since the start, as the database saw them.
    pub(super) attempts: Vec<u32>,
    /// When each worker that got back was connected again, from the loss, sorted.
    pub(super) back: Vec<Duration>,
    workers: usize,
    /// task-supervisor's workers that its default restart limit would have declared dead.
    over_limit: usize,
}

impl Figures {
    /// The figures of a row of `kind` whose database saw `attempts` per [`BUCKET`], whose workers were
    /// back at `ups` from the start (`None` if never).
    pub(super) fn new(
        kind: Kind,
        attempts: Vec<u32>,
        ups: &[Option<Duration>],
        over_limit: usize,
    ) -> Self {
        let mut back: Vec<_> = ups.iter().flatten().map(|&up| up - LOSS).collect();
        back.sort_unstable();
        Self {
            kind,
            attempts,
            back,
            workers: ups.len(),
            over_limit,
        }
    }

    /// The bucket `at` falls in.
    fn bucket(at: Duration) -> usize {
        (at.as_nanos() / BUCKET.as_nanos()) as usize
    }

    /// Connection attempts from the loss on.
    pub(super) fn attempts_after_loss(&self) -> u64 {
        let from = Self::bucket(LOSS);
        self.attempts.iter().skip(from).map(|&n| u64::from(n)).sum()
    }

    /// The most connection attempts in one [`BUCKET`] once the database is back.
    pub(super) fn peak_when_back(&self) -> u32 {
        let from = Self::bucket(back_at());
        self.attempts.iter().skip(from).copied().max().unwrap_or(0)
    }

    /// The workers of the row.
    pub(super) fn workers(&self) -> usize {
        self.workers
    }

    /// Workers never back.
    fn not_back(&self) -> usize {
        self.workers - self.back.len()
    }

    /// The nearest-rank percentile of the times the workers were back, from the loss; `None` unless
    /// every worker got back.
    pub(super) fn back_by(&self, percentile: f64) -> Option<Duration> {
        if self.not_back() > 0 || self.back.is_empty() {
            return None;
        }
        let rank = (percentile / 100.0 * self.back.len() as f64).ceil() as usize;
        Some(self.back[rank.clamp(1, self.back.len()) - 1])
    }

    /// When the last worker was back, from the loss.
    pub(super) fn all_back(&self) -> Option<Duration> {
        self.back_by(100.0)
    }
}

/// The table's columns after the row's name: the two lines of their heading, and their width.
const COLUMNS: [(&str, &str, usize); 7] = [
    ("attempts", "from loss", 9),
    ("peak/10ms", "when back", 9),
    ("back p50", "s", 8),
    ("back p99", "s", 8),
    ("all back", "s", 8),
    ("not", "back", 4),
    ("over its", "limit", 8),
];
const NAME_WIDTH: usize = 28;

fn header() -> String {
    let mut top = format!("{:<NAME_WIDTH$}", "schedule");
    let mut bottom = format!("{:<NAME_WIDTH$}", "");
    for (first, second, width) in COLUMNS {
        let _ = write!(top, " {first:>width$}");
        let _ = write!(bottom, " {second:>width$}");
    }
    top.trim_end().to_string() + "\n" + bottom.trim_end() + "\n"
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{:.1}", d.as_secs_f64()))
}

fn row((row, f): &(&Row, Figures)) -> String {
    let over_limit = match f.kind {
        super::Kind::Peer(super::Peer::TaskSupervisor) => f.over_limit.to_string(),
        _ => "-".into(),
    };
    format!(
        "{:<NAME_WIDTH$} {:>9} {:>9} {:>8} {:>8} {:>8} {:>4} {:>8}\n",
        row.name,
        f.attempts_after_loss(),
        f.peak_when_back(),
        seconds(f.back_by(50.0)),
        seconds(f.back_by(99.0)),
        seconds(f.all_back()),
        f.not_back(),
        over_limit,
    )
}

/// The table, then how stagger's defaults compare with the schedules without jitter.
pub(crate) fn table(lines: &[(&Row, Figures)]) -> String {
    let mut text = header();
    for line in lines {
        text += &row(line);
    }
    if let Some((_, peer)) = (lines.iter())
        .find(|(_, f)| matches!(f.kind, super::Kind::Peer(super::Peer::TaskSupervisor)))
    {
        let _ = writeln!(
            text,
            "\ntask-supervisor's default limit, more than 5 restarts within 60 s, would have declared \
             {} of its {} workers dead; the row restarts them, as with_unlimited_restarts() does.",
            peer.over_limit, peer.workers,
        );
    }
    let unjittered: Vec<_> = lines.iter().filter(|(_, f)| !f.kind.jittered()).collect();
    for (row, ours) in lines
        .iter()
        .filter(|(_, f)| f.kind == super::Kind::StaggerDefaults)
    {
        let _ = write!(text, "\n{}:", row.name);
        for (peer, theirs) in &unjittered {
            let peak = f64::from(ours.peak_when_back()) / f64::from(theirs.peak_when_back().max(1));
            let _ = write!(
                text,
                "\n  against {}: peak per 10 ms {} vs {} = {peak:.3}× (goal <= {PEAK_GOAL}×: {})",
                peer.name,
                ours.peak_when_back(),
                theirs.peak_when_back(),
                verdict(peak <= PEAK_GOAL),
            );
            match (ours.all_back(), theirs.all_back()) {
                (Some(ours), Some(theirs)) => {
                    let up = ours.as_secs_f64() / theirs.as_secs_f64();
                    let _ = write!(
                        text,
                        "; all back {:.1} s vs {:.1} s after the loss = {up:.2}× (goal <= {UP_GOAL}×: {})",
                        ours.as_secs_f64(),
                        theirs.as_secs_f64(),
                        verdict(up <= UP_GOAL),
                    );
                }
                _ => text += "; not every worker got back: no time to compare",
            }
        }
        text += "\n";
    }
    text
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}
