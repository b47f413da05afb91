//! Throughput and latency against concurrency, one line per target, as SVG
//! and PNG. plotters lays text out with `ab_glyph` for both backends, so the
//! first TrueType font found on the machine is registered once; without one
//! the plots are skipped with a note saying what to install.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;

use crate::report::WorkloadRun;

const SIZE: (u32, u32) = (960, 560);

/// Fonts looked for, in order (Debian's fonts-dejavu-core, then others).
const FONT_CANDIDATES: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Registers a font once; false when none was found.
fn register_font_once() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        for path in FONT_CANDIDATES {
            if let Ok(bytes) = std::fs::read(path) {
                // The registry keeps a 'static reference; one font, once per process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// Writes `<slug>-throughput.{svg,png}` and `<slug>-latency.{svg,png}` into
/// `dir` for a closed-loop sweep; returns the files written and a note when
/// PNGs were skipped.
pub fn sweep(
    dir: &Path,
    slug: &str,
    run: &WorkloadRun,
) -> Result<(Vec<PathBuf>, Option<String>), String> {
    let series: Vec<Series> = run
        .targets
        .iter()
        .map(|t| Series {
            name: t.target.name.clone(),
            points: t
                .points
                .iter()
                .filter(|p| p.rate.is_none())
                .map(|p| {
                    (
                        p.conns as f64,
                        p.requests_per_second,
                        p.latency.p50_ms,
                        p.latency.p99_ms,
                    )
                })
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if series.is_empty() {
        return Ok((Vec::new(), None));
    }
    if !register_font_once() {
        let note = "no TrueType font found (install fonts-dejavu-core): plots skipped";
        return Ok((Vec::new(), Some(note.to_owned())));
    }
    let mut written = Vec::new();
    for (kind, title) in [
        (
            Chart::Throughput,
            format!("{}: throughput vs connections", run.workload),
        ),
        (
            Chart::Latency,
            format!(
                "{}: latency vs connections (p50 solid, p99 dashed)",
                run.workload
            ),
        ),
    ] {
        let stem = format!("{slug}-{}", kind.stem());
        let svg = dir.join(format!("{stem}.svg"));
        draw(
            SVGBackend::new(&svg, SIZE).into_drawing_area(),
            &title,
            kind,
            &series,
        )?;
        written.push(svg);
        let png = dir.join(format!("{stem}.png"));
        draw(
            BitMapBackend::new(&png, SIZE).into_drawing_area(),
            &title,
            kind,
            &series,
        )?;
        written.push(png);
    }
    Ok((written, None))
}

#[derive(Clone, Copy)]
enum Chart {
    Throughput,
    Latency,
}

impl Chart {
    fn stem(self) -> &'static str {
        match self {
            Chart::Throughput => "throughput",
            Chart::Latency => "latency",
        }
    }
}

struct Series {
    name: String,
    /// (conns, req/s, p50 ms, p99 ms)
    points: Vec<(f64, f64, f64, f64)>,
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    chart: Chart,
    series: &[Series],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing {title}: {e}");
    root.fill(&WHITE).map_err(err)?;
    let all = series.iter().flat_map(|s| s.points.iter());
    let max_x = all.clone().map(|p| p.0).fold(1.0, f64::max).max(2.0);
    let (y_desc, max_y, min_y) = match chart {
        Chart::Throughput => (
            "requests / s",
            all.clone().map(|p| p.1).fold(1.0, f64::max) * 1.1,
            0.0,
        ),
        Chart::Latency => (
            "latency, ms (log)",
            all.clone().map(|p| p.3).fold(0.01, f64::max) * 1.5,
            all.clone().map(|p| p.2).fold(f64::MAX, f64::min).max(0.001) / 1.5,
        ),
    };
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80);
    let x_range = (1.0..max_x).log_scale();
    let lines: Vec<Line> = series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // A cell that answered nothing has no latency: leave it out
            // rather than plot a zero on a log axis.
            let pick = |f: fn(&(f64, f64, f64, f64)) -> f64| {
                s.points
                    .iter()
                    .map(|p| (p.0, f(p)))
                    .filter(|(_, y)| matches!(chart, Chart::Throughput) || *y > 0.0)
                    .collect()
            };
            let (solid, dashed) = match chart {
                Chart::Throughput => (pick(|p| p.1), Vec::new()),
                Chart::Latency => (pick(|p| p.2), pick(|p| p.3)),
            };
            Line {
                name: s.name.clone(),
                color: Palette99::pick(i).to_rgba(),
                solid,
                dashed,
            }
        })
        .collect();
    match chart {
        Chart::Throughput => {
            let mut ctx = builder
                .build_cartesian_2d(x_range, min_y..max_y)
                .map_err(err)?;
            plot_lines(&mut ctx, y_desc, &|y| format!("{y:.0}"), &lines).map_err(err)?;
        }
        Chart::Latency => {
            let mut ctx = builder
                .build_cartesian_2d(x_range, (min_y..max_y).log_scale())
                .map_err(err)?;
            plot_lines(&mut ctx, y_desc, &|y| format!("{y:.3}"), &lines).map_err(err)?;
        }
    }
    root.present().map_err(err)
}

/// One target's line: solid (with markers) and, for latency, a dashed p99.
struct Line {
    name: String,
    color: RGBAColor,
    solid: Vec<(f64, f64)>,
    dashed: Vec<(f64, f64)>,
}

/// Mesh, lines and legend on a chart whose x axis is connections (log) and
/// whose y axis is linear or logarithmic.
fn plot_lines<'a, DB, Y>(
    ctx: &mut ChartContext<'a, DB, Cartesian2d<LogCoord<f64>, Y>>,
    y_desc: &str,
    y_label: &dyn Fn(&f64) -> String,
    lines: &[Line],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    ctx.configure_mesh()
        .x_desc("connections (log)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(y_label)
        .draw()?;
    for line in lines {
        let color = line.color;
        ctx.draw_series(LineSeries::new(line.solid.clone(), color.stroke_width(2)))?
            .label(line.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        ctx.draw_series(
            line.solid
                .iter()
                .map(|&p| Circle::new(p, 3, color.filled())),
        )?;
        if !line.dashed.is_empty() {
            ctx.draw_series(DashedLineSeries::new(
                line.dashed.clone(),
                6,
                4,
                color.stroke_width(1),
            ))?;
        }
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}
