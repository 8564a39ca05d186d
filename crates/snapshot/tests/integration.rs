//! The integration tests of `snapshot`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod handmade;
mod real_snapshot;
mod robustness;
