//! The benches' charts (`--svg FILE`): one log-log line chart per run, written as SVG with
//! `plotters`' SVG backend. Text is written as SVG `<text>` elements laid out by plotters' own
//! estimate (no font files are read), so a chart is made the same way on any machine.
//!
//! A chart shows exactly the figures the bench printed: one line (with a marker per point) for
//! each series, in the order given. A point the bench did not measure (NaN or infinite), or one a
//! logarithmic axis cannot show (zero or negative), is left out; a series left with no point is
//! left out of the chart and its legend. A chart with no point at all is an error.

use anyhow::Context;
use plotters::prelude::*;
use std::path::Path;

/// Width and height of a chart, in SVG pixels.
const SIZE: (u32, u32) = (900, 600);

/// Line colours (Okabe and Ito's palette, which stays apart for colour-blind readers), chosen
/// by [`Series::color`].
const COLORS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(213, 94, 0),    // vermilion
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(230, 159, 0),   // orange
    RGBColor(86, 180, 233),  // sky blue
    RGBColor(0, 0, 0),       // black
    RGBColor(240, 228, 66),  // yellow
];

/// One line of a chart.
pub struct Series {
    /// Its legend text.
    pub label: String,
    /// Index into the palette, so that one thing keeps its colour from chart to chart.
    pub color: usize,
    /// (x, y) as measured, in the order measured.
    pub points: Vec<(f64, f64)>,
}

/// A line chart with logarithmic x and y axes.
pub struct Chart {
    /// What was measured (the first line at the top).
    pub title: String,
    /// How and on what (the smaller lines under the title).
    pub notes: Vec<String>,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

/// The points a log-log chart can show.
fn shown(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points
        .iter()
        .copied()
        .filter(|&(x, y)| x.is_finite() && y.is_finite() && x > 0.0 && y > 0.0)
        .collect()
}

/// A logarithmic axis' range around `lo..=hi`, widened by `below` and `above` (factors).
fn log_range(lo: f64, hi: f64, below: f64, above: f64) -> std::ops::Range<f64> {
    let (lo, hi) = if lo == hi {
        (lo / 2.0, hi * 2.0)
    } else {
        (lo, hi)
    };
    lo / below..hi * above
}

/// A tick label: 1, 2.5, 10, 1k, 50k, 1M, 0.5, 0.01.
pub fn short(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let (v, suffix) = if v.abs() >= 1e6 {
        (v / 1e6, "M")
    } else if v.abs() >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        // two significant digits below 100, then without trailing zeros
        let digits = (1 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
        let t = format!("{v:.digits$}");
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t
        }
    };
    format!("{s}{suffix}")
}

