//! PNG plots of the medians: point-to-point latency and bandwidth against message size,
//! each collective's latency against size (one sheet per rank count), and kernel times
//! against rank count. Log-log axes throughout; one colour per MPI.

use crate::metric::{Key, Suite};
use crate::report::{fmt_bytes, fmt_value, Results};
use plotters::prelude::*;
use std::error::Error;
use std::path::{Path, PathBuf};

/// Where plotters finds its sans-serif face (Debian's fonts-dejavu-core).
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Register the font once; plots are skipped with a message if it cannot be read.
pub fn load_font(path: &Path) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // plotters keeps fonts for the life of the program; leaking one file's bytes once is
    // the intended way to give it a 'static slice.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{}: not a usable TrueType font", path.display()))
}

/// One curve: a contender's medians.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
}

struct Panel {
    title: String,
    x_desc: &'static str,
    y_desc: String,
    x_is_bytes: bool,
    series: Vec<Series>,
}

const COLOURS: [RGBColor; 4] = [
    RGBColor(0xd6, 0x27, 0x28), // Tsunagi
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];

/// The medians of `metric` for each contender, x = bytes (or ranks for kernels).
fn series_for(results: &Results, keys: &[&Key], by_ranks: bool) -> Vec<Series> {
    results
        .mpis
        .iter()
        .map(|(id, label)| Series {
            label: label.clone(),
            points: keys
                .iter()
                .filter_map(|k| {
                    let x = if by_ranks {
                        k.ranks as f64
                    } else {
                        k.bytes? as f64
                    };
                    let y = results.summary(k, id)?.median;
                    (x > 0.0 && y > 0.0).then_some((x, y))
                })
                .collect(),
        })
        .collect()
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    p: &Panel,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let all: Vec<(f64, f64)> = p
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    if all.is_empty() {
        return Ok(());
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in &all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    // Some room around the data on the log axes.
    let (x0, x1) = (x0 / 1.5, x1 * 1.5);
    // plotters labels a log axis at powers of ten and their multiples: reach down to one
    // power of ten so that a range narrower than a decade still gets labels.
    let (y0, y1) = ((y0 / 1.6).min(10f64.powf(y0.log10().floor())), y1 * 1.6);
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 17))
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?;
    let x_is_bytes = p.x_is_bytes;
    let xfmt = move |x: &f64| {
        if x_is_bytes {
            fmt_bytes(x.round() as u64)
        } else {
            format!("{}", x.round() as u64)
        }
    };
    chart
        .configure_mesh()
        .x_desc(p.x_desc)
        .y_desc(&p.y_desc)
        .x_label_formatter(&xfmt)
        .y_label_formatter(&|y: &f64| fmt_value(*y))
        .label_style(("sans-serif", 12))
        .draw()?;
    for (i, s) in p.series.iter().enumerate() {
        if s.points.is_empty() {
            continue;
        }
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(s.points.clone(), colour.stroke_width(2)))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
        chart.draw_series(
            s.points
                .iter()
                .map(|&pt| Circle::new(pt, 3, colour.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn draw_sheet(path: &Path, cols: usize, panels: &[Panel]) -> Result<(), Box<dyn Error>> {
    let rows = panels.len().div_ceil(cols);
    let size = (600 * cols as u32, 400 * rows as u32);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((rows, cols));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    root.present()?;
    Ok(())
}

/// A panel of `keys`' medians per contender, its title noting how many runs they are of.
fn panel(
    results: &Results,
    keys: &[&Key],
    what: &str,
    x_desc: &'static str,
    y_desc: &str,
    by_ranks: bool,
) -> Panel {
    let runs = results.max_runs(keys);
    Panel {
        title: format!(
            "{what} (median of {runs} run{})",
            if runs == 1 { "" } else { "s" }
        ),
        x_desc,
        y_desc: y_desc.to_string(),
        x_is_bytes: !by_ranks,
        series: series_for(results, keys, by_ranks),
    }
}

/// Draw every plot the results allow into `dir`; returns the files written.
pub fn draw_all(results: &Results, dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let keys = results.keys();
    let select = |suite: Suite, metric: &str, ranks: Option<u32>| -> Vec<&Key> {
        keys.iter()
            .copied()
            .filter(|k| {
                k.suite == suite && k.metric == metric && ranks.is_none_or(|r| k.ranks == r)
            })
            .collect()
    };
    let mut written = Vec::new();

    // Point-to-point: latency, and the three rates.
    let p2p_panel = |metric: &str, what: &str, y: &str| {
        let ks = select(Suite::P2p, metric, None);
        panel(
            results,
            &ks,
            &format!("{what}, 2 ranks"),
            "message size",
            y,
            false,
        )
    };
    let lat = p2p_panel("lat", "Ping-pong latency", "µs (half round trip)");
    if lat.series.iter().any(|s| !s.points.is_empty()) {
        let path = dir.join("p2p-latency.png");
        draw_sheet(&path, 1, &[lat])?;
        written.push(path);
        let path = dir.join("p2p-bandwidth.png");
        let panels = [
            p2p_panel("bw", "Bandwidth", "MB/s"),
            p2p_panel("bibw", "Bidirectional bandwidth", "MB/s (both directions)"),
        ];
        draw_sheet(&path, 2, &panels)?;
        written.push(path);
    }

    // Collectives: one sheet per rank count, one panel per collective.
    let mut coll_ranks: Vec<u32> = keys
        .iter()
        .filter(|k| k.suite == Suite::Coll)
        .map(|k| k.ranks)
        .collect();
    coll_ranks.dedup();
    coll_ranks.sort_unstable();
    coll_ranks.dedup();
    for n in coll_ranks {
        let mut metrics: Vec<&str> = keys
            .iter()
            .filter(|k| {
                k.suite == Suite::Coll
                    && k.ranks == n
                    && !k.metric.starts_with("overlap-")
                    && k.metric != "barrier"
            })
            .map(|k| k.metric.as_str())
            .collect();
        metrics.dedup();
        let panels: Vec<Panel> = metrics
            .iter()
            .map(|m| {
                let ks = select(Suite::Coll, m, Some(n));
                panel(
                    results,
                    &ks,
                    &format!("{m}, {n} ranks"),
                    "bytes per rank",
                    "µs",
                    false,
                )
            })
            .collect();
        if !panels.is_empty() {
            let path = dir.join(format!("coll-np{n}.png"));
            draw_sheet(&path, 4, &panels)?;
            written.push(path);
        }
    }

    // Kernels: time against rank count, one panel per kernel.
    let mut kernels: Vec<&str> = keys
        .iter()
        .filter(|k| k.suite == Suite::Kernel)
        .map(|k| k.metric.as_str())
        .collect();
    kernels.sort_unstable();
    kernels.dedup();
    let panels: Vec<Panel> = kernels
        .iter()
        .map(|m| {
            let ks = select(Suite::Kernel, m, None);
            panel(results, &ks, m, "ranks", "seconds", true)
        })
        .collect();
    if !panels.is_empty() {
        let path = dir.join("kernels.png");
        draw_sheet(&path, 3, &panels)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_are_drawn_when_the_font_is_there() {
        if load_font(Path::new(FONT_PATH)).is_err() {
            eprintln!("skipped: {FONT_PATH} missing (Debian package fonts-dejavu-core)");
            return;
        }
        let mut r = Results {
            mpis: vec![
                ("tsunagi".into(), "Tsunagi".into()),
                ("mpich".into(), "MPICH".into()),
            ],
            ..Default::default()
        };
        for (i, b) in [8u64, 64, 512].iter().enumerate() {
            for (mpi, f) in [("tsunagi", 1.0), ("mpich", 1.2)] {
                r.add(
                    Key::new(Suite::P2p, "lat", 2, Some(*b)),
                    mpi,
                    f * (i + 1) as f64,
                );
                r.add(
                    Key::new(Suite::P2p, "bw", 2, Some(*b)),
                    mpi,
                    f * 100.0 * (i + 1) as f64,
                );
                r.add(
                    Key::new(Suite::Coll, "allreduce", 4, Some(*b)),
                    mpi,
                    f * 3.0 * (i + 1) as f64,
                );
            }
        }
        for n in [1, 2, 4] {
            r.add(
                Key::new(Suite::Kernel, "CG.S", n, None),
                "tsunagi",
                1.0 / n as f64,
            );
        }
        let dir = std::env::temp_dir().join(format!("tsunagi-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = draw_all(&r, &dir).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "p2p-latency.png",
                "p2p-bandwidth.png",
                "coll-np4.png",
                "kernels.png"
            ]
        );
        for f in &files {
            let head = std::fs::read(f).unwrap();
            assert_eq!(&head[1..4], b"PNG", "{} is not a PNG", f.display());
            assert!(head.len() > 5000, "{} is suspiciously small", f.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
