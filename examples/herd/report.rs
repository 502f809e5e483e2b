//! What a row measured: its figures, the table's lines and the charts.

use std::path::Path;
use std::time::Duration;

use http::{Response, StatusCode};
use stagger::RetryInfo;
use tokio::time::Instant;

use crate::server::{BUCKET, OUTAGE};

/// How one client's request ended.
pub(crate) struct Finish {
    /// Time from t = 0 to the final response.
    pub(crate) at: Duration,
    /// Whether the final response is a `200`.
    pub(crate) ok: bool,
    /// Attempts made: from the [`RetryInfo`] the layer put in the response (0 if there is none), or
    /// over sockets as the server counted them.
    pub(crate) attempts: u32,
}

impl Finish {
    pub(crate) fn new<B>(start: Instant, response: &Response<B>) -> Self {
        Self {
            at: start.elapsed(),
            ok: response.status() == StatusCode::OK,
            attempts: RetryInfo::of(response.extensions()).attempts(),
        }
    }
}

/// What one row measured.
pub(crate) struct Figures {
    /// Attempts per `BUCKET`, as the server saw them.
    pub(crate) arrivals: Vec<u32>,
    /// Time from t = 0 to each client's final response, `200` or not, sorted.
    pub(crate) completions: Vec<Duration>,
    /// Clients whose final response is not a `200`.
    pub(crate) give_ups: usize,
    /// The most attempts one client made.
    pub(crate) most_attempts: u32,
}

impl Figures {
    pub(crate) fn new(arrivals: Vec<u32>, finishes: &[Finish]) -> Self {
        let mut completions: Vec<_> = finishes.iter().map(|f| f.at).collect();
        completions.sort_unstable();
        Self {
            arrivals,
            completions,
            give_ups: finishes.iter().filter(|f| !f.ok).count(),
            most_attempts: finishes.iter().map(|f| f.attempts).max().unwrap_or(0),
        }
    }

    pub(crate) fn attempts(&self) -> u64 {
        self.arrivals.iter().map(|&n| u64::from(n)).sum()
    }

    /// The most attempts in one bucket from the end of the outage on.
    pub(crate) fn peak_after_recovery(&self) -> u32 {
        let first = (OUTAGE.as_nanos() / BUCKET.as_nanos()) as usize;
        self.arrivals.iter().skip(first).copied().max().unwrap_or(0)
    }

    /// The nearest-rank percentile of completion times.
    pub(crate) fn completion(&self, percentile: f64) -> Duration {
        let rank = (percentile / 100.0 * self.completions.len() as f64).ceil() as usize;
        self.completions[rank.clamp(1, self.completions.len()) - 1]
    }
}

pub(crate) fn print_header() {
    println!(
        "{:<30} {:>9} {:>9} {:>7} {:>7} {:>7} {:>10} {:>8}",
        "row", "attempts", "peak/10ms", "p50 ms", "p99 ms", "max ms", "most tries", "give-ups"
    );
}

pub(crate) fn print_row(name: &str, figures: &Figures) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{:<30} {:>9} {:>9} {:>7.0} {:>7.0} {:>7.0} {:>10} {:>8}",
        name,
        figures.attempts(),
        figures.peak_after_recovery(),
        ms(figures.completion(50.0)),
        ms(figures.completion(99.0)),
        ms(figures.completion(100.0)),
        figures.most_attempts,
        figures.give_ups
    );
}

/// Checks the promise of `RetryAfterMode::Spread`: at most a tenth of strict's peak per 10 ms, for at most
/// 1.5 times its p99 completion.
pub(crate) fn judge_spread(strict: &Figures, spread: &Figures) {
    compare_spread(strict, spread, true);
}

