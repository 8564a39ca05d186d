//! `PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_ALLOC_CONF`: the allocator's settings,
//! parsed token for token as `c10/core/AllocatorConfig.cpp` (PyTorch 2.11)
//! does, with the same validation rules and error wording.

use std::fmt;

/// 1 MiB.
pub const MIB: u64 = 1024 * 1024;
/// `kLargeBuffer` (CUDACachingAllocator.cpp): 20 MiB, the segment size for
/// requests between 1 and 10 MiB and the default `max_non_split_rounding`.
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// Number of power-of-two intervals of `roundup_power2_divisions`
/// (`kRoundUpPowerOfTwoIntervals`, AllocatorConfig.cpp): 1 MiB .. 64 GiB.
pub const ROUNDUP_INTERVALS: usize = 16;

/// The allocator settings that change its behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
    /// `max_split_size_mb` in bytes; `u64::MAX` (the default) means unlimited.
    pub max_split_size: u64,
    /// `large_segment_size_mb` in bytes (default 20 MiB, `kLargeBuffer`): the
    /// segment for requests of 1 to 10 MiB, and the large pool's page of
    /// expandable segments.
    pub large_segment_size: u64,
    /// `max_non_split_rounding_mb` in bytes (default `kLargeBuffer`).
    pub max_non_split_rounding_size: u64,
    /// `garbage_collection_threshold` (0 = off).
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `roundup_power2_divisions`, one entry per interval starting at 1 MiB.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// `release_lock_on_cudamalloc` (no effect on memory; kept for snapshots).
    pub release_lock_on_cudamalloc: bool,
    /// `pinned_use_cuda_host_register` (host allocator only).
    pub pinned_use_cuda_host_register: bool,
    /// `pinned_num_register_threads` (host allocator only).
    pub pinned_num_register_threads: u64,
    /// `pinned_use_background_threads` (host allocator only).
    pub pinned_use_background_threads: bool,
    /// `backend:cudaMallocAsync` was asked for (the twin models `native` only).
    pub backend_malloc_async: bool,
    /// The settings string as given (`last_allocator_settings`).
    pub settings: String,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        // Defaults: AllocatorConfig::AllocatorConfig (c10/core/AllocatorConfig.cpp).
        Self {
            max_split_size: u64::MAX,
            large_segment_size: LARGE_BUFFER,
            max_non_split_rounding_size: LARGE_BUFFER,
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            release_lock_on_cudamalloc: false,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_use_background_threads: false,
            backend_malloc_async: false,
            settings: String::new(),
        }
    }
}

/// An invalid settings string; the message follows PyTorch's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid allocator settings: {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

fn err<T>(message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        message: message.into(),
    })
}

/// `AllocatorConfig::lexArgs`: split on `, : [ ]` (kept as tokens), drop spaces.
fn lex(env: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = String::new();
    for c in env.chars() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !buf.is_empty() {
                out.push(std::mem::take(&mut buf));
            }
            out.push(c.to_string());
        } else if c != ' ' {
            buf.push(c);
        }
    }
    if !buf.is_empty() {
        out.push(buf);
    }
    out
}

/// C++ `stoi`/`stoul`: leading whitespace, optional sign, digits; trailing junk ignored.
fn stoi(s: &str) -> Result<u64, ConfigError> {
    let t = s.trim_start();
    let digits: String = t
        .strip_prefix('+')
        .unwrap_or(t)
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    if t.starts_with('-') {
        return err(format!("negative value '{s}' is not allowed"));
    }
    digits
        .parse::<u64>()
        .or_else(|_| err(format!("expected an integer, got '{s}'")))
}

fn stod(s: &str) -> Result<f64, ConfigError> {
    // `std::stod` parses the longest valid prefix.
    let t = s.trim_start();
    let mut end = 0;
    for i in (1..=t.len()).rev() {
        if t.is_char_boundary(i) && t[..i].parse::<f64>().is_ok() {
            end = i;
            break;
        }
    }
    if end == 0 {
        return err(format!("expected a number, got '{s}'"));
    }
    Ok(t[..end].parse::<f64>().unwrap_or(0.0))
}

