//! The integration tests of `cli`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod cli;
mod estimate_plan;
mod inspect_diff;
mod predicted;
