//! Sizes as PyTorch prints them (`c10::CachingAllocator::format_size`), and
//! the one size syntax every command line option takes ([`parse_size`]).

/// `format_size`: "512 bytes", "1.50 KiB", "20.00 MiB", "1.23 GiB".
pub fn format_size(size: u64) -> String {
    if size <= 1024 {
        format!("{size} bytes")
    } else if size <= 1_048_576 {
        format!("{:.2} KiB", size as f64 / 1024.0)
    } else if size <= 1_073_741_824 {
        format!("{:.2} MiB", size as f64 / 1_048_576.0)
    } else {
        format!("{:.2} GiB", size as f64 / 1_073_741_824.0)
    }
}

/// A size as a person writes it: bytes (`25769803776`), binary units
/// (`24GiB`, `512MiB`, `1.5KiB`, `1TiB`; `24G`, `512M`, `1K`, `1T` mean the
/// same), or decimal ones (`24GB` = 24 x 10^9, `512MB`, `1KB`, `1TB`), case
/// and a space before the unit ignored. The error says what was given and
/// what is expected.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let expected = "expected a size such as 24GiB, 24GB, 24G or a number of bytes";
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size: {expected}"))?;
    let k = 1024.0_f64;
    let mul = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 1.0,
        "kib" | "k" => k,
        "mib" | "m" => k * k,
        "gib" | "g" => k * k * k,
        "tib" | "t" => k * k * k * k,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        u => {
            return Err(format!(
                "unknown unit {u:?} in {s:?}: {expected} (units: B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB, TB)"
            ))
        }
    };
    let bytes = (v * mul).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is too large: {expected}"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::{format_size, parse_size};

    #[test]
    fn one_size_syntax() {
        for s in ["24GiB", "24G", "24 gib", "25769803776", "24g"] {
            assert_eq!(parse_size(s), Ok(24 << 30), "{s}");
        }
        assert_eq!(parse_size("24GB"), Ok(24_000_000_000));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("24 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("GiB").unwrap_err().contains("is not a size"));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("1e30TiB").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(format_size(512), "512 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(20 << 20), "20.00 MiB");
        assert_eq!(format_size(3 << 30), "3.00 GiB");
    }
}
