//! The integration tests of `replay`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod gpu_fixtures;