/// Prints how spread compares with strict, and with `verdict` whether the promise holds.
pub(crate) fn compare_spread(strict: &Figures, spread: &Figures, verdict: bool) {
    let peak = f64::from(spread.peak_after_recovery()) / f64::from(strict.peak_after_recovery());
    let p99 = spread.completion(99.0).as_secs_f64() / strict.completion(99.0).as_secs_f64();
    let judge = |ok: bool, bound: &str| match (verdict, ok) {
        (false, _) => String::new(),
        (true, true) => format!(" (required <= {bound}: holds)"),
        (true, false) => format!(" (required <= {bound}: FAILS)"),
    };
    println!(
        "\nspread vs strict: peak/10ms {} vs {} = {peak:.3}x{}; p99 {:.0} ms vs {:.0} ms = {p99:.2}x{}",
        spread.peak_after_recovery(),
        strict.peak_after_recovery(),
        judge(peak <= 0.1, "0.1x"),
        spread.completion(99.0).as_secs_f64() * 1e3,
        strict.completion(99.0).as_secs_f64() * 1e3,
        judge(p99 <= 1.5, "1.5x"),
    );
}

pub(crate) fn draw_chart_or_complain(
    path: &Path,
    title: &str,
    rows: &[(&str, Figures)],
    capacity: f64,
) {
    match draw_chart(path, title, rows, capacity) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

/// Attempts per 10 ms over time, one line per row, and the server's capacity.
fn draw_chart(
    path: &Path,
    title: &str,
    rows: &[(&str, Figures)],
    capacity: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    const COLORS: [RGBColor; 6] = [
        RGBColor(127, 127, 127),
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
    ];
    // Zero is drawn on the axis, at the bottom of the logarithmic scale.
    const FLOOR: f64 = 0.5;

    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The jittered rows finish within seconds; a row that runs much longer is cut, and says so.
    let end = chart_end(rows);
    let buckets = (end.as_nanos() / BUCKET.as_nanos()) as usize + 1;
    let peak = rows
        .iter()
        .flat_map(|(_, f)| f.arrivals.iter().copied())
        .max()
        .unwrap_or(1);

    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            0f64..end.as_secs_f64(),
            (FLOOR..f64::from(peak) * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("attempts per 10 ms (log scale; none on the axis)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, capacity), (end.as_secs_f64(), capacity)],
            BLACK.stroke_width(2),
        ))?
        .label(format!("server capacity ({capacity:.0} per 10 ms)"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    for (i, (name, figures)) in rows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = (0..buckets.min(figures.arrivals.len())).map(|b| {
            let count = f64::from(figures.arrivals[b]);
            ((b as f64 + 0.5) * BUCKET.as_secs_f64(), count.max(FLOOR))
        });
        let mut label = (*name).to_string();
        let last = figures.completion(100.0);
        if last > end {
            label += &format!(" (cut: runs to {:.1} s)", last.as_secs_f64());
        }
        // A row that behaved exactly like an earlier one would hide it: dash it, and say so.
        let twin = rows[..i].iter().find(|(_, earlier)| {
            earlier.arrivals == figures.arrivals && earlier.completions == figures.completions
        });
        let series = match twin {
            Some((twin, _)) => {
                label += &format!(" (identical to {twin})");
                chart.draw_series(DashedLineSeries::new(points, 6, 6, color.stroke_width(2)))?
            }
            None => chart.draw_series(LineSeries::new(points, color.stroke_width(1)))?,
        };
        series
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Where the chart's time axis ends: a little after the last client of the slowest row that finishes
/// within ten times the median of the rows' last completions.
fn chart_end(rows: &[(&str, Figures)]) -> Duration {
    let mut lasts: Vec<Duration> = rows.iter().map(|(_, f)| f.completion(100.0)).collect();
    lasts.sort_unstable();
    let median = lasts[lasts.len() / 2];
    let end = lasts
        .iter()
        .copied()
        .filter(|&last| last <= median * 10)
        .max()
        .unwrap_or(median);
    (end + BUCKET * 10).max(OUTAGE * 2)
}

/// The peak resident set size of this process in KiB, from `/proc/self/status` (Linux only).
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
