//! Comparing two reports: what grew, and where.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};
use vramscope_alloc::format_size;

use crate::schema::Report;

/// A threshold for `--fail-over`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// Absolute growth in bytes.
    Bytes(u64),
    /// Growth relative to A, in percent.
    Percent(f64),
}

impl std::str::FromStr for Threshold {
    type Err = String;
    /// `50MiB`, `1.5GiB`, `1000`, `512KB` ([`vramscope_alloc::parse_size`]), `5%`.
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            return p
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(Threshold::Percent)
                .ok_or_else(|| format!("bad percentage {s:?}"));
        }
        vramscope_alloc::parse_size(t)
            .map(Threshold::Bytes)
            .map_err(|e| format!("{e}, or a percentage such as 5%"))
    }
}

/// One site's change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SiteDelta {
    /// Site.
    pub site: String,
    /// Bytes live at A's peak.
    pub a_bytes: u64,
    /// Bytes live at B's peak.
    pub b_bytes: u64,
    /// B - A.
    pub delta_bytes: i64,
}

/// The comparison.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Diff {
    /// Peak allocated of A.
    pub a_peak_allocated_bytes: u64,
    /// Peak allocated of B.
    pub b_peak_allocated_bytes: u64,
    /// B - A.
    pub peak_allocated_delta_bytes: i64,
    /// Peak reserved of A.
    pub a_peak_reserved_bytes: u64,
    /// Peak reserved of B.
    pub b_peak_reserved_bytes: u64,
    /// B - A.
    pub peak_reserved_delta_bytes: i64,
    /// Per category, B - A at the peak.
    pub categories: Vec<SiteDelta>,
    /// Per site, B - A at the peak, largest growth first.
    pub sites: Vec<SiteDelta>,
}

fn deltas(a: &[(String, u64)], b: &[(String, u64)]) -> Vec<SiteDelta> {
    let mut m: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (k, v) in a {
        m.entry(k).or_default().0 += v;
    }
    for (k, v) in b {
        m.entry(k).or_default().1 += v;
    }
    let mut v: Vec<SiteDelta> = m
        .into_iter()
        .map(|(k, (x, y))| SiteDelta {
            site: k.to_string(),
            a_bytes: x,
            b_bytes: y,
            delta_bytes: y as i64 - x as i64,
        })
        .filter(|d| d.delta_bytes != 0)
        .collect();
    v.sort_by(|x, y| y.delta_bytes.cmp(&x.delta_bytes).then(x.site.cmp(&y.site)));
    v
}

/// Compare two reports (their `live_at_peak.sites` should be untruncated).
pub fn diff(a: &Report, b: &Report) -> Diff {
    let s = |r: &Report| {
        r.live_at_peak
            .sites
            .iter()
            .map(|s| (s.site.clone(), s.bytes))
            .collect::<Vec<_>>()
    };
    let c = |r: &Report| {
        r.categories
            .iter()
            .map(|s| (s.category.clone(), s.bytes))
            .collect::<Vec<_>>()
    };
    Diff {
        a_peak_allocated_bytes: a.peak_allocated_bytes,
        b_peak_allocated_bytes: b.peak_allocated_bytes,
        peak_allocated_delta_bytes: b.peak_allocated_bytes as i64 - a.peak_allocated_bytes as i64,
        a_peak_reserved_bytes: a.peak_reserved_bytes,
        b_peak_reserved_bytes: b.peak_reserved_bytes,
        peak_reserved_delta_bytes: b.peak_reserved_bytes as i64 - a.peak_reserved_bytes as i64,
        categories: deltas(&c(a), &c(b)),
        sites: deltas(&s(a), &s(b)),
    }
}

impl Diff {
    /// Whether peak allocated grew by more than `t`.
    pub fn exceeds(&self, t: Threshold) -> bool {
        let d = self.peak_allocated_delta_bytes;
        match t {
            Threshold::Bytes(b) => d > b as i64,
            Threshold::Percent(p) => {
                let base = self.a_peak_allocated_bytes as f64;
                d > 0 && (base == 0.0 || d as f64 * 100.0 / base > p)
            }
        }
    }
}

fn signed(d: i64) -> String {
    if d < 0 {
        format!("-{}", format_size(d.unsigned_abs()))
    } else {
        format!("+{}", format_size(d as u64))
    }
}

/// The diff as text.
pub fn render_text(d: &Diff, top: usize) -> String {
    let mut o = String::new();
    let pct = |a: u64, dd: i64| {
        if a == 0 {
            String::new()
        } else {
            format!(" ({:+.2}%)", dd as f64 * 100.0 / a as f64)
        }
    };
    let _ = writeln!(
        o,
        "peak allocated  {} -> {}  {}{}",
        format_size(d.a_peak_allocated_bytes),
        format_size(d.b_peak_allocated_bytes),
        signed(d.peak_allocated_delta_bytes),
        pct(d.a_peak_allocated_bytes, d.peak_allocated_delta_bytes)
    );
    let _ = writeln!(
        o,
        "peak reserved   {} -> {}  {}{}",
        format_size(d.a_peak_reserved_bytes),
        format_size(d.b_peak_reserved_bytes),
        signed(d.peak_reserved_delta_bytes),
        pct(d.a_peak_reserved_bytes, d.peak_reserved_delta_bytes)
    );
    for (name, v) in [("by category", &d.categories), ("by site", &d.sites)] {
        let _ = writeln!(o, "\n{name} (live at the peak):");
        if v.is_empty() {
            let _ = writeln!(o, "  no change");
        }
        for s in v.iter().take(top) {
            let _ = writeln!(
                o,
                "  {:>12}  {} -> {}  {}",
                signed(s.delta_bytes),
                format_size(s.a_bytes),
                format_size(s.b_bytes),
                s.site
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::Threshold;
    #[test]
    fn thresholds() {
        assert_eq!("50MiB".parse(), Ok(Threshold::Bytes(50 << 20)));
        assert_eq!("5%".parse(), Ok(Threshold::Percent(5.0)));
        assert_eq!("1000".parse(), Ok(Threshold::Bytes(1000)));
        assert_eq!("1.5 GiB".parse(), Ok(Threshold::Bytes(3 << 29)));
        assert!("5 parsecs".parse::<Threshold>().is_err());
    }
}