struct Parser<'a> {
    tokens: &'a [String],
}

impl Parser<'_> {
    fn consume(&self, i: usize, c: char) -> Result<(), ConfigError> {
        match self.tokens.get(i) {
            Some(t) if t.len() == 1 && t.starts_with(c) => Ok(()),
            _ => err(format!(
                "Error parsing CachingAllocator::AllocatorConfig settings, expected {c}"
            )),
        }
    }
    fn value(&self, i: usize, what: &str) -> Result<&str, ConfigError> {
        match self.tokens.get(i) {
            Some(t) => Ok(t.as_str()),
            None => err(format!("Error, expecting {what} value")),
        }
    }
    fn bool_value(&self, i: usize, what: &str) -> Result<bool, ConfigError> {
        match self.tokens.get(i).map(String::as_str) {
            Some("True") => Ok(true),
            Some("False") => Ok(false),
            _ => err(format!("Expected a single True/False argument for {what}")),
        }
    }
}

impl AllocatorConfig {
    /// Parse a `PYTORCH_CUDA_ALLOC_CONF` string (`AllocatorConfig::parseArgs`).
    ///
    /// An empty string gives the defaults.
    pub fn parse(env: &str) -> Result<Self, ConfigError> {
        let mut cfg = AllocatorConfig {
            settings: env.to_string(),
            ..AllocatorConfig::default()
        };
        let tokens = lex(env);
        let p = Parser { tokens: &tokens };
        let mut i = 0;
        while i < tokens.len() {
            match tokens[i].as_str() {
                "max_split_size_mb" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    let v = stoi(p.value(i, "max_split_size_mb")?)?;
                    // min_allowed_split_size_mb = kLargeBuffer / kMB = 20.
                    if v < LARGE_BUFFER / MIB {
                        return err(format!(
                            "CachingAllocator option max_split_size_mb too small, must be >= {}",
                            LARGE_BUFFER / MIB
                        ));
                    }
                    cfg.max_split_size = v.min(u64::MAX / MIB) * MIB;
                }
                "max_non_split_rounding_mb" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    let v = stoi(p.value(i, "max_non_split_rounding_mb")?)?;
                    if v < LARGE_BUFFER / MIB {
                        return err(format!(
                            "CachingAllocator option max_non_split_rounding_mb too small, must be >= {}",
                            LARGE_BUFFER / MIB
                        ));
                    }
                    cfg.max_non_split_rounding_size = v.min(u64::MAX / MIB) * MIB;
                }
                "large_segment_size_mb" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    let v = stoi(p.value(i, "large_segment_size_mb")?)?;
                    if v == 0 {
                        return err("CachingAllocator option large_segment_size_mb must be > 0");
                    }
                    cfg.large_segment_size = v.min(u64::MAX / MIB) * MIB;
                }
                "garbage_collection_threshold" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    let v = stod(p.value(i, "garbage_collection_threshold")?)?;
                    if !(v > 0.0 && v < 1.0) {
                        return err("garbage_collect_threshold is invalid, set it in (0.0, 1.0)");
                    }
                    cfg.garbage_collection_threshold = v;
                }
                "roundup_power2_divisions" => {
                    i = parse_roundup(&p, i, &mut cfg.roundup_power2_divisions)?;
                }
                "backend" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    match p.value(i, "backend")? {
                        "native" => cfg.backend_malloc_async = false,
                        "cudaMallocAsync" => cfg.backend_malloc_async = true,
                        _ => {
                            return err(
                                "Unknown allocator backend, options are native and cudaMallocAsync",
                            )
                        }
                    }
                }
                "expandable_segments" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    cfg.expandable_segments = p.bool_value(i, "expandable_segments")?;
                }
                "release_lock_on_cudamalloc" | "release_lock_on_hipmalloc" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    cfg.release_lock_on_cudamalloc =
                        p.bool_value(i, "release_lock_on_cudamalloc")?;
                }
                "pinned_use_cuda_host_register" | "pinned_use_hip_host_register" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    cfg.pinned_use_cuda_host_register =
                        p.bool_value(i, "pinned_use_cuda_host_register")?;
                }
                "pinned_num_register_threads" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    let v = stoi(p.value(i, "pinned_num_register_threads")?)?;
                    if !v.is_power_of_two() {
                        return err("Number of register threads has to be power of 2 ");
                    }
                    // pinned_max_register_threads() = 128 (CachingHostAllocator).
                    if v > 128 {
                        return err(
                            "Number of register threads should be less than or equal to 128",
                        );
                    }
                    cfg.pinned_num_register_threads = v;
                }
                "pinned_use_background_threads" => {
                    p.consume(i + 1, ':')?;
                    i += 2;
                    cfg.pinned_use_background_threads =
                        p.bool_value(i, "pinned_use_background_threads")?;
                }
                other => return err(format!("Unrecognized CachingAllocator option: {other}")),
            }
            if i + 1 < tokens.len() {
                p.consume(i + 1, ',')?;
                i += 1;
            }
            i += 1;
        }
        Ok(cfg)
    }

    /// `AllocatorConfig::roundup_power2_divisions(size)`: the divisions for the
    /// power-of-two interval holding `size` (clamped to 1 MiB .. 32 GiB).
    pub fn roundup_divisions_for(&self, size: u64) -> u64 {
        let log_size = 63 - size.max(1).leading_zeros() as i64;
        let index = (log_size - 20).clamp(0, ROUNDUP_INTERVALS as i64 - 1);
        self.roundup_power2_divisions[index as usize]
    }
}

