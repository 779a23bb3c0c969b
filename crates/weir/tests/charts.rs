//! `weir bench iptables --svg FILE`: the chart is well-formed SVG with its title, axis labels
//! and legend, one line per series with a point per size, and those points are where the
//! figures the same run printed (`--json`) put them on log-log axes.

use std::process::Command;

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// The tags of an XML text, each with its name, attributes text and kind.
#[derive(Debug)]
struct Tag {
    name: String,
    attrs: String,
    closing: bool,
    empty: bool,
}

/// Every tag, checking that the text is well formed: tags balanced and properly nested, no
/// `<` or stray `&` in text, attribute values quoted.
fn tags(svg: &str) -> Vec<Tag> {
    let mut out = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        check_text(&rest[..i]);
        let end = rest[i..].find('>').expect("unclosed tag") + i;
        let body = &rest[i + 1..end];
        rest = &rest[end + 1..];
        if body.starts_with('?') || body.starts_with('!') {
            continue;
        }
        let closing = body.starts_with('/');
        let empty = body.ends_with('/');
        let inner = body.trim_start_matches('/').trim_end_matches('/');
        let (name, attrs) = inner.split_once(char::is_whitespace).unwrap_or((inner, ""));
        assert!(!name.is_empty(), "empty tag name in <{body}>");
        assert_eq!(
            attrs.matches('"').count() % 2,
            0,
            "unquoted attribute in <{body}>"
        );
        if closing {
            assert_eq!(stack.pop().as_deref(), Some(name), "unbalanced </{name}>");
        } else if !empty {
            stack.push(name.to_string());
        }
        out.push(Tag {
            name: name.into(),
            attrs: attrs.into(),
            closing,
            empty,
        });
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed elements {stack:?}");
    out
}

fn check_text(t: &str) {
    for (i, _) in t.match_indices('&') {
        let ent = &t[i..t[i..].find(';').map_or(t.len(), |j| i + j + 1)];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&ent),
            "stray & in text: {t:?}"
        );
    }
}

fn attr<'a>(t: &'a Tag, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let i = t.attrs.find(&key)? + key.len();
    Some(&t.attrs[i..i + t.attrs[i..].find('"')?])
}

/// The text of each `<text>` element, trimmed, in order.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|s| {
            let s = &s[s.find('>').unwrap() + 1..];
            s[..s.find("</text>").unwrap()].trim().to_string()
        })
        .collect()
}

