//! The integration tests of `engine`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod autocast_checkpoint;
mod common;
mod driver_memory;
mod host_mappings;
mod ops;
mod sdpa_traces;
mod seeds;
mod trace;
