//! The outages chart: the success rate of the requests that met an outage against its length, one
//! line per client.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use super::{GOAL, Line, OUTAGES};

/// The colours of the rows, in the order of `rows()`: no retries, reqwest-retry, tower, backon,
/// stagger (as in the metastable chart).
const COLORS: [RGBColor; 5] = [
    RGBColor(127, 127, 127),
    RGBColor(255, 127, 14),
    RGBColor(188, 189, 34),
    RGBColor(140, 86, 75),
    RGBColor(31, 119, 180),
];

pub(super) fn draw_or_complain(path: &Path, title: &str, lines: &[Line<'_>]) {
    match draw(path, title, lines) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

fn draw(path: &Path, title: &str, lines: &[Line<'_>]) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let shortest = OUTAGES[0].as_secs_f64();
    let longest = OUTAGES[OUTAGES.len() - 1].as_secs_f64();
    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (shortest * 0.8..longest * 1.25)
                .log_scale()
                .with_key_points(OUTAGES.iter().map(Duration::as_secs_f64).collect()),
            0f64..105f64,
        )?;
    chart
        .configure_mesh()
        .x_desc("outage length (s, log scale)")
        .y_desc("requests that met the outage and got a 200 (%)")
        .x_label_formatter(&|x| format!("{x}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    let goal = [
        (shortest * 0.8, GOAL * 100.0),
        (longest * 1.25, GOAL * 100.0),
    ];
    chart
        .draw_series(LineSeries::new(goal, BLACK.mix(0.6).stroke_width(1)))?
        .label(format!("{:.0} %, the goal", GOAL * 100.0))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.6)));
    // Every outage lists the rows alike: the first outage's lines name them, in order.
    let first = lines.first().map(|l| l.outage);
    let rows = lines.iter().take_while(|l| Some(l.outage) == first);
    for (i, name) in rows.map(|l| l.row.name).enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = (lines.iter())
            .filter(|l| l.row.name == name)
            .filter_map(|l| Some((l.outage.as_secs_f64(), l.figures.success()? * 100.0)))
            .collect();
        let style = color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), style))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        // The lines start high at the left and fall towards the right, or stay high: the space
        // between them is on the right, half-way up.
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