/// A polyline's points.
fn points(t: &Tag) -> Vec<(f64, f64)> {
    attr(t, "points")
        .unwrap()
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

#[test]
fn iptables_svg_chart_shows_both_series_at_every_size() {
    let dir = std::env::temp_dir().join(format!("weir-charts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("iptables.svg");
    let sizes = [1usize, 100, 1000];
    let out = weir()
        .args([
            "bench",
            "iptables",
            "--sizes",
            "1,100,1000",
            "--seconds",
            "0.05",
            "--linear-seconds",
            "0.05",
            "--json",
            "--svg",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // stdout is the JSON alone, as without --svg
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ns = |key: &str| -> Vec<f64> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| 1e3 / m.as_f64().unwrap())
            .collect()
    };
    let compiled_ns = ns("compiled_mpps");
    let linear_ns = ns("linear_mpps");
    assert_eq!(compiled_ns.len(), sizes.len());

    let svg = std::fs::read_to_string(&file).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    let tags = tags(&svg);
    let text = texts(&svg);
    for want in [
        "weir bench iptables: per-packet cost against the number of rules",
        "rules (N)",
        "ns per packet",
        "weir, compiled engine",
        "weir, linear reference (rule by rule)",
    ] {
        assert!(
            text.iter().any(|t| t == want),
            "no text {want:?} in {text:?}"
        );
    }

    // The series' lines and their legend samples are the polylines of width 2 (axes and ticks
    // are of width 1). A legend sample is a short level line just left of its label, on the
    // label's line; its colour names the series.
    let mut labels = Vec::new();
    let mut wide = Vec::new();
    let mut text_i = 0;
    for t in &tags {
        if t.name == "text" && !t.closing {
            let label = &text[text_i];
            text_i += 1;
            if label.starts_with("weir, ") {
                let at = |k| attr(t, k).unwrap().parse::<f64>().unwrap();
                labels.push((label.clone(), at("x"), at("y")));
            }
        }
        if t.name == "polyline" && attr(t, "stroke-width") == Some("2") {
            assert!(t.empty);
            wide.push((attr(t, "stroke").unwrap().to_string(), points(t)));
        }
    }
    assert_eq!(labels.len(), 2, "legend labels: {labels:?}");
    let is_sample_of = |p: &[(f64, f64)], x: f64, y: f64| {
        p.len() == 2
            && p[0].1 == p[1].1
            && p[1].0 < x
            && x - p[1].0 < 30.0
            && (y..y + 20.0).contains(&p[0].1)
    };
    let legend_color: Vec<(String, String)> = labels
        .iter()
        .map(|(label, x, y)| {
            let mut m = wide.iter().filter(|(_, p)| is_sample_of(p, *x, *y));
            let c = m
                .next()
                .unwrap_or_else(|| panic!("no legend sample for {label}"))
                .0
                .clone();
            assert!(m.next().is_none());
            (label.clone(), c)
        })
        .collect();
    let lines: Vec<(String, Vec<(f64, f64)>)> = wide
        .into_iter()
        .filter(|(_, p)| !labels.iter().any(|(_, x, y)| is_sample_of(p, *x, *y)))
        .collect();
    assert_eq!(lines.len(), 2, "series lines: {lines:?}");
    let line_of = |label: &str| -> &Vec<(f64, f64)> {
        let color = &legend_color.iter().find(|(l, _)| l == label).unwrap().1;
        let mut m = lines.iter().filter(|(c, _)| c == color);
        let l = &m.next().expect("no line in the legend's colour").1;
        assert!(m.next().is_none(), "two lines in one colour");
        l
    };
    let compiled = line_of("weir, compiled engine");
    let linear = line_of("weir, linear reference (rule by rule)");
    assert_ne!(compiled, linear);
    for l in [compiled, linear] {
        assert_eq!(l.len(), sizes.len(), "{l:?}");
    }
    // a marker at every point
    assert_eq!(svg.matches("<circle").count(), 2 * sizes.len());

    // Both axes are logarithmic with ticks at powers of ten (labels 1, 10, ..., 1k, 10k): every
    // point must sit where the figure the run printed puts it on them.
    let x_axis = Axis::new(&tags, &text, "middle", "0.76em");
    let y_axis = Axis::new(&tags, &text, "end", "0.5ex");
    let xs: Vec<f64> = compiled.iter().map(|p| p.0).collect();
    assert_eq!(xs, linear.iter().map(|p| p.0).collect::<Vec<_>>());
    for (line, ns) in [(compiled, &compiled_ns), (linear, &linear_ns)] {
        for ((p, &ns), &n) in line.iter().zip(ns).zip(&sizes) {
            let want = (x_axis.pixel(n as f64), y_axis.pixel(ns));
            assert!(
                (p.0 - want.0).abs() <= 2.0 && (p.1 - want.1).abs() <= 2.0,
                "point {p:?} for {n} rules, {ns} ns: want {want:?}"
            );
        }
    }
}

/// A logarithmic axis, read from its tick labels: pixel = at + per_decade * log10(value).
struct Axis {
    at: f64,
    per_decade: f64,
}

impl Axis {
    /// The axis whose tick labels are the `<text>` elements with this anchor and `dy`.
    fn new(tags: &[Tag], text: &[String], anchor: &str, dy: &str) -> Axis {
        let opening = tags.iter().filter(|t| t.name == "text" && !t.closing);
        let ticks: Vec<(f64, f64)> = opening
            .zip(text)
            .filter(|(t, _)| attr(t, "text-anchor") == Some(anchor) && attr(t, "dy") == Some(dy))
            .filter_map(|(t, label)| {
                let (num, mult) = match label.strip_suffix('k') {
                    Some(n) => (n, 1e3),
                    None => (label.as_str(), 1.0),
                };
                let v = num.parse::<f64>().ok()? * mult;
                let pos = if anchor == "end" { "y" } else { "x" };
                Some((v.log10(), attr(t, pos)?.parse().ok()?))
            })
            .collect();
        assert!(ticks.len() >= 2, "tick labels ({anchor}): {ticks:?}");
        let ((l0, p0), (l1, p1)) = (ticks[0], ticks[ticks.len() - 1]);
        assert!((l1 - l0).abs() >= 1.0, "{ticks:?}");
        let axis = Axis {
            per_decade: (p1 - p0) / (l1 - l0),
            at: p0 - (p1 - p0) / (l1 - l0) * l0,
        };
        assert!(axis.per_decade.abs() > 30.0, "{ticks:?}");
        for &(l, p) in &ticks {
            assert!(
                (axis.pixel(10f64.powf(l)) - p).abs() <= 1.5,
                "not logarithmic: {ticks:?}"
            );
        }
        axis
    }

    fn pixel(&self, v: f64) -> f64 {
        self.at + self.per_decade * v.log10()
    }
}
