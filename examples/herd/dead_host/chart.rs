//! The dead-host chart: the attempts reaching the host over time, one panel per case, one line per
//! row, and the legend in a strip of its own above them (every panel has lines where a box would
//! go).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{CASES, Case, Line, Scenario};
use crate::server::BUCKET;

/// The colours of the rows, in the order of `rows()`: no breaker in grey, stagger's breaker in
/// blues, the peers in warm colours.
const COLORS: [RGBColor; 7] = [
    RGBColor(127, 127, 127),
    RGBColor(31, 119, 180),
    RGBColor(23, 190, 207),
    RGBColor(214, 39, 40),
    RGBColor(188, 189, 34),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];
/// Each point is the mean of this many 10 ms counts (100 ms).
const PER_POINT: usize = 10;
/// Zero is drawn on the axis, at the bottom of the logarithmic scale.
const FLOOR: f64 = 0.05;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Failure = Box<dyn std::error::Error>;

pub(super) fn draw_or_complain(path: &Path, title: &str, scenario: &Scenario, lines: &[Line<'_>]) {
    match draw(path, title, scenario, lines) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

fn draw(path: &Path, title: &str, scenario: &Scenario, lines: &[Line<'_>]) -> Result<(), Failure> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, (1000, 1250)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let (legend, rest) = root.split_vertically(150);
    let panels: Vec<Vec<&Line>> = (CASES.iter())
        .map(|&case| lines.iter().filter(|l| l.case == case).collect())
        .collect();
    let top = (lines.iter())
        .flat_map(|l| l.figures.arrivals.iter().copied())
        .max()
        .map_or(1.0, |peak| f64::from(peak) * 2.0);
    for ((area, case), rows) in rest
        .split_evenly((CASES.len(), 1))
        .iter()
        .zip(CASES)
        .zip(&panels)
    {
        draw_panel(area, scenario, case, rows, top)?;
    }
    draw_legend(&legend, scenario, &panels)?;
    root.present()?;
    Ok(())
}

/// The stretch of time a case's panel shows, in seconds: the whole run, or for the short restart
/// a few seconds around it.
fn span(scenario: &Scenario, case: Case) -> (f64, f64) {
    let down = scenario.down_at.as_secs_f64();
    let back = scenario.back_at(case).as_secs_f64();
    match case {
        Case::Restarts => (down - 2.0, back + 5.0),
        Case::Refuses | Case::DropsSyns => (0.0, scenario.send_for(case).as_secs_f64() + 1.0),
    }
}

/// The earlier row of `rows` whose attempts were exactly those of row `i`: its line would hide
/// row `i`'s.
fn twin<'a>(rows: &[&'a Line<'a>], i: usize) -> Option<&'a Line<'a>> {
    let arrivals = &rows[i].figures.arrivals;
    (rows[..i].iter().copied()).find(|earlier| &earlier.figures.arrivals == arrivals)
}

fn draw_panel(
    area: &Area<'_>,
    scenario: &Scenario,
    case: Case,
    rows: &[&Line<'_>],
    top: f64,
) -> Result<(), Failure> {
    let (from, to) = span(scenario, case);
    let caption = format!(
        "({}) the host {} for {} s from t = {} s",
        case.letter(),
        case.what(),
        scenario.outage(case).as_secs_f64(),
        scenario.down_at.as_secs_f64()
    );
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(from..to, (FLOOR..top).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("attempts per 10 ms (log)")
        .y_label_formatter(&|y| format!("{y}"))
        .draw()?;
    let (down, back) = (
        scenario.down_at.as_secs_f64(),
        scenario.back_at(case).as_secs_f64(),
    );
    chart.draw_series([Rectangle::new(
        [(down, FLOOR), (back, top)],
        BLACK.mix(0.06).filled(),
    )])?;
    let offered = scenario.rate * BUCKET.as_secs_f64();
    chart.draw_series(DashedLineSeries::new(
        [(from, offered), (to, offered)],
        4,
        4,
        BLACK.mix(0.7).stroke_width(1),
    ))?;
    let point = BUCKET.as_secs_f64() * PER_POINT as f64;
    for (i, row) in rows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let arrivals = &row.figures.arrivals;
        let points = ((from.max(0.0) / point) as usize..(to / point) as usize).map(|p| {
            let counts = arrivals.iter().skip(p * PER_POINT).take(PER_POINT);
            let mean = counts.map(|&n| f64::from(n)).sum::<f64>() / PER_POINT as f64;
            ((p as f64 + 0.5) * point, mean.max(FLOOR))
        });
        // A row with exactly an earlier row's attempts is dashed. The no-breaker row is drawn
        // wide, under the others: a peer that sends what it sends shows as a line along it.
        if twin(rows, i).is_some() {
            chart.draw_series(DashedLineSeries::new(points, 5, 5, color.stroke_width(2)))?;
        } else {
            let width = if i == 0 { 3 } else { 1 };
            chart.draw_series(LineSeries::new(points, color.stroke_width(width)))?;
        }
    }
    Ok(())
}

fn draw_legend(
    area: &Area<'_>,
    scenario: &Scenario,
    panels: &[Vec<&Line<'_>>],
) -> Result<(), Failure> {
    let mut legend = ChartBuilder::on(area)
        .margin(5)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)?;
    let offered = scenario.rate * BUCKET.as_secs_f64();
    let grey = BLACK.mix(0.7);
    legend
        .draw_series(LineSeries::new(std::iter::empty(), grey))?
        .label(format!(
            "dashed, flat: {offered:.0} calls per 10 ms offered; each point is the mean per 10 ms \
             over 100 ms; the grey band is the outage"
        ))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey));
    for (i, row) in panels[0].iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let twins: Vec<String> = (panels.iter().zip(CASES))
            .filter_map(|(rows, case)| Some((twin(rows, i)?, case)))
            .map(|(twin, case)| format!("({}) as {}", case.letter(), twin.row.name))
            .collect();
        let label = if twins.is_empty() {
            row.row.name.to_string()
        } else {
            format!(
                "{}, dashed where its attempts are exactly: {}",
                row.row.name,
                twins.join(", ")
            )
        };
        legend
            .draw_series(LineSeries::new(std::iter::empty(), color))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    legend
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
