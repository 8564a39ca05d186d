//! `PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_ALLOC_CONF` and
//! `torch._C._accelerator_setAllocatorSettings`: the allocator's settings,
//! parsed token for token as PyTorch 2.11 parses them
//! (`AcceleratorAllocatorConfig::parseArgs` in `c10/core/AllocatorConfig.cpp`,
//! then `CUDAAllocatorConfig::parseArgs`, its device hook), with the same
//! validation rules, error wording and error types.

use std::fmt;

/// 1 MiB.
pub const MIB: u64 = 1024 * 1024;
/// `kLargeBuffer` (CUDACachingAllocator.cpp): 20 MiB, the default
/// `large_segment_size_mb` (the segment for requests between 1 and 10 MiB).
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// `kMinLargeAlloc` (AllocatorConfig.h): 10 MiB; `large_segment_size_mb`
/// must be above it.
const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// Number of power-of-two intervals of `roundup_power2_divisions`
/// (`kRoundUpPowerOfTwoIntervals`, AllocatorConfig.cpp): 1 MiB .. 64 GiB.
pub const ROUNDUP_INTERVALS: usize = 16;
/// `CUDAAllocatorConfig::pinned_max_register_threads()`.
const PINNED_MAX_REGISTER_THREADS: u64 = 128;

/// The allocator settings that change its behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
    /// `max_split_size_mb` in bytes; `u64::MAX` (the default) means unlimited.
    pub max_split_size: u64,
    /// `large_segment_size_mb` in bytes (default 20 MiB, `kLargeBuffer`): the
    /// segment for requests of 1 to 10 MiB, and the large pool's page of
    /// expandable segments.
    pub large_segment_size: u64,
    /// `max_non_split_rounding_mb` in bytes (default: `large_segment_size`).
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
    /// `pinned_reserve_segment_size_mb` (host allocator only; 0 = unset).
    pub pinned_reserve_segment_size_mb: u64,
    /// `backend:cudaMallocAsync` was asked for (the twin models `native` only).
    pub backend_malloc_async: bool,
    /// `graph_capture_record_stream_reuse` (CUDA key, default false): a block
    /// freed during a CUDA graph capture while in use on other streams
    /// (`record_stream`) records the capture's free markers and is reused
    /// within the capture once every later allocation on its stream follows
    /// them (`free_safe_blocks_in_capture`), instead of waiting for the
    /// capture's end.
    pub graph_capture_record_stream_reuse: bool,
    /// `per_process_memory_fraction` (CUDA key, default 1.0): the fraction
    /// the device's allocator starts with (`DeviceCachingAllocator`'s
    /// constructor calls `setMemoryFraction` with it, CUDACachingAllocator.cpp);
    /// given after the allocator started it changes nothing else.
    pub per_process_memory_fraction: f64,
    /// The settings string last given (`last_allocator_settings`).
    pub settings: String,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        // Defaults: the members of AcceleratorAllocatorConfig and
        // CUDAAllocatorConfig (AllocatorConfig.h, CUDAAllocatorConfig.h).
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
            pinned_reserve_segment_size_mb: 0,
            backend_malloc_async: false,
            graph_capture_record_stream_reuse: false,
            per_process_memory_fraction: 1.0,
            settings: String::new(),
        }
    }
}

/// Which exception PyTorch raises for a bad settings string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// `ValueError` (`TORCH_CHECK_VALUE`, `std::invalid_argument` of
    /// `stoull`/`stod`).
    Value,
    /// `IndexError` (`std::out_of_range` of `stoull`/`stod`).
    Index,
    /// `RuntimeError` (`TORCH_INTERNAL_ASSERT`: a value missing, a
    /// backend other than the one loaded).
    Runtime,
    /// A setting PyTorch accepts that the twin does not model.
    NotModelled,
}