/// A shortcut a caller of the allocator may take instead of replaying every
/// request; [`AllocatorConfig::allows`] says whether its settings keep it
/// exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortcut {
    /// A run whose reserved memory stayed under a limit is the same run
    /// under that limit (the limit is met only when a malloc would go over
    /// it). `memory_fraction`: the limit is `set_memory_fraction`'s.
    UnmetLimit {
        /// the limit comes from `set_memory_fraction`
        memory_fraction: bool,
    },
    /// A step that starts as the step before it started and makes the same
    /// requests ends as that step ended (no setting releases cached blocks
    /// by their age).
    MirroredSteps,
    /// Mallocs made again in the same order from the same free blocks plus
    /// the segments they created take the same blocks
    /// ([`crate::CachingAllocator::repeats_with_its_segments`]): best fit and
    /// segment creation alone decide which block a malloc takes.
    RepeatedFits,
}

impl AllocatorConfig {
    /// Whether `shortcut` gives what replaying every request gives under
    /// these settings.
    ///
    /// Every setting answers here: the struct is destructured without `..`,
    /// so a new setting does not compile until it says which shortcuts stay
    /// exact with it.
    pub fn allows(&self, shortcut: Shortcut) -> bool {
        let AllocatorConfig {
            // Oversize blocks are never split and a malloc over the limit
            // frees cached oversize blocks (`get_free_block`,
            // `release_available_cached_blocks`): best fit no longer decides
            // alone.
            max_split_size,
            // Frees old cached blocks at a fraction's threshold before the
            // limit (`garbage_collect_cached_blocks`), by an age that counts
            // calls: when blocks are released depends on the history.
            garbage_collection_threshold,
            // Segments grow page by page; a fraction's check counts the
            // whole rounded request (`alloc_block`), and best fit is by the
            // size a block can expand to (`get_free_block`).
            expandable_segments,
            // Sizes only (the segment and the rounding of a request): they
            // change how much is asked for, never when a cached block is
            // released or which free block a malloc takes.
            large_segment_size: _,
            max_non_split_rounding_size: _,
            roundup_power2_divisions: _,
            // No effect on device memory (the lock; the host allocator; the
            // twin models the `native` backend only; the string as given).
            release_lock_on_cudamalloc: _,
            pinned_use_cuda_host_register: _,
            pinned_num_register_threads: _,
            pinned_use_background_threads: _,
            backend_malloc_async: _,
            settings: _,
        } = self;
        let gc = *garbage_collection_threshold != 0.0;
        match shortcut {
            Shortcut::UnmetLimit { memory_fraction } => {
                !(memory_fraction && (gc || *expandable_segments))
            }
            Shortcut::MirroredSteps => !gc,
            Shortcut::RepeatedFits => *max_split_size == u64::MAX && !expandable_segments && !gc,
        }
    }
}

