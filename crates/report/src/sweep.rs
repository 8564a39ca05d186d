//! The HTML plot of a sweep (`vramscope plan --batch LIST --seq LIST
//! --html FILE`): peak reserved memory against batch size, one line per
//! sequence length, the limit as a horizontal line, cells that do not fit
//! drawn hollow. One self-contained file of inline SVG: no script, no
//! network; hovering a point shows its figures (SVG `<title>`).

use std::fmt::Write;

use vramscope_alloc::format_size;

use crate::html::escape;

/// One cell of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepPoint {
    /// batch size
    pub batch: i64,
    /// sequence length
    pub seq: i64,
    /// peak reserved bytes of the whole workload
    pub peak_reserved_bytes: i64,
    /// every step completes under the limit
    pub fits: bool,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

/// The page: `title` on top, `capacity` the limit in bytes.
pub fn render_sweep(title: &str, capacity: u64, points: &[SweepPoint]) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 520.0, 80.0, 150.0, 20.0, 50.0);
    let bmax = points.iter().map(|p| p.batch).max().unwrap_or(1).max(1) as f64;
    let ymax = points
        .iter()
        .map(|p| p.peak_reserved_bytes.max(0) as f64)
        .fold(capacity as f64, f64::max)
        .max(1.0)
        * 1.05;
    let x = |b: f64| left + (w - left - right) * b / bmax;
    let y = |v: f64| top + (h - top - bottom) * (1.0 - v / ymax);
    let gib = 1024.0 * 1024.0 * 1024.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg id="plot" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    // axes and grid
    let step = nice_step(ymax / gib / 6.0);
    let mut v = 0.0;
    while v * gib <= ymax {
        let yy = y(v * gib);
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{v} GiB</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0
        );
        v += step;
    }
    let bstep = nice_step(bmax / 8.0).max(1.0);
    let mut b = 0.0;
    while b <= bmax {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{b}</text>"#,
            x(b),
            h - bottom + 16.0
        );
        b += bstep;
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{}" text-anchor="middle">batch size</text><line x1="{left}" x2="{left}" y1="{top}" y2="{}" stroke="#444"/><line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="#444"/>"##,
        (left + w - right) / 2.0,
        h - 12.0,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    // the limit
    let cy = y(capacity as f64);
    let _ = write!(
        svg,
        r##"<line id="limit" x1="{left}" x2="{}" y1="{cy:.1}" y2="{cy:.1}" stroke="#000" stroke-dasharray="6 4"/><text x="{}" y="{:.1}">limit {}</text>"##,
        w - right,
        w - right + 4.0,
        cy + 4.0,
        format_size(capacity)
    );
    let mut seqs: Vec<i64> = points.iter().map(|p| p.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    for (k, seq) in seqs.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mut line: Vec<&SweepPoint> = points.iter().filter(|p| p.seq == *seq).collect();
        line.sort_by_key(|p| p.batch);
        let path: Vec<String> = line
            .iter()
            .map(|p| {
                format!(
                    "{:.1},{:.1}",
                    x(p.batch as f64),
                    y(p.peak_reserved_bytes as f64)
                )
            })
            .collect();
        let _ = write!(
            svg,
            r#"<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        );
        for p in &line {
            let _ = write!(
                svg,
                r#"<circle class="cell" cx="{:.1}" cy="{:.1}" r="3.5" stroke="{color}" fill="{}"><title>batch {} seq {}: peak reserved {} ({})</title></circle>"#,
                x(p.batch as f64),
                y(p.peak_reserved_bytes as f64),
                if p.fits { color } else { "white" },
                p.batch,
                p.seq,
                format_size(p.peak_reserved_bytes.max(0) as u64),
                if p.fits { "fits" } else { "does not fit" }
            );
        }
        let ly = top + 16.0 * k as f64 + 10.0;
        let _ = write!(
            svg,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">seq {seq}</text>"#,
            w - right + 10.0,
            w - right + 30.0,
            w - right + 36.0,
            ly + 4.0
        );
    }
    svg.push_str("</svg>");
    let fits: Vec<String> = seqs
        .iter()
        .map(|s| {
            let best = points
                .iter()
                .filter(|p| p.seq == *s && p.fits)
                .map(|p| p.batch)
                .max();
            format!(
                "<tr><td>{s}</td><td>{}</td></tr>",
                best.map_or("none".to_string(), |b| b.to_string())
            )
        })
        .collect();
    format!(
        r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{t}</title>
<style>body{{font-family:sans-serif;margin:20px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px}}</style>
</head><body><h2>{t}</h2>
<p>Peak reserved memory of the whole workload per batch size and sequence length; hollow points do not fit under the limit (dashed). Hover a point for its figures.</p>
{svg}
<table><tr><th>seq</th><th>largest batch that fits</th></tr>{rows}</table>
</body></html>
"#,
        t = escape(title),
        rows = fits.join("")
    )
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts() -> Vec<SweepPoint> {
        (1..=8)
            .flat_map(|b| {
                [512, 1024].map(|s| SweepPoint {
                    batch: b,
                    seq: s,
                    peak_reserved_bytes: b * s * 1_000_000,
                    fits: b * s <= 4096,
                })
            })
            .collect()
    }

    #[test]
    fn one_line_per_seq_one_point_per_cell_and_the_limit() {
        let page = render_sweep("llama <8b>", 4_096_000_000, &pts());
        assert_eq!(page.matches("<polyline").count(), 2);
        assert_eq!(page.matches("<circle").count(), 16);
        assert_eq!(page.matches(r#"fill="white""#).count(), 4);
        assert!(page.contains("id=\"limit\""));
        assert!(page.contains("llama &lt;8b&gt;"));
        assert!(page.contains("<tr><td>512</td><td>8</td></tr>"));
        assert!(page.contains("<tr><td>1024</td><td>4</td></tr>"));
        assert!(!page.contains("https://") && !page.contains("<script"));
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(0.0), 1.0);
    }
}
