//! The terminal renderer: a summary a person reads in ten seconds.

use std::fmt::Write;

use vramscope_alloc::format_size;

use crate::schema::{LayoutJson, Report};

fn at(i: Option<usize>) -> String {
    i.map_or("before the trace".into(), |i| format!("trace entry {i}"))
}

fn table(out: &mut String, head: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (k, c) in r.iter().enumerate() {
            w[k] = w[k].max(c.chars().count());
        }
    }
    let line = |out: &mut String, cells: Vec<String>| {
        let mut s = String::from(" ");
        for (k, c) in cells.iter().enumerate() {
            let pad = w[k] - c.chars().count();
            // Numbers (first columns) right-aligned, text left-aligned.
            if k + 1 < cells.len() && k < 2 {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if k + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if k + 1 < cells.len() {
                s.push_str("  ");
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    line(out, head.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(out, r.clone());
    }
}

fn layout(out: &mut String, name: &str, l: &LayoutJson) {
    let _ = writeln!(
        out,
        "  {name}: {} in {} inactive split block(s), largest free block {}",
        format_size(l.inactive_split_bytes),
        l.inactive_split_blocks,
        format_size(l.largest_free_block_bytes)
    );
}

/// Render the report; `stacks` prints the full stack of each site.
pub fn render(r: &Report, stacks: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} (device {}, {} trace entries)",
        r.snapshot, r.device, r.trace_entries
    );
    if let Some(w) = r.range {
        let _ = writeln!(
            o,
            "range: trace entries {} to {} only (the peaks, live memory and OOMs below are of these)",
            w.from, w.to
        );
    }
    let _ = writeln!(
        o,
        "peak allocated  {:>12}  at {}",
        format_size(r.peak_allocated_bytes),
        at(r.peak_trace_index)
    );
    let _ = writeln!(
        o,
        "peak active     {:>12}  at {}",
        format_size(r.peak_active_bytes),
        at(r.peak_active_trace_index)
    );
    let _ = writeln!(
        o,
        "peak reserved   {:>12}  at {}",
        format_size(r.peak_reserved_bytes),
        at(r.peak_reserved_trace_index)
    );
    let _ = writeln!(
        o,
        "at the end      {:>12} allocated, {} reserved",
        format_size(r.final_allocated_bytes),
        format_size(r.final_reserved_bytes)
    );
    for u in &r.unknown {
        let _ = writeln!(o, "note: {u}");
    }
    let l = &r.live_at_peak;
    let _ = writeln!(
        o,
        "\nlive at the peak: {} in {} allocation(s) from {} site(s)",
        format_size(l.bytes),
        l.count,
        l.site_count
    );
    // a site that mixes categories says so, and how much of each, on a
    // line of its own (its bytes are split in the category table too)
    let mut rows: Vec<Vec<String>> = Vec::new();
    for s in &l.sites {
        let mixed = s.categories.len() > 1;
        rows.push(vec![
            format_size(s.bytes),
            s.count.to_string(),
            if mixed {
                format!("mixed ({})", s.categories.len())
            } else {
                s.category.clone()
            },
            match &s.module_path {
                Some(m) => format!("{}  [{m}]", s.site),
                None => s.site.clone(),
            },
        ]);
        if mixed {
            let parts: Vec<String> = s
                .categories
                .iter()
                .map(|c| format!("{} {}", c.category, format_size(c.bytes)))
                .collect();
            rows.push(vec![
                String::new(),
                String::new(),
                String::new(),
                format!("  = {}", parts.join(", ")),
            ]);
        }
    }
    table(&mut o, &["bytes", "count", "category", "site"], &rows);
    if stacks {
        for s in &l.sites {
            let _ = writeln!(o, "\n  {} ({}):", s.site, format_size(s.bytes));
            for f in &s.stack {
                let _ = writeln!(o, "    {f}");
            }
        }
    }
    let _ = writeln!(o, "\nby category (live at the peak):");
    let rows: Vec<Vec<String>> = r
        .categories
        .iter()
        .map(|c| {
            vec![
                format_size(c.bytes),
                c.count.to_string(),
                c.category.clone(),
                c.evidence.first().cloned().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &mut o,
        &["bytes", "count", "category", "evidence (e.g.)"],
        &rows,
    );
    let _ = writeln!(o, "\nlargest allocations at the peak:");
    let rows: Vec<Vec<String>> = l
        .top_tensors
        .iter()
        .map(|t| {
            vec![
                format_size(t.bytes),
                t.alloc_trace_index.map_or("-".into(), |i| i.to_string()),
                t.category.clone(),
                t.site.clone(),
            ]
        })
        .collect();
    table(&mut o, &["bytes", "alloc at", "category", "site"], &rows);
    let f = &r.fragmentation;
    let _ = writeln!(
        o,
        "\nfragmentation: {} reserved but not allocated at the peak",
        format_size(f.reserved_minus_allocated_at_peak_bytes)
    );
    if let Some(p) = &f.at_peak {
        layout(&mut o, "at the peak", p);
    }
    layout(&mut o, "at the end", &f.at_end);
    let _ = writeln!(
        o,
        "  empty_cache() at the end would release {}",
        format_size(f.empty_cache_would_release_bytes)
    );
    for m in &r.ooms {
        let _ = writeln!(
            o,
            "\nout of memory at trace entry {}: {} requested with {} allocated, {} reserved{}; from {}",
            m.trace_index,
            format_size(m.requested_bytes),
            format_size(m.allocated_before_bytes),
            format_size(m.reserved_before_bytes),
            m.device_free_bytes
                .map_or(String::new(), |f| format!(", {} free on the device", format_size(f))),
            m.site
        );
    }
    o
}
