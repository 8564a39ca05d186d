//! Sizes as PyTorch prints them (`c10::CachingAllocator::format_size`).

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

#[cfg(test)]
mod tests {
    use super::format_size;
    #[test]
    fn sizes() {
        assert_eq!(format_size(512), "512 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(20 << 20), "20.00 MiB");
        assert_eq!(format_size(3 << 30), "3.00 GiB");
    }
}
