//! The restart chart: above, the connection attempts per 100 ms the database saw; below, the share of
//! workers connected again; both against the time since the loss, one line per row.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use super::figures::Figures;
use super::{LOSS, OUTAGE, RUN_FOR, Row};
use crate::server::BUCKET;

/// The width of the chart's buckets: 10 ms buckets over a minute are too fine to see.
const CHART_BUCKET: Duration = Duration::from_millis(100);
/// From how long before the loss the chart starts.
const BEFORE: Duration = Duration::from_secs(2);

/// The colours of the rows, in order: the two without jitter in greys, stagger in blue.
const COLORS: [RGBColor; 6] = [
    RGBColor(90, 90, 90),
    RGBColor(170, 170, 170),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
];

pub(super) fn draw_or_complain(path: &Path, title: &str, rows: &[(&Row, Figures)]) {
    match draw(path, title, rows) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

/// Where the time axis ends, from the loss: a little after the last worker of any row got back.
fn end(rows: &[(&Row, Figures)]) -> Duration {
    let last = (rows.iter())
        .map(|(_, f)| f.all_back().unwrap_or(RUN_FOR))
        .max()
        .unwrap_or(RUN_FOR);
    (last + Duration::from_secs(3)).max(OUTAGE + Duration::from_secs(5))
}

/// Attempts per [`CHART_BUCKET`], at the middle of each, from `BEFORE` the loss to `end` after it.
fn attempts(figures: &Figures, end: Duration) -> Vec<(f64, f64)> {
    let per = (CHART_BUCKET.as_nanos() / BUCKET.as_nanos()) as usize;
    let first = ((LOSS - BEFORE).as_nanos() / BUCKET.as_nanos()) as usize;
    let buckets = ((BEFORE + end).as_nanos() / CHART_BUCKET.as_nanos()) as usize;
    (0..buckets)
        .map(|b| {
            let count: u32 = figures
                .attempts
                .iter()
                .skip(first + b * per)
                .take(per)
                .sum();
            let at = (b as f64 + 0.5) * CHART_BUCKET.as_secs_f64() - BEFORE.as_secs_f64();
            (at, f64::from(count))
        })
        .collect()
}

/// The share of workers back by the end of each [`CHART_BUCKET`] from the loss, in %.
fn back(figures: &Figures, end: Duration) -> Vec<(f64, f64)> {
    let buckets = (end.as_nanos() / CHART_BUCKET.as_nanos()) as u32;
    let workers = figures.workers().max(1) as f64;
    (0..=buckets)
        .map(|b| {
            let at = CHART_BUCKET * b;
            let back = figures.back.partition_point(|&up| up <= at);
            (at.as_secs_f64(), back as f64 / workers * 100.0)
        })
        .collect()
}

fn draw(
    path: &Path,
    title: &str,
    rows: &[(&Row, Figures)],
) -> Result<(), Box<dyn std::error::Error>> {
    // Zero is drawn on the axis, at the bottom of the logarithmic scale.
    const FLOOR: f64 = 0.5;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let end = end(rows);
    let series: Vec<_> = rows.iter().map(|(_, f)| attempts(f, end)).collect();
    let peak = (series.iter().flatten())
        .map(|&(_, y)| y)
        .fold(1.0, f64::max);

    let root = SVGBackend::new(path, (1100, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (above, below) = root.split_vertically(480);
    let x = -BEFORE.as_secs_f64()..end.as_secs_f64();

    let mut chart = ChartBuilder::on(&above)
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(x.clone(), (FLOOR..peak * 2.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("time since the database went down (s)")
        .y_desc("connection attempts per 100 ms (log)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    let outage = RGBColor(0, 0, 0).mix(0.08);
    chart
        .draw_series([Rectangle::new(
            [(0.0, FLOOR), (OUTAGE.as_secs_f64(), peak * 2.0)],
            outage.filled(),
        )])?
        .label("database down")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], outage.filled()));
    for (i, ((row, _), points)) in rows.iter().zip(&series).enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = points.iter().map(|&(t, n)| (t, n.max(FLOOR)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(row.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;

    let mut chart = ChartBuilder::on(&below)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x, 0f64..105f64)?;
    chart
        .configure_mesh()
        .x_desc("time since the database went down (s)")
        .y_desc("workers connected again (%)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    chart.draw_series([Rectangle::new(
        [(0.0, 0.0), (OUTAGE.as_secs_f64(), 105.0)],
        outage.filled(),
    )])?;
    for (i, (_, figures)) in rows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = back(figures, end);
        chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
    }
    root.present()?;
    Ok(())
}