/// The chart as SVG text.
pub fn render(c: &Chart) -> anyhow::Result<String> {
    let series: Vec<(&Series, Vec<(f64, f64)>)> = c
        .series
        .iter()
        .map(|s| (s, shown(&s.points)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    let all = || series.iter().flat_map(|(_, p)| p.iter().copied());
    anyhow::ensure!(all().next().is_some(), "nothing measured to chart");
    let fold = |f: fn(&(f64, f64)) -> f64| {
        all()
            .map(|p| f(&p))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    let (x0, x1) = fold(|p| p.0);
    let (y0, y1) = fold(|p| p.1);
    let xr = log_range(x0, x1, 1.5, 1.5);
    let yr = log_range(y0, y1, 1.6, 2.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(c, &series, xr, yr, &root).map_err(|e| anyhow::anyhow!("drawing the chart: {e}"))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("drawing the chart: {e}"))?;
    }
    Ok(svg)
}

type DrawResult =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>>;

fn draw(
    c: &Chart,
    series: &[(&Series, Vec<(f64, f64)>)],
    xr: std::ops::Range<f64>,
    yr: std::ops::Range<f64>,
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> DrawResult {
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(50 + 19 * c.notes.len() as u32);
    head.draw(&Text::new(
        c.title.clone(),
        (16, 12),
        ("sans-serif", 24).into_font().color(&BLACK),
    ))?;
    for (i, line) in c.notes.iter().enumerate() {
        head.draw(&Text::new(
            line.clone(),
            (16, 42 + 19 * i as i32),
            ("sans-serif", 16).into_font().color(&RGBColor(70, 70, 70)),
        ))?;
    }
    let mut chart = ChartBuilder::on(&body)
        .margin_left(12)
        .margin_right(28)
        .margin_bottom(8)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(xr.log_scale(), yr.log_scale())?;
    chart
        .configure_mesh()
        .x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(205, 205, 205))
        .draw()?;
    for (s, points) in series {
        let color = COLORS[s.color % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()?;
    Ok(())
}

/// Write the chart to `path`.
pub fn write(path: &Path, c: &Chart) -> anyhow::Result<()> {
    let svg = render(c)?;
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

/// Fail early (before a long run) if `path` could not be written: its folder must exist.
pub fn check_path(path: &Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    anyhow::ensure!(
        dir.is_dir(),
        "--svg {}: no folder {}",
        path.display(),
        dir.display()
    );
    anyhow::ensure!(!path.is_dir(), "--svg {}: is a folder", path.display());
    Ok(())
}

/// "measured 2026-12-01 on <CPU model> (N CPUs)": the date (UTC) and the machine, for subtitles.
pub fn measured_on() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, m)| m.trim().to_string())
            })
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "measured {} on {} ({cpus} CPU{})",
        today(),
        cpu.split_whitespace().collect::<Vec<_>>().join(" "),
        if cpus == 1 { "" } else { "s" }
    )
}

/// Today's date (UTC) as YYYY-MM-DD.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil(secs.div_euclid(86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + (m <= 2) as i64, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The number of points of each polyline of width 2 (the series and their legend samples;
    /// axes and ticks are of width 1).
    fn polylines(svg: &str) -> Vec<usize> {
        svg.split("<polyline")
            .skip(1)
            .map(|p| &p[..p.find("/>").unwrap()])
            .filter(|p| p.contains("stroke-width=\"2\""))
            .map(|p| {
                let pts = p
                    .split("points=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                pts.split_whitespace().count()
            })
            .collect()
    }

    #[test]
    fn unmeasured_points_and_empty_series_are_left_out() {
        let c = Chart {
            title: "t & <title>".into(),
            notes: vec![measured_on()],
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![
                Series {
                    label: "full".into(),
                    color: 0,
                    points: vec![(1.0, 10.0), (10.0, 20.0), (100.0, 40.0)],
                },
                Series {
                    label: "holes".into(),
                    color: 1,
                    points: vec![(1.0, f64::NAN), (10.0, 0.0), (100.0, 5.0), (1000.0, 6.0)],
                },
                Series {
                    label: "none".into(),
                    color: 2,
                    points: vec![(1.0, f64::NAN)],
                },
            ],
        };
        let svg = render(&c).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("t &amp; &lt;title&gt;"));
        // each text element holds its text on a line of its own
        assert!(svg.contains("\nfull\n") && svg.contains("\nholes\n"));
        assert!(!svg.contains("\nnone\n"));
        // the two lines (3 and 2 points), then the two legend samples (2 points each)
        let p = polylines(&svg);
        assert_eq!(p, [3, 2, 2, 2]);
        assert_eq!(svg.matches("<circle").count(), 5);
        let empty = Chart {
            series: vec![Series {
                label: "x".into(),
                color: 0,
                points: vec![(1.0, f64::NAN)],
            }],
            ..c
        };
        assert!(render(&empty).is_err());
    }

    #[test]
    fn tick_labels_and_dates() {
        assert_eq!(short(1.0), "1");
        assert_eq!(short(2.5), "2.5");
        assert_eq!(short(0.5), "0.5");
        assert_eq!(short(0.01), "0.01");
        assert_eq!(short(100.0), "100");
        assert_eq!(short(1000.0), "1k");
        assert_eq!(short(50_000.0), "50k");
        assert_eq!(short(2_000_000.0), "2M");
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(20_454), (2026, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
    }
}
