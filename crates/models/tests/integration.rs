//! The integration tests of `models`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod common;
mod driver_share;
mod gpu_fixtures;
mod gpu_traces;
mod multi_gpu;
mod predicted;
mod requests;

#[test]
fn every_test_file_is_a_module() {
    vramscope_testkit::assert_every_test_file_is_a_module(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests"),
        include_str!("integration.rs"),
    );
}