/// An invalid settings string; the message follows PyTorch's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// What is wrong.
    pub message: String,
    /// The exception PyTorch raises for it.
    pub kind: ConfigErrorKind,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid allocator settings: {}", self.message)?;
        // PyTorch's bare `std::stoull`/`std::stod` exception text, told (the
        // message itself stays PyTorch's: `run` raises it as PyTorch does)
        let hint = match (self.message.as_str(), self.kind) {
            ("stoull", ConfigErrorKind::Value) => "a value that must be a whole number is not one",
            ("stoull", ConfigErrorKind::Index) => "a whole number past 2^64 - 1",
            ("stod", ConfigErrorKind::Value) => "a value that must be a number is not one",
            ("stod", ConfigErrorKind::Index) => "a number out of a double's range",
            _ => return Ok(()),
        };
        write!(f, " (PyTorch's error: {hint})")
    }
}

impl std::error::Error for ConfigError {}

fn fail<T>(kind: ConfigErrorKind, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        message: message.into(),
        kind,
    })
}

fn err<T>(message: impl Into<String>) -> Result<T, ConfigError> {
    fail(ConfigErrorKind::Value, message)
}

/// `ConfigTokenizer`'s constructor: split on `, : [ ]` (kept as tokens),
/// drop white space (`std::isspace`).
fn lex(env: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = String::new();
    for c in env.chars() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !buf.is_empty() {
                out.push(std::mem::take(&mut buf));
            }
            out.push(c.to_string());
        } else if !matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r') {
            buf.push(c);
        }
    }
    if !buf.is_empty() {
        out.push(buf);
    }
    out
}

/// `std::stoull`: optional sign, then the longest run of digits; trailing
/// junk ignored; a minus negates modulo 2^64 (as `strtoull` does).
fn stoull(s: &str) -> Result<u64, ConfigError> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits: &str = &rest[..rest.bytes().take_while(u8::is_ascii_digit).count()];
    if digits.is_empty() {
        return err("stoull");
    }
    let v = digits
        .parse::<u64>()
        .or_else(|_| fail(ConfigErrorKind::Index, "stoull"))?;
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// `std::stod`: the longest prefix that is a number; out of range (an
/// overflow to infinity, or a non-zero number that underflows to zero) is
/// `std::out_of_range`.
fn stod(s: &str) -> Result<f64, ConfigError> {
    let end = (1..=s.len())
        .rev()
        .find(|&i| s.is_char_boundary(i) && s[..i].parse::<f64>().is_ok());
    let Some(end) = end else {
        return err("stod");
    };
    let text = &s[..end];
    let v: f64 = text.parse().unwrap_or(0.0);
    let literal_inf = text.to_ascii_lowercase().contains("inf");
    let mantissa = text.split(['e', 'E']).next().unwrap_or("");
    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if (v.is_infinite() && !literal_inf) || (v == 0.0 && nonzero) {
        return fail(ConfigErrorKind::Index, "stod");
    }
    Ok(v)
}

/// `ConfigTokenizer`'s accessors. `checkToken` only checks the index: its
/// answer is ignored by every parser, so a wrong separator passes.
struct Tokens<'a> {
    tokens: &'a [String],
}

impl Tokens<'_> {
    fn len(&self) -> usize {
        self.tokens.len()
    }
    fn at(&self, i: usize) -> Result<&str, ConfigError> {
        match self.tokens.get(i) {
            Some(t) => Ok(t.as_str()),
            None => fail(
                ConfigErrorKind::Runtime,
                "Index out of bounds in ConfigTokenizer",
            ),
        }
    }
    fn check_token(&self, i: usize) -> Result<(), ConfigError> {
        self.at(i).map(|_| ())
    }
    fn to_size(&self, i: usize) -> Result<u64, ConfigError> {
        stoull(self.at(i)?)
    }
    fn to_double(&self, i: usize) -> Result<f64, ConfigError> {
        stod(self.at(i)?)
    }
    fn to_bool(&self, i: usize) -> Result<bool, ConfigError> {
        match self.at(i)? {
            "True" => Ok(true),
            "False" => Ok(false),
            other => err(format!(
                "Expected 'True' or 'False' at index {i} in ConfigTokenizer but got '{other}'"
            )),
        }
    }
    /// `skipKey`: the index of a key's value, or of the `]` closing a list.
    fn skip_key(&self, mut i: usize) -> Result<usize, ConfigError> {
        self.check_token(i + 1)?;
        i += 2;
        if self.at(i)? != "[" {
            return Ok(i);
        }
        i += 1;
        while i < self.len() && self.tokens[i] != "]" {
            i += 1;
        }
        if i >= self.len() {
            return fail(
                ConfigErrorKind::Runtime,
                "Expected closing bracket ']' in ConfigTokenizer but reached end of config",
            );
        }
        Ok(i)
    }
}