/// `AllocatorConfig::parseRoundUpPower2Divisions`, both the single-number
/// and the per-interval `[64:8,256:4,>:1]` form. Returns the last index used.
fn parse_roundup(
    p: &Parser<'_>,
    mut i: usize,
    div: &mut [u64; ROUNDUP_INTERVALS],
) -> Result<usize, ConfigError> {
    p.consume(i + 1, ':')?;
    i += 2;
    let first = p.value(i, "roundup_power2_divisions")?;
    if first == "[" {
        let mut last_index = 0usize;
        let mut first_value = true;
        loop {
            i += 1;
            match p.tokens.get(i).map(String::as_str) {
                None => return err("Error parsing roundup_power2_divisions value"),
                Some("]") => break,
                Some(_) => {}
            }
            let key = p.tokens[i].clone();
            p.consume(i + 1, ':')?;
            i += 2;
            let val = match p.tokens.get(i) {
                Some(v) => stoi(v)?,
                None => return err("Error parsing roundup_power2_divisions value"),
            };
            if !(val == 0 || val.is_power_of_two()) {
                return err(
                    "For roundups, the divisons has to be power of 2 or 0 to disable roundup ",
                );
            }
            if key == ">" {
                // Measured on PyTorch 2.11 (fixtures/alloc/roundup_intervals):
                // `>` fills the intervals *after* the last one named; the
                // named one keeps its own value.
                for d in div.iter_mut().skip(last_index + 1) {
                    *d = val;
                }
            } else {
                let k = stoi(&key)?;
                if !k.is_power_of_two() {
                    return err("For roundups, the intervals have to be power of 2 ");
                }
                let index = (63 - k.leading_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                if first_value {
                    for d in div.iter_mut().take(index) {
                        *d = val;
                    }
                    first_value = false;
                }
                div[index] = val;
                last_index = index;
            }
            match p.tokens.get(i + 1).map(String::as_str) {
                Some("]") => {}
                _ => {
                    p.consume(i + 1, ',')?;
                    i += 1;
                }
            }
        }
    } else {
        // Single number, kept for backwards compatibility: every interval.
        let v = stoi(first)?;
        if !v.is_power_of_two() {
            return err("For roundups, the divisons has to be power of 2 ");
        }
        *div = [v; ROUNDUP_INTERVALS];
    }
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each setting alone, as `PYTORCH_CUDA_ALLOC_CONF` gives it.
    fn alone(setting: &str) -> AllocatorConfig {
        AllocatorConfig::parse(setting).unwrap()
    }

    const SHORTCUTS: [Shortcut; 4] = [
        Shortcut::UnmetLimit {
            memory_fraction: false,
        },
        Shortcut::UnmetLimit {
            memory_fraction: true,
        },
        Shortcut::MirroredSteps,
        Shortcut::RepeatedFits,
    ];

    #[test]
    fn defaults_allow_every_shortcut() {
        for s in SHORTCUTS {
            assert!(AllocatorConfig::default().allows(s), "{s:?}");
        }
    }

    #[test]
    fn garbage_collection_allows_no_shortcut_that_a_fraction_arms() {
        // It releases cached blocks before the limit, by their age.
        let c = alone("garbage_collection_threshold:0.6");
        assert!(!c.allows(Shortcut::UnmetLimit {
            memory_fraction: true
        }));
        assert!(!c.allows(Shortcut::MirroredSteps));
        assert!(!c.allows(Shortcut::RepeatedFits));
        // without a fraction it never runs
        assert!(c.allows(Shortcut::UnmetLimit {
            memory_fraction: false
        }));
    }

    #[test]
    fn expandable_segments_meet_a_fraction_early_and_fit_by_expansion() {
        let c = alone("expandable_segments:True");
        assert!(!c.allows(Shortcut::UnmetLimit {
            memory_fraction: true
        }));
        assert!(!c.allows(Shortcut::RepeatedFits));
        assert!(c.allows(Shortcut::MirroredSteps));
    }

    #[test]
    fn max_split_size_leaves_best_fit_not_alone() {
        let c = alone("max_split_size_mb:40");
        assert!(!c.allows(Shortcut::RepeatedFits));
        assert!(c.allows(Shortcut::MirroredSteps));
        assert!(c.allows(Shortcut::UnmetLimit {
            memory_fraction: true
        }));
    }

    #[test]
    fn sizes_only_settings_allow_every_shortcut() {
        for setting in [
            "large_segment_size_mb:40",
            "max_non_split_rounding_mb:40",
            "roundup_power2_divisions:4",
            "release_lock_on_cudamalloc:True",
            "pinned_use_cuda_host_register:True",
            "pinned_num_register_threads:8",
            "pinned_use_background_threads:True",
            "backend:cudaMallocAsync",
        ] {
            for s in SHORTCUTS {
                assert!(alone(setting).allows(s), "{setting} {s:?}");
            }
        }
    }

    #[test]
    fn empty_is_default() {
        let c = AllocatorConfig::parse("").unwrap();
        assert_eq!(c.max_split_size, u64::MAX);
        assert!(!c.expandable_segments);
    }

    #[test]
    fn full_string() {
        let c = AllocatorConfig::parse(
            "max_split_size_mb:40, max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,expandable_segments:True",
        )
        .unwrap();
        assert_eq!(c.max_split_size, 40 * MIB);
        assert_eq!(c.max_non_split_rounding_size, 30 * MIB);
        assert_eq!(c.garbage_collection_threshold, 0.5);
        assert!(c.expandable_segments);
    }

    #[test]
    fn roundup_single() {
        let c = AllocatorConfig::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.roundup_power2_divisions, [4; 16]);
    }

    #[test]
    fn roundup_intervals() {
        // The example of PyTorch's own test (test_cuda.py):
        // [1:1,256:2,512:2,1024:4,>:8] and [64:8,256:4,>:1].
        let c = AllocatorConfig::parse("roundup_power2_divisions:[64:8,256:4,>:1]").unwrap();
        let d = c.roundup_power2_divisions;
        // `>` fills the intervals after the last named one (measured).
        assert_eq!(&d[..7], &[8; 7]);
        assert_eq!(d[7], 0);
        assert_eq!(d[8], 4);
        assert_eq!(&d[9..], &[1; 7]);
        assert_eq!(c.roundup_divisions_for(100 * MIB), 8);
        assert_eq!(c.roundup_divisions_for(200 * MIB), 0);
        assert_eq!(c.roundup_divisions_for(300 * MIB), 4);
        assert_eq!(c.roundup_divisions_for(600 * MIB), 1);
        assert_eq!(c.roundup_divisions_for(1 << 40), 1);
        assert_eq!(c.roundup_divisions_for(1000), 8);
    }

    #[test]
    fn errors() {
        for bad in [
            "max_split_size_mb:10",
            "max_split_size_mb",
            "expandable_segments:yes",
            "foo:1",
            "garbage_collection_threshold:1.5",
            "roundup_power2_divisions:3",
            "roundup_power2_divisions:[64:3]",
            "expandable_segments:True;max_split_size_mb:20",
        ] {
            assert!(AllocatorConfig::parse(bad).is_err(), "{bad}");
        }
    }
}
