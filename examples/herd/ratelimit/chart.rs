//! The rate-limit chart: the server's `429`s and `200`s per 100 ms over time, one line per row.

use std::path::Path;
use std::time::Duration;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Figures, SEND_FOR, SLOT};

pub(crate) fn draw_or_complain(
    path: &Path,
    title: &str,
    rows: &[(&str, &Figures)],
    quota_per_slot: f64,
) {
    match draw(path, title, rows, quota_per_slot) {
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

/// Two panels over one time axis: `429`s per slot above, `200`s per slot and the quota below.
fn draw(path: &Path, title: &str, rows: &[(&str, &Figures)], quota_per_slot: f64) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let last = rows.iter().map(|(_, f)| f.last).max().unwrap_or_default();
    let end = (last + SLOT).max(SEND_FOR + Duration::from_secs(1));
    let root = SVGBackend::new(path, (1000, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (upper, lower) = root.split_vertically(400);
    let refused = Panel {
        label: "429s per 100 ms",
        counts: |f| &f.refused,
        quota: None,
    };
    refused.draw(&upper, rows, end)?;
    let served = Panel {
        label: "200s per 100 ms",
        counts: |f| &f.served,
        quota: Some(quota_per_slot),
    };
    served.draw(&lower, rows, end)?;
    root.present()?;
    Ok(())
}

/// One panel: a count per slot of each row, over time.
struct Panel {
    label: &'static str,
    counts: fn(&Figures) -> &[u32],
    /// The quota per slot, drawn as a line if given.
    quota: Option<f64>,
}

impl Panel {
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
        let top = f64::from(peak).max(self.quota.unwrap_or(0.0)) * 1.1;
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
        if let Some(quota) = self.quota {
            chart
                .draw_series(LineSeries::new(
                    [(0.0, quota), (end, quota)],
                    BLACK.stroke_width(2),
                ))?
                .label(format!("quota ({quota:.0} per 100 ms)"))
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
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
