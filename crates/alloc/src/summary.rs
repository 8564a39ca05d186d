//! `torch.cuda.memory_summary()`, in PyTorch's own table format
//! (`torch/cuda/memory.py`, `memory_summary`).

use crate::stats::{DeviceStats, Stat, StatArray, StatType};

/// `_format_size`: scale by 1024 while the reference value is >= 768 KiB.
fn fmt_size(mut sz: i64, pref: i64) -> String {
    let prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut prefix = prefixes[0];
    let mut pref = pref as f64;
    for p in &prefixes[1..] {
        if pref < 768.0 * 1024.0 {
            break;
        }
        prefix = p;
        sz = sz.div_euclid(1024);
        pref /= 1024.0;
    }
    format!("{sz:6} {prefix}")
}

/// `_format_count`: scale by 1000 while the reference value is >= 750,000.
fn fmt_count(mut cnt: i64, pref: i64) -> String {
    let prefixes = [" ", "K", "M"];
    let mut prefix = prefixes[0];
    let mut pref = pref as f64;
    for p in &prefixes[1..] {
        if pref < 750.0 * 1000.0 {
            break;
        }
        prefix = p;
        cnt = cnt.div_euclid(1000);
        pref /= 1000.0;
    }
    format!("{cnt:7} {prefix} ")
}

type Fmt = fn(i64, i64) -> String;

fn row(name: &str, s: &Stat, p: &Stat, f: Fmt) -> String {
    format!(
        " {name:<21} | {} | {} | {} | {} ",
        f(s.current, p.current),
        f(s.peak, p.peak),
        f(s.allocated, p.allocated),
        f(s.freed, p.freed)
    )
}

/// `memory_summary(device, abbreviated)`: the exact text PyTorch returns.
pub fn memory_summary(stats: &DeviceStats, device: u32, abbreviated: bool) -> String {
    let rule = |c: &str| c.repeat(75);
    let mut lines = vec![
        rule("="),
        format!(
            " {:16} PyTorch CUDA memory summary, device ID {device:<17} ",
            ""
        ),
        rule("-"),
        format!(
            "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
            "", stats.num_ooms, "", stats.num_alloc_retries
        ),
        rule("="),
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".to_string(),
    ];
    let metrics: [(&StatArray, &str, Fmt); 9] = [
        (&stats.allocated_bytes, "Allocated memory", fmt_size),
        (stats.active_bytes(), "Active memory", fmt_size),
        (&stats.requested_bytes, "Requested memory", fmt_size),
        (&stats.reserved_bytes, "GPU reserved memory", fmt_size),
        (
            &stats.inactive_split_bytes,
            "Non-releasable memory",
            fmt_size,
        ),
        (&stats.allocation, "Allocations", fmt_count),
        (stats.active(), "Active allocs", fmt_count),
        (&stats.segment, "GPU reserved segments", fmt_count),
        (&stats.inactive_split, "Non-releasable allocs", fmt_count),
    ];
    for (arr, name, f) in metrics {
        lines.push(rule("-"));
        let all = &arr.all();
        lines.push(row(name, all, all, f));
        if !abbreviated {
            let (large, small) = if stats.malloc_async {
                // (backend:cudaMallocAsync: its pool's aggregates alone, the pools' rows zero)
                (Stat::default(), Stat::default())
            } else {
                (arr.get(StatType::LargePool), arr.get(StatType::SmallPool))
            };
            lines.push(row("      from large pool", &large, all, f));
            lines.push(row("      from small pool", &small, all, f));
        }
    }
    for (s, name) in [
        (&stats.oversize_allocations, "Oversize allocations"),
        (&stats.oversize_segments, "Oversize GPU segments"),
    ] {
        lines.push(rule("-"));
        lines.push(row(name, s, s, fmt_count));
    }
    lines.push(rule("="));
    format!("|{}|\n", lines.join("|\n|"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_summary_shape() {
        let s = memory_summary(&DeviceStats::default(), 0, false);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines.iter().all(|l| l.len() == 77), "{s}");
        assert!(lines[1].contains("PyTorch CUDA memory summary, device ID 0"));
        assert_eq!(
            lines[6],
            "|-----------------------------------------------------------------------------|"
                .replace(
                    "-----------------------------------------------------------------------------",
                    &"-".repeat(75)
                )
                .as_str()
        );
    }

    #[test]
    fn sizes_scale_by_reference() {
        assert_eq!(fmt_size(512, 512), "   512 B  ");
        // MiB only from 768 MiB on: PyTorch prints 20 MiB as KiB.
        assert_eq!(fmt_size(20 << 20, 20 << 20), " 20480 KiB");
        assert_eq!(fmt_size(1 << 30, 1 << 30), "  1024 MiB");
        // A sub-row is scaled by the aggregate's magnitude.
        assert_eq!(fmt_size(512, 20 << 20), "     0 KiB");
        assert_eq!(fmt_count(3, 3), "      3   ");
    }
}
