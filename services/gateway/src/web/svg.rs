//! Charts drawn by the server as SVG: a line over time (with an optional projection) and bars.
//! Every chart carries a title and a description for screen readers; the numbers it shows are
//! also in a table on the same page.

use std::fmt::Write as _;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn open(out: &mut String, title: &str, description: &str) {
    // Ids unique per chart on a page: from the title.
    let id = title.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let _ = write!(
        out,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="t{id:x} d{id:x}" xmlns="http://www.w3.org/2000/svg"><title id="t{id:x}">{}</title><desc id="d{id:x}">{}</desc>"#,
        escape(title),
        escape(description)
    );
}

fn y_axis(out: &mut String, max: f64, unit: &str) {
    for step in 0..=4 {
        let value = max * f64::from(step) / 4.0;
        let y = TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - f64::from(step) / 4.0);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#d0d7de" stroke-width="1"/><text x="{}" y="{:.1}" text-anchor="end">{}{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 4.0,
            y + 4.0,
            short(value),
            escape(unit)
        );
    }
}

fn short(value: f64) -> String {
    if value >= 1_000_000.0 {
        format!("{:.1}M", value / 1_000_000.0)
    } else if value >= 1_000.0 {
        format!("{:.1}k", value / 1_000.0)
    } else if value >= 10.0 || value == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// A line of `(x, y)` points (x in seconds since the epoch) with an optional dashed projection
/// from the last point, both on a y axis from 0 to `y_max`.
pub fn line(
    title: &str,
    description: &str,
    points: &[(f64, f64)],
    projection: Option<(f64, f64)>,
    y_max: f64,
    unit: &str,
) -> String {
    let mut out = String::new();
    open(&mut out, title, description);
    y_axis(&mut out, y_max, unit);
    let x_min = points.first().map(|p| p.0).unwrap_or(0.0);
    let x_max = projection
        .map(|p| p.0)
        .or_else(|| points.last().map(|p| p.0))
        .unwrap_or(1.0)
        .max(x_min + 1.0);
    let sx = |x: f64| LEFT + (WIDTH - LEFT - RIGHT) * (x - x_min) / (x_max - x_min);
    let sy = |y: f64| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - (y / y_max).clamp(0.0, 1.0));
    if !points.is_empty() {
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
            .collect();
        let _ = write!(
            out,
            r##"<polyline fill="none" stroke="#0b5cad" stroke-width="2" points="{}"/>"##,
            path.join(" ")
        );
    }
    if let (Some((px, py)), Some((lx, ly))) = (projection, points.last()) {
        let _ = write!(
            out,
            r##"<line class="forecast" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#b00020" stroke-width="2" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end">forecast</text>"##,
            sx(*lx),
            sy(*ly),
            sx(px),
            sy(py),
            sx(px),
            (sy(py) - 6.0).max(TOP + 10.0)
        );
    }
    let label = |x: f64| {
        chrono::DateTime::from_timestamp(x as i64, 0)
            .map(|t| t.format("%m-%d %H:%M").to_string())
            .unwrap_or_default()
    };
    if !points.is_empty() {
        let _ = write!(
            out,
            r#"<text x="{LEFT}" y="{}">{}</text><text x="{}" y="{}" text-anchor="end">{}</text>"#,
            HEIGHT - 8.0,
            label(x_min),
            WIDTH - RIGHT,
            HEIGHT - 8.0,
            label(x_max)
        );
    }
    out.push_str("</svg>");
    out
}

/// Bars, one per `(label, value)`, on a y axis from 0 to the largest value.
pub fn bars(title: &str, description: &str, bars: &[(String, f64)], unit: &str) -> String {
    let mut out = String::new();
    open(&mut out, title, description);
    let max = bars.iter().map(|b| b.1).fold(0.0_f64, f64::max);
    let y_max = if max > 0.0 { max * 1.1 } else { 1.0 };
    y_axis(&mut out, y_max, unit);
    let slot = (WIDTH - LEFT - RIGHT) / bars.len().max(1) as f64;
    let plot = HEIGHT - TOP - BOTTOM;
    for (i, (label, value)) in bars.iter().enumerate() {
        let h = plot * (value / y_max).clamp(0.0, 1.0);
        let x = LEFT + slot * i as f64 + slot * 0.15;
        let _ = write!(
            out,
            r##"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="#0b5cad"><title>{}: {}{}</title></rect>"##,
            TOP + plot - h,
            slot * 0.7,
            escape(label),
            short(*value),
            escape(unit)
        );
        // Label every bar when there is room, else about eight of them.
        let every = (bars.len() / 8).max(1);
        if i % every == 0 {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                x + slot * 0.35,
                HEIGHT - 8.0,
                escape(label)
            );
        }
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_labelled_svg_and_escape_text() {
        let svg = line(
            "Disk <used>",
            "a & b",
            &[(0.0, 10.0), (3600.0, 20.0)],
            Some((7200.0, 30.0)),
            100.0,
            "%",
        );
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.ends_with("</svg>"));
        assert!(svg.contains(">Disk &lt;used&gt;</title>"));
        assert!(svg.contains("a &amp; b"));
        assert!(svg.contains("class=\"forecast\""));
        let bars = bars(
            "Cost",
            "per day",
            &[("12-01".into(), 0.5), ("12-02".into(), 0.0)],
            "$",
        );
        assert_eq!(bars.matches("<rect").count(), 2);
    }
}