/// The keys of `AcceleratorAllocatorConfig::getKeys()` with the CUDA hook's
/// registered (`CUDAAllocatorConfig::getKeys()`).
const KEYS: [&str; 16] = [
    "large_segment_size_mb",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "pinned_use_background_threads",
    "backend",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "release_lock_on_hipmalloc",
    "pinned_use_hip_host_register",
    "graph_capture_record_stream_reuse",
    "pinned_reserve_segment_size_mb",
    "pinned_num_register_threads",
    "per_process_memory_fraction",
];

impl AllocatorConfig {
    /// The settings of a process started with `PYTORCH_CUDA_ALLOC_CONF=env`
    /// (the defaults, then [`Self::apply`] of `env` when the allocator
    /// first reads it). An empty string gives the defaults.
    pub fn parse(env: &str) -> Result<Self, ConfigError> {
        let mut cfg = AllocatorConfig::default();
        cfg.parse_args(env, true)?;
        Ok(cfg)
    }

    /// `torch._C._accelerator_setAllocatorSettings(env)` at run time
    /// (`c10::CachingAllocator::setAllocatorSettings`): `max_split_size_mb`,
    /// `roundup_power2_divisions` and `garbage_collection_threshold` go back
    /// to their defaults and `max_non_split_rounding_mb` to the large segment
    /// size unless `env` names them; every other setting keeps its value
    /// unless named (measured on PyTorch 2.11's `libc10.so`). A backend
    /// other than the one loaded is an error. As in PyTorch, the settings
    /// before a bad token stay applied.
    pub fn apply(&mut self, env: &str) -> Result<(), ConfigError> {
        self.parse_args(env, false)
    }

