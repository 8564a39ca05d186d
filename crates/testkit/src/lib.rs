//! # vramscope-testkit — test and benchmark data, never shipped
//!
//! What the crates' tests, examples and benchmarks share and the libraries
//! themselves do not need: the op cases of `validation/ops_cases.py`
//! ([`ops`]), the readers of the GPU fixtures' case lists and recordings
//! ([`fixture`]), synthetic snapshots of any size ([`synth`]), and the
//! repository's files with the large fixtures decompressed from xz ([`xz`]),
//! and headless Chromium under a wall-clock bound ([`browser`]). A
//! dev-dependency only (`publish = false`); each module but [`xz`] and
//! [`browser`] sits behind the feature of the same name.

#![deny(missing_docs)]

pub mod browser;
#[cfg(feature = "fixture")]
pub mod fixture;
#[cfg(feature = "ops")]
pub mod ops;
#[cfg(feature = "synth")]
pub mod synth;
pub mod xz;

/// Xorshift64 (shifts 13, 7, 17), seeded by its field (not 0): the allocator
/// tests' and benchmark's pseudo-random sequences, the same on every run.
pub struct XorShift(pub u64);

impl XorShift {
    /// The next 64 bits of the sequence.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Panics unless every `.rs` file and folder module of the crate's `tests/`
/// folder (`tests_dir`) is declared as a module (`mod NAME;`) in
/// `integration` (the text of `tests/integration.rs`): with
/// `autotests = false`, a test file nobody declared would never build or run.
pub fn assert_every_test_file_is_a_module(tests_dir: &str, integration: &str) {
    let entries = std::fs::read_dir(tests_dir)
        .unwrap_or_else(|e| panic!("reading {tests_dir}: {e}"))
        .map(|e| e.expect("a directory entry").path());
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let module = if path.is_dir() && path.join("mod.rs").exists() {
            name.to_owned()
        } else if let Some(stem) = name.strip_suffix(".rs") {
            stem.to_owned()
        } else {
            continue;
        };
        if module == "integration" {
            continue;
        }
        assert!(
            integration
                .lines()
                .any(|l| l.trim() == format!("mod {module};")),
            "tests/{name} is not declared in tests/integration.rs (add `mod {module};`)"
        );
    }
}
