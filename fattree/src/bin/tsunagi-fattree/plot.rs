//! The reproduction's PNG: (a) the random allocations sorted by bandwidth, as the paper's
//! figure 8, with the paper's single-LID minimum, mean and maximum as reference lines;
//! (b) consecutive allocations against node count, as its figure 9.

use plotters::prelude::*;
use std::error::Error;
use std::path::Path;

/// Where plotters finds its sans-serif face (Debian's fonts-dejavu-core).
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Register the font once.
pub fn load_font(path: &Path) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // plotters keeps fonts for the life of the program; leaking one file's bytes once is
    // the intended way to give it a 'static slice.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{}: not a usable TrueType font", path.display()))
}

/// One curve, MB/s against x.
pub struct Curve {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

const BLUE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const RED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const GREEN: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
const PURPLE: RGBColor = RGBColor(0x94, 0x67, 0xbd);
const COLOURS: [RGBColor; 4] = [BLUE, RED, GREEN, PURPLE];

pub struct Panel<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub curves: &'a [Curve],
    /// Horizontal reference lines (label, MB/s).
    pub references: &'a [(&'a str, f64)],
    pub y_max: f64,
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    p: &Panel,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let x_max = p
        .curves
        .iter()
        .flat_map(|c| c.points.iter().map(|q| q.0))
        .fold(1.0, f64::max);
    let x_min = p
        .curves
        .iter()
        .flat_map(|c| c.points.iter().map(|q| q.0))
        .fold(x_max, f64::min);
    let mut chart = ChartBuilder::on(area)
        .caption(p.title, ("sans-serif", 17))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x_min..x_max, 0.0..p.y_max)?;
    chart
        .configure_mesh()
        .x_desc(p.x_desc)
        .y_desc("all-to-all bandwidth (MB/s per node)")
        .x_label_formatter(&|x: &f64| format!("{x:.0}"))
        .y_label_formatter(&|y: &f64| format!("{y:.0}"))
        .label_style(("sans-serif", 12))
        .draw()?;
    for (label, y) in p.references {
        let grey = RGBColor(0x80, 0x80, 0x80);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x_min, *y), (x_max, *y)],
                6,
                4,
                grey.stroke_width(1),
            ))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey));
    }
    for (i, c) in p.curves.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(c.points.clone(), colour.stroke_width(2)))?
            .label(c.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
        if c.points.len() <= 64 {
            chart.draw_series(c.points.iter().map(|&q| Circle::new(q, 3, colour.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Panels side by side in one PNG.
pub fn draw(path: &Path, panels: &[Panel]) -> Result<(), Box<dyn Error>> {
    let size = (620 * panels.len() as u32, 440);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    for (area, p) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        draw_panel(area, p)?;
    }
    root.present()?;
    Ok(())
}
