//! The tail chart: for each latency, the share of requests slower than it (log-log), one line per
//! row, one panel per server.

use std::path::Path;
use std::time::Duration;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::figures::Figures;

/// The colours of a panel's rows, in order: no hedging, 10 ms, the p95, the last.
const COLORS: [RGBColor; 4] = [
    RGBColor(127, 127, 127),
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
];

pub(super) fn draw_or_complain(path: &Path, title: &str, rows: &[(&str, Figures)]) {
    match draw(path, title, rows) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

/// The steps of the share of `latencies` (sorted) slower than each latency: one point where a run of
/// equal latencies begins and one where it ends, down to the last request's.
fn slower_than(latencies: &[Duration]) -> Vec<(f64, f64)> {
    let n = latencies.len() as f64;
    let mut points = Vec::new();
    let mut i = 0;
    while i < latencies.len() {
        let at = latencies[i];
        let mut j = i;
        while j < latencies.len() && latencies[j] == at {
            j += 1;
        }
        let x = (at.as_secs_f64() * 1e3).max(1.0);
        // Just below `at`, `len - i` requests are slower; at it, `len - j`. The last is drawn at 1/n,
        // the bottom of the chart.
        points.push((x, (latencies.len() - i) as f64 / n));
        points.push((x, ((latencies.len() - j) as f64).max(1.0) / n));
        i = j;
    }
    points
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Two panels over the same axes: the ample server's rows above, the busy server's below.
fn draw(path: &Path, title: &str, rows: &[(&str, Figures)]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let requests = rows.iter().map(|(_, f)| f.requests()).max().unwrap_or(1);
    let longest = (rows.iter())
        .filter_map(|(_, f)| f.latencies.last())
        .max()
        .copied()
        .unwrap_or_default();
    let axes = Axes {
        right: (longest.as_secs_f64() * 1e3 * 1.5).max(2000.0),
        bottom: 1.0 / requests.max(1) as f64,
    };
    let root = SVGBackend::new(path, (1000, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let panels = root.split_evenly((2, 1));
    let (busy, ample): (Vec<_>, Vec<_>) =
        rows.iter().partition(|(name, _)| name.starts_with("busy"));
    panel(&panels[0], "ample server", &ample, &axes)?;
    let load = busy.first().map_or(0.0, |(_, f)| f.busy());
    let caption = format!("busy server: {:.0} % busy without hedging", load * 100.0);
    panel(&panels[1], &caption, &busy, &axes)?;
    root.present()?;
    Ok(())
}

/// The axes both panels share.
struct Axes {
    /// The longest latency shown, in ms.
    right: f64,
    /// The smallest share shown: one request.
    bottom: f64,
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    rows: &[&(&str, Figures)],
    axes: &Axes,
) -> Result<()> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (1f64..axes.right).log_scale(),
            (axes.bottom * 0.8..1.2f64).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("latency from the call's start (ms, log scale)")
        .y_desc("share of requests slower (log scale)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .draw()?;
    for (share, label) in [(0.01, "p99"), (0.001, "p99.9")] {
        let grey = RGBColor(0, 0, 0).mix(0.35);
        let line = [(1.0, share), (axes.right, share)];
        chart.draw_series(LineSeries::new(line, grey.stroke_width(1)))?;
        chart.draw_series([Text::new(label, (1.1, share * 1.15), ("sans-serif", 13))])?;
    }
    for (i, (name, figures)) in rows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // The panel says which server.
        let name = name.strip_prefix("busy: ").unwrap_or(name);
        let mut label = match figures.hedge_after {
            Some(delay) if !name.contains("ms") => format!("{name} = {} ms", delay.as_millis()),
            _ => name.to_string(),
        };
        // A row that behaved exactly like an earlier one hides it: say so.
        if let Some((twin, _)) = (rows[..i].iter()).find(|(_, f)| f.latencies == figures.latencies)
        {
            let twin = twin.strip_prefix("busy: ").unwrap_or(twin);
            label += &format!(" (identical to {twin})");
        }
        let style = color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(slower_than(&figures.latencies), style))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
