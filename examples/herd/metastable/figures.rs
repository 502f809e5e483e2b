//! What one metastable row measured, and its line of the table.

use std::fmt::Write;
use std::time::Duration;

use super::{SEND_FOR, SLOT, TRIGGER};

/// How one call ended.
pub(super) struct Call {
    /// Time from the call's start to its end.
    pub(super) took: Duration,
    /// Whether it got its `200`.
    pub(super) ok: bool,
    pub(super) attempts: u32,
}

/// Counts per [`SLOT`], from the server and the network.
pub(super) struct Slots {
    /// Attempts that reached the server.
    pub(super) arrivals: Vec<u32>,
    /// Answers that reached a client still waiting for them.
    pub(super) useful: Vec<u32>,
    /// Answers that reached a client who had given up on them: the server's wasted work.
    pub(super) wasted: Vec<u32>,
}

/// What one row measured.
pub(crate) struct Figures {
    pub(super) slots: Slots,
    calls: usize,
    failed: usize,
    /// Attempts the clients made, as they tell.
    attempts: u64,
    /// Time from each successful call's start to its `200`, sorted.
    latencies: Vec<Duration>,
    /// The most calls waiting at once.
    pub(crate) peak_waiting: usize,
}

/// Slots per second.
fn per_second() -> usize {
    (Duration::from_secs(1).as_nanos() / SLOT.as_nanos()) as usize
}

fn slot_of(t: Duration) -> usize {
    (t.as_nanos() / SLOT.as_nanos()) as usize
}

/// The sum of `counts` over the slots `from..to`.
fn sum(counts: &[u32], from: usize, to: usize) -> u64 {
    let to = to.min(counts.len());
    counts
        .get(from..to)
        .map_or(0, |c| c.iter().map(|&n| u64::from(n)).sum())
}

impl Figures {
    pub(super) fn new(slots: Slots, calls: &[Call], peak_waiting: usize) -> Self {
        let mut latencies: Vec<_> = calls.iter().filter(|c| c.ok).map(|c| c.took).collect();
        latencies.sort_unstable();
        Self {
            slots,
            calls: calls.len(),
            failed: calls.iter().filter(|c| !c.ok).count(),
            attempts: calls.iter().map(|c| u64::from(c.attempts)).sum(),
            latencies,
            peak_waiting,
        }
    }

    /// The most attempts the server got in one whole second between `from` and `to`, per second.
    fn peak_load(&self, from: Duration, to: Duration) -> u64 {
        let second = per_second();
        (slot_of(from)..slot_of(to))
            .step_by(second)
            .map(|s| sum(&self.slots.arrivals, s, s + second))
            .max()
            .unwrap_or(0)
    }

    /// Useful answers per second between `from` and `to`.
    fn goodput(&self, from: Duration, to: Duration) -> f64 {
        sum(&self.slots.useful, slot_of(from), slot_of(to)) as f64 / (to - from).as_secs_f64()
    }

    /// How long after the trigger the goodput came back to 90 % of `offered` and stayed there for 2 s:
    /// the first time `t`, in steps of 250 ms, such that every second-long window from `t` to
    /// `t + 1 s` had that goodput. `None` if that never happened while new requests came.
    pub(super) fn recovery(&self, offered: f64) -> Option<Duration> {
        let step = Duration::from_millis(250);
        let second = Duration::from_secs(1);
        let good = |from: Duration| self.goodput(from, from + second) >= 0.9 * offered;
        let mut t = TRIGGER.1;
        while t + 2 * second <= SEND_FOR {
            if (0..=4).all(|k| good(t + step * k)) {
                return Some(t - TRIGGER.1);
            }
            t += step;
        }
        None
    }

    /// The nearest-rank percentile of the successful calls' latencies; zero without any.
    fn latency(&self, percentile: f64) -> Duration {
        let rank = (percentile / 100.0 * self.latencies.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies.len().max(1)) - 1;
        self.latencies.get(index).copied().unwrap_or_default()
    }

    fn wasted_share(&self) -> f64 {
        let wasted = sum(&self.slots.wasted, 0, usize::MAX) as f64;
        let useful = sum(&self.slots.useful, 0, usize::MAX) as f64;
        wasted / (wasted + useful).max(1.0)
    }
}

/// The table's lines, for an offered rate.
pub(super) struct Table {
    offered: f64,
}

impl Table {
    pub(super) fn new(offered: f64) -> Self {
        Self { offered }
    }

    pub(super) fn header(&self) -> String {
        format!(
            "{:<30} {:>8} {:>6} {:>6} {:>7} {:>8} {:>8} {:>9} {:>7} {:>6} {:>6}\n",
            "row",
            "attempts",
            "tries",
            "peak",
            "trigger",
            "good in",
            "good",
            "recovered",
            "p99 ms",
            "failed",
            "wasted"
        ) + &format!(
            "{:<30} {:>8} {:>6} {:>6} {:>7} {:>8} {:>8} {:>9} {:>7} {:>6} {:>6}\n",
            "", "", "/call", "load", "load", "trigger", "after/s", "after", "", "", ""
        )
    }

    pub(super) fn row(&self, name: &str, figures: &Figures) -> String {
        let load = |from, to| figures.peak_load(from, to) as f64 / self.offered;
        let recovered = match figures.recovery(self.offered) {
            Some(after) => format!("{:.2} s", after.as_secs_f64()),
            None => "never".into(),
        };
        format!(
            "{:<30} {:>8} {:>6.2} {:>5.2}x {:>6.2}x {:>6.0}/s {:>6.0}/s {:>9} {:>7.0} {:>6} {:>5.0}%\n",
            name,
            figures.attempts,
            figures.attempts as f64 / figures.calls.max(1) as f64,
            load(Duration::ZERO, SEND_FOR),
            load(TRIGGER.0, TRIGGER.1),
            figures.goodput(TRIGGER.0, TRIGGER.1),
            figures.goodput(TRIGGER.1, SEND_FOR),
            recovered,
            figures.latency(99.0).as_secs_f64() * 1e3,
            figures.failed,
            figures.wasted_share() * 100.0,
        )
    }

    /// The goals, measured for stagger's defaults: back within 2 s of the trigger's end, with at most
    /// 1.2 times the offered load during it.
    pub(super) fn notes(&self, rows: &[(&str, Figures)]) -> String {
        let mut text = String::from("\n");
        for (name, figures) in rows {
            if !name.starts_with("stagger") {
                continue;
            }
            let recovered = figures.recovery(self.offered);
            let within = recovered.is_some_and(|t| t <= Duration::from_secs(2));
            let load = figures.peak_load(TRIGGER.0, TRIGGER.1) as f64 / self.offered;
            let _ = writeln!(
                text,
                "{name}: recovers within 2 s: {}; load during the trigger <= 1.2x offered: {} ({load:.2}x)",
                if within { "yes" } else { "no" },
                if load <= 1.2 { "yes" } else { "no" },
            );
        }
        text
    }
}
