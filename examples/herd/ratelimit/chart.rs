//! The rate-limit chart: each server's `429`s and `200`s per 100 ms over time, a column per server
//! and a line per row.

use std::path::Path;
use std::time::Duration;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Figures, SEND_FOR, SLOT};

/// One server's column of the chart: its rows, and the levels drawn across its `200`s.
pub(crate) struct Column<'a> {
    pub(crate) heading: String,
    pub(crate) rows: Vec<(&'a str, &'a Figures)>,
    /// Per slot, each with its label: the quota, and what the server admits at most if less.
    pub(crate) levels: Vec<(String, f64)>,
}

pub(crate) fn draw_or_complain(path: &Path, title: &str, columns: &[Column<'_>]) {
    match draw(path, title, columns) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

/// The colours of the rows, in order.
const COLORS: [RGBColor; 4] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(127, 127, 127),
];

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A column per server, each with two panels over one time axis: `429`s per slot above, `200`s per
/// slot and the levels below.
fn draw(path: &Path, title: &str, columns: &[Column<'_>]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, (800 * columns.len() as u32, 830)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    for (column, area) in columns.iter().zip(root.split_evenly((1, columns.len()))) {
        let rows = &column.rows;
        let last = rows.iter().map(|(_, f)| f.last).max().unwrap_or_default();
        let end = (last + SLOT).max(SEND_FOR + Duration::from_secs(1));
        let area = area.titled(&column.heading, ("sans-serif", 18))?;
        let (upper, lower) = area.split_vertically(385);
        let refused = Panel {
            label: "429s per 100 ms",
            counts: |f| &f.refused,
            levels: &[],
        };
        refused.draw(&upper, rows, end)?;
        let served = Panel {
            label: "200s per 100 ms",
            counts: |f| &f.served,
            levels: &column.levels,
        };
        served.draw(&lower, rows, end)?;
    }
    root.present()?;
    Ok(())
}

/// One panel: a count per slot of each row, over time.
struct Panel<'a> {
    label: &'static str,
    counts: fn(&Figures) -> &[u32],
    /// Levels per slot drawn across the panel, with their labels: solid black, then dashed.
    levels: &'a [(String, f64)],
}

impl Panel<'_> {
    fn draw(
        &self,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        rows: &[(&str, &Figures)],
        end: Duration,
    ) -> Result<()> {
        let end = end.as_secs_f64();
        let slot = SLOT.as_secs_f64();
        let peak = (rows.iter())
            .flat_map(|(_, f)| (self.counts)(f).iter().copied())
            .max()
            .unwrap_or(1);
        let highest = self.levels.iter().map(|&(_, level)| level);
        let top = highest.fold(f64::from(peak), f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..end, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc(self.label)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        for (i, (label, level)) in self.levels.iter().enumerate() {
            let across = [(0.0, *level), (end, *level)];
            let style = BLACK.stroke_width(2);
            if i == 0 {
                chart
                    .draw_series(LineSeries::new(across, style))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
            } else {
                chart
                    .draw_series(DashedLineSeries::new(across, 6, 4, style))?
                    .label(label)
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new([(0, 0), (8, 0)], style)
                            + PathElement::new([(12, 0), (20, 0)], style)
                    });
            }
        }
        for (i, (name, figures)) in rows.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points = ((self.counts)(figures).iter().enumerate())
                .map(|(s, &n)| ((s as f64 + 0.5) * slot, f64::from(n)));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(1)))?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    }
}
