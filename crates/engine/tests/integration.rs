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

#[test]
fn every_test_file_is_a_module() {
    vramscope_testkit::assert_every_test_file_is_a_module(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests"),
        include_str!("integration.rs"),
    );
}