    /// `AcceleratorAllocatorConfig::parseArgs` then the CUDA hook's
    /// `CUDAAllocatorConfig::parseArgs`; `at_load`: the first parse, which
    /// chooses the backend.
    fn parse_args(&mut self, env: &str, at_load: bool) -> Result<(), ConfigError> {
        // "The following option will be reset to its default value if not
        // explicitly set each time."
        self.max_split_size = u64::MAX;
        self.roundup_power2_divisions = [0; ROUNDUP_INTERVALS];
        self.garbage_collection_threshold = 0.0;
        self.settings = env.to_owned();
        let tokens = lex(env);
        let t = Tokens { tokens: &tokens };
        // large_segment_size_mb first: the other sizes' minimum is it.
        let mut i = 0;
        while i < t.len() {
            if t.tokens[i] == "large_segment_size_mb" {
                t.check_token(i + 1)?;
                i += 2;
                let v = t.to_size(i)?;
                if v <= MIN_LARGE_ALLOC / MIB {
                    return err(format!(
                        "CachingAllocator option large_segment_size_mb must be > {} MB",
                        MIN_LARGE_ALLOC / MIB
                    ));
                }
                self.large_segment_size = v.min(u64::MAX / MIB) * MIB;
            }
            i += 1;
        }
        self.max_non_split_rounding_size = self.large_segment_size;
        let min_mb = self.large_segment_size / MIB;
        let mut i = 0;
        while i < t.len() {
            let key = t.tokens[i].as_str();
            match key {
                "max_split_size_mb" | "max_non_split_rounding_mb" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    let v = t.to_size(i)?;
                    let what = if key == "max_split_size_mb" {
                        "max_split_size_mb too small"
                    } else {
                        "max_non_split_rounding_mb too small"
                    };
                    if v < min_mb {
                        return err(format!(
                            "CachingAllocator option {what}, must be >= {min_mb}"
                        ));
                    }
                    let bytes = v.min(u64::MAX / MIB) * MIB;
                    if key == "max_split_size_mb" {
                        self.max_split_size = bytes;
                    } else {
                        self.max_non_split_rounding_size = bytes;
                    }
                }
                "garbage_collection_threshold" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    let v = t.to_double(i)?;
                    if !(v > 0.0 && v < 1.0) {
                        return err("garbage_collect_threshold is invalid, set it in (0.0, 1.0)");
                    }
                    self.garbage_collection_threshold = v;
                }
                "roundup_power2_divisions" => {
                    i = parse_roundup(&t, i, &mut self.roundup_power2_divisions)?;
                }
                "expandable_segments" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    self.expandable_segments = t.to_bool(i)?;
                }
                "pinned_use_background_threads" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    self.pinned_use_background_threads = t.to_bool(i)?;
                }
                _ => {
                    if !KEYS.contains(&key) {
                        return err(format!(
                            "Unrecognized key '{key}' in Accelerator allocator config."
                        ));
                    }
                    i = t.skip_key(i)?;
                }
            }
            if i + 1 < t.len() {
                t.check_token(i + 1)?;
                i += 1;
            }
            i += 1;
        }
        self.parse_cuda_args(&t, at_load)
    }

    /// `CUDAAllocatorConfig::parseArgs`: the CUDA keys (the others were
    /// checked by the accelerator's parse and are skipped).
    fn parse_cuda_args(&mut self, t: &Tokens<'_>, at_load: bool) -> Result<(), ConfigError> {
        let mut i = 0;
        while i < t.len() {
            let key = t.tokens[i].as_str();
            match key {
                "backend" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    let malloc_async =
                        match t.at(i)? {
                            "native" => false,
                            "cudaMallocAsync" => true,
                            _ => return err(
                                "Unknown allocator backend, options are native and cudaMallocAsync",
                            ),
                        };
                    if at_load {
                        self.backend_malloc_async = malloc_async;
                    } else if malloc_async != self.backend_malloc_async {
                        let name = |a: bool| if a { "cudaMallocAsync" } else { "native" };
                        return fail(
                            ConfigErrorKind::Runtime,
                            format!(
                                "Allocator backend parsed at runtime != allocator backend parsed at load time, {} != {}",
                                name(malloc_async),
                                name(self.backend_malloc_async)
                            ),
                        );
                    }
                }
                "release_lock_on_cudamalloc" | "release_lock_on_hipmalloc" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    self.release_lock_on_cudamalloc = t.to_bool(i)?;
                }
                "pinned_use_cuda_host_register" | "pinned_use_hip_host_register" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    self.pinned_use_cuda_host_register = t.to_bool(i)?;
                }
                "pinned_num_register_threads" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    let v = t.to_size(i)?;
                    if !v.is_power_of_two() {
                        return err(format!(
                            "Number of register threads has to be power of 2, got {v}"
                        ));
                    }
                    if v > PINNED_MAX_REGISTER_THREADS {
                        return err(format!(
                            "Number of register threads should be less than or equal to {PINNED_MAX_REGISTER_THREADS}, got {v}"
                        ));
                    }
                    self.pinned_num_register_threads = v;
                }
                "pinned_reserve_segment_size_mb" => {
                    t.check_token(i + 1)?;
                    i += 2;
                    let v = t.to_size(i)?;
                    if v == 0 {
                        return err("Pinned reserve segment size has to be greater than 0");
                    }
                    self.pinned_reserve_segment_size_mb = v;
                }
                "graph_capture_record_stream_reuse" => {
                    // `parseGraphCaptureRecordStreamReuse` (CUDAAllocatorConfig.cpp)
                    t.check_token(i + 1)?;
                    i += 2;
                    self.graph_capture_record_stream_reuse = t.to_bool(i)?;
                }
                "per_process_memory_fraction" => {
                    // `parsePerProcessMemoryFraction` (CUDAAllocatorConfig.cpp)
                    t.check_token(i + 1)?;
                    i += 2;
                    let v = t.to_double(i)?;
                    if !(0.0..=1.0).contains(&v) {
                        return err("per_process_memory_fraction is invalid, set it in [0.0, 1.0]");
                    }
                    self.per_process_memory_fraction = v;
                }
                _ => i = t.skip_key(i)?,
            }
            if i + 1 < t.len() {
                t.check_token(i + 1)?;
                i += 1;
            }
            i += 1;
        }
        Ok(())
    }

    /// `AcceleratorAllocatorConfig::roundup_power2_divisions(size)`: the
    /// divisions for the power-of-two interval holding `size` (clamped to
    /// 1 MiB .. 32 GiB).
    pub fn roundup_divisions_for(&self, size: u64) -> u64 {
        let log_size = 63 - size.max(1).leading_zeros() as i64;
        let index = (log_size - 20).clamp(0, ROUNDUP_INTERVALS as i64 - 1);
        self.roundup_power2_divisions[index as usize]
    }
}

