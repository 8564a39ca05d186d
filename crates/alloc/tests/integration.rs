//! The integration tests of `alloc`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod invariants;
mod repeats;
