//! The metastability chart: goodput over time, one line per row, the trigger shaded.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use super::figures::Figures;
use super::{SEND_FOR, SLOT, TRIGGER};

/// The width of the chart's buckets.
const BUCKET: Duration = Duration::from_millis(250);

/// The colours of the rows, in order (matplotlib's tab10).
const COLORS: [RGBColor; 10] = [
    RGBColor(127, 127, 127),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(188, 189, 34),
    RGBColor(140, 86, 75),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(23, 190, 207),
    RGBColor(148, 103, 189),
    RGBColor(227, 119, 194),
];

pub(super) fn draw_or_complain(path: &Path, title: &str, rows: &[(&str, Figures)], offered: f64) {
    match draw(path, title, rows, offered) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

/// Useful answers per second in each [`BUCKET`] of `figures`, up to `end`.
fn goodput(figures: &Figures, end: Duration) -> Vec<(f64, f64)> {
    let per_bucket = (BUCKET.as_nanos() / SLOT.as_nanos()) as usize;
    let buckets = (end.as_nanos() / BUCKET.as_nanos()) as usize;
    let useful = &figures.slots.useful;
    (0..buckets)
        .map(|b| {
            let slots = useful.iter().skip(b * per_bucket).take(per_bucket);
            let count: u32 = slots.sum();
            let at = (b as f64 + 0.5) * BUCKET.as_secs_f64();
            (at, f64::from(count) / BUCKET.as_secs_f64())
        })
        .collect()
}

fn draw(
    path: &Path,
    title: &str,
    rows: &[(&str, Figures)],
    offered: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let end = SEND_FOR + Duration::from_secs(2);
    let series: Vec<_> = rows.iter().map(|(_, f)| goodput(f, end)).collect();
    let peak = (series.iter().flatten())
        .map(|&(_, y)| y)
        .fold(offered, f64::max);
    let root = SVGBackend::new(path, (1100, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end.as_secs_f64(), 0f64..peak * 1.15)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("answers reaching a waiting client, per second (250 ms buckets)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    let shade = RGBColor(0, 0, 0).mix(0.08);
    chart
        .draw_series([Rectangle::new(
            [
                (TRIGGER.0.as_secs_f64(), 0.0),
                (TRIGGER.1.as_secs_f64(), peak * 1.15),
            ],
            shade.filled(),
        )])?
        .label("trigger: capacity halved")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], shade.filled()));
    chart
        .draw_series(LineSeries::new(
            [(0.0, offered), (end.as_secs_f64(), offered)],
            BLACK.stroke_width(2),
        ))?
        .label(format!("offered ({offered:.0}/s)"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    for (i, ((name, _), points)) in rows.iter().zip(series).enumerate() {
        let color = COLORS[i % COLORS.len()];
        // A row that behaved exactly like an earlier one would hide it: dash it, and say so.
        let twin = rows[..i]
            .iter()
            .find(|(_, earlier)| earlier.slots.useful == rows[i].1.slots.useful);
        let mut label = (*name).to_string();
        let drawn = match twin {
            Some((twin, _)) => {
                label += &format!(" (identical to {twin})");
                chart.draw_series(DashedLineSeries::new(points, 6, 6, color.stroke_width(2)))?
            }
            None => chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?,
        };
        drawn
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