/// `AcceleratorAllocatorConfig::parseRoundUpPower2Divisions`, both the
/// single-number and the per-interval `[64:8,256:4,>:1]` form. Returns the
/// last index used.
fn parse_roundup(
    t: &Tokens<'_>,
    mut i: usize,
    div: &mut [u64; ROUNDUP_INTERVALS],
) -> Result<usize, ConfigError> {
    t.check_token(i + 1)?;
    i += 2;
    if t.at(i)? == "[" {
        let mut last_index = 0usize;
        let mut first_value = true;
        i += 1;
        while i < t.len() && t.tokens[i] != "]" {
            let value_index = i;
            t.check_token(i + 1)?;
            i += 2;
            let value = t.to_size(i)?;
            if !(value == 0 || value.is_power_of_two()) {
                return err(
                    "For roundups, the divisions has to be power of 2 or 0 to disable roundup ",
                );
            }
            if t.tokens[value_index] == ">" {
                // `>` fills the intervals after the last one named (also
                // measured: fixtures/alloc/roundup_intervals).
                for d in div.iter_mut().skip(last_index + 1) {
                    *d = value;
                }
            } else {
                let boundary = t.to_size(value_index)?;
                if !boundary.is_power_of_two() {
                    return err("For roundups, the intervals have to be power of 2 ");
                }
                let index = (63 - boundary.leading_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                if first_value {
                    for d in div.iter_mut().take(index) {
                        *d = value;
                    }
                    first_value = false;
                }
                div[index] = value;
                last_index = index;
            }
            if t.at(i + 1)? != "]" {
                t.check_token(i + 1)?;
                i += 1;
            }
            i += 1;
        }
        if i >= t.len() {
            return fail(
                ConfigErrorKind::Runtime,
                "Expected closing bracket ']' in ConfigTokenizer but reached end of config",
            );
        }
    } else {
        // Single number, kept for backwards compatibility: every interval.
        let v = t.to_size(i)?;
        if !v.is_power_of_two() {
            return err("For roundups, the divisions has to be power of 2 ");
        }
        *div = [v; ROUNDUP_INTERVALS];
    }
    Ok(i)
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
            // string as given). `backend:cudaMallocAsync` changes the
            // figures reported and the limit (`malloc_async.rs`), not the
            // native replay the twin runs under it; `estimate` and `plan`,
            // which take the shortcuts, refuse it.
            release_lock_on_cudamalloc: _,
            pinned_use_cuda_host_register: _,
            pinned_num_register_threads: _,
            pinned_use_background_threads: _,
            pinned_reserve_segment_size_mb: _,
            backend_malloc_async: _,
            settings: _,
            // Frees within a capture at points the captured graph's order
            // decides, as deterministically as a capture's end does; a block
            // used on another stream already leaves best fit not alone
            // (`record_stream`).
            graph_capture_record_stream_reuse: _,
            // A limit the allocator starts with, as `set_memory_fraction`'s.
            per_process_memory_fraction,
        } = self;
        let gc = *garbage_collection_threshold != 0.0;
        match shortcut {
            Shortcut::UnmetLimit { memory_fraction } => {
                let fraction = memory_fraction || *per_process_memory_fraction < 1.0;
                !(fraction && (gc || *expandable_segments))
            }
            Shortcut::MirroredSteps => !gc,
            Shortcut::RepeatedFits => *max_split_size == u64::MAX && !expandable_segments && !gc,
        }
    }
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
    fn a_settings_fraction_arms_garbage_collection_as_set_memory_fraction_does() {
        let c = alone("per_process_memory_fraction:0.5,garbage_collection_threshold:0.6");
        assert_eq!(c.per_process_memory_fraction, 0.5);
        assert!(!c.allows(Shortcut::UnmetLimit {
            memory_fraction: false
        }));
        let c = alone("per_process_memory_fraction:1.0,garbage_collection_threshold:0.6");
        assert!(c.allows(Shortcut::UnmetLimit {
            memory_fraction: false
        }));
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
            "graph_capture_record_stream_reuse:True",
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

    /// Each call of `_accelerator_setAllocatorSettings` after the first, as
    /// PyTorch 2.11's `libc10.so` leaves its `AcceleratorAllocatorConfig`
    /// (read through ctypes on the CPU machine).
    #[test]
    fn apply_resets_three_sizes_and_keeps_the_rest() {
        let mut c = AllocatorConfig::parse(
            "max_split_size_mb:40,roundup_power2_divisions:4,garbage_collection_threshold:0.5,\
             expandable_segments:True,max_non_split_rounding_mb:60,large_segment_size_mb:30,\
             release_lock_on_cudamalloc:True,pinned_num_register_threads:8",
        )
        .unwrap();
        assert_eq!(c.large_segment_size, 30 * MIB);
        assert_eq!(c.max_non_split_rounding_size, 60 * MIB);
        c.apply("expandable_segments:False").unwrap();
        // back to their defaults
        assert_eq!(c.max_split_size, u64::MAX);
        assert_eq!(c.roundup_power2_divisions, [0; ROUNDUP_INTERVALS]);
        assert_eq!(c.garbage_collection_threshold, 0.0);
        // back to the large segment size, which stays
        assert_eq!(c.large_segment_size, 30 * MIB);
        assert_eq!(c.max_non_split_rounding_size, 30 * MIB);
        // kept
        assert!(c.release_lock_on_cudamalloc);
        assert_eq!(c.pinned_num_register_threads, 8);
        assert!(!c.expandable_segments);
        assert_eq!(c.settings, "expandable_segments:False");
        c.apply("expandable_segments:True").unwrap();
        c.apply("").unwrap();
        assert!(c.expandable_segments, "an empty string keeps it");
        assert_eq!(c.settings, "");
    }

    #[test]
    fn apply_keeps_what_came_before_a_bad_token() {
        let mut c = AllocatorConfig::default();
        let e = c.apply("max_split_size_mb:40,foo:1").unwrap_err();
        assert_eq!(
            e.message,
            "Unrecognized key 'foo' in Accelerator allocator config."
        );
        assert_eq!(e.kind, ConfigErrorKind::Value);
        assert_eq!(c.max_split_size, 40 * MIB);
    }

    #[test]
    fn the_backend_cannot_change_at_run_time() {
        let mut c = AllocatorConfig::default();
        c.apply("backend:native").unwrap();
        let e = c.apply("backend:cudaMallocAsync").unwrap_err();
        assert_eq!(e.kind, ConfigErrorKind::Runtime);
        assert!(
            e.message.ends_with("cudaMallocAsync != native"),
            "{}",
            e.message
        );
        assert!(
            AllocatorConfig::parse("backend:cudaMallocAsync")
                .unwrap()
                .backend_malloc_async
        );
    }

    #[test]
    fn large_segment_size_sets_the_minimum_of_the_other_sizes() {
        let c = AllocatorConfig::parse("large_segment_size_mb:40").unwrap();
        assert_eq!(c.max_non_split_rounding_size, 40 * MIB);
        // read first, wherever it stands
        let e =
            AllocatorConfig::parse("max_split_size_mb:30,large_segment_size_mb:40").unwrap_err();
        assert_eq!(
            e.message,
            "CachingAllocator option max_split_size_mb too small, must be >= 40"
        );
        let e = AllocatorConfig::parse("large_segment_size_mb:10").unwrap_err();
        assert_eq!(
            e.message,
            "CachingAllocator option large_segment_size_mb must be > 10 MB"
        );
        assert_eq!(
            AllocatorConfig::parse("large_segment_size_mb:11")
                .unwrap()
                .large_segment_size,
            11 * MIB
        );
    }

    #[test]
    fn tokens_as_std_parses_them() {
        // `checkToken`'s answer is ignored: a wrong separator passes
        assert_eq!(
            AllocatorConfig::parse("max_split_size_mb,40")
                .unwrap()
                .max_split_size,
            40 * MIB
        );
        // `stoull` wraps a negative number and ignores trailing junk
        assert_eq!(
            AllocatorConfig::parse("max_split_size_mb:-5")
                .unwrap()
                .max_split_size,
            u64::MAX / MIB * MIB
        );
        assert_eq!(
            AllocatorConfig::parse("max_split_size_mb:40x")
                .unwrap()
                .max_split_size,
            40 * MIB
        );
        let kind = |s: &str| AllocatorConfig::parse(s).unwrap_err().kind;
        assert_eq!(kind("max_split_size_mb:abc"), ConfigErrorKind::Value);
        assert_eq!(
            kind("max_split_size_mb:99999999999999999999999"),
            ConfigErrorKind::Index
        );
        assert_eq!(
            kind("garbage_collection_threshold:1e400"),
            ConfigErrorKind::Index
        );
        assert_eq!(kind("max_split_size_mb:"), ConfigErrorKind::Runtime);
        assert_eq!(
            kind("roundup_power2_divisions:[64:8,256:4"),
            ConfigErrorKind::Runtime
        );
        assert_eq!(kind(",expandable_segments:True"), ConfigErrorKind::Value);
        assert_eq!(
            AllocatorConfig::parse("expandable_segments:yes")
                .unwrap_err()
                .message,
            "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'yes'"
        );
        // the CUDA keys PyTorch 2.11 knows
        AllocatorConfig::parse("pinned_reserve_segment_size_mb:4,graph_capture_record_stream_reuse:False,per_process_memory_fraction:1.0").unwrap();
        let c = AllocatorConfig::parse("graph_capture_record_stream_reuse:True").unwrap();
        assert!(c.graph_capture_record_stream_reuse);
        // a CUDA setting: kept by a later string that does not name it
        let mut c = c;
        c.apply("max_split_size_mb:40").unwrap();
        assert!(c.graph_capture_record_stream_reuse);
        assert_eq!(
            kind("graph_capture_record_stream_reuse:yes"),
            ConfigErrorKind::Value
        );
        assert_eq!(
            kind("per_process_memory_fraction:1.5"),
            ConfigErrorKind::Value
        );
        assert_eq!(
            AllocatorConfig::parse("per_process_memory_fraction:-0.5")
                .unwrap_err()
                .message,
            "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"
        );
        // a CUDA setting: kept by a later settings string that does not name it
        let mut c = AllocatorConfig::parse("per_process_memory_fraction:0.25").unwrap();
        c.apply("max_split_size_mb:40").unwrap();
        assert_eq!(c.per_process_memory_fraction, 0.25);
        c.apply("per_process_memory_fraction:1").unwrap();
        assert_eq!(c.per_process_memory_fraction, 1.0);
    }

    #[test]
    fn roundup_lists_as_measured() {
        let d = |s: &str| AllocatorConfig::parse(s).unwrap().roundup_power2_divisions;
        assert_eq!(
            d("roundup_power2_divisions:[64:8,>:2]"),
            [8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 2, 2, 2, 2, 2, 2]
        );
        assert_eq!(
            d("roundup_power2_divisions:[>:2]"),
            [0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
        );
        assert_eq!(
            d("roundup_power2_divisions:[64:8,256:4,]"),
            [8, 8, 8, 8, 8, 8, 8, 0, 4, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(d("roundup_power2_divisions:[]"), [0; ROUNDUP_INTERVALS]);
    }
}
