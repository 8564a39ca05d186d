//! The integration tests of `alloc`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod invariants;
mod moment;
mod repeats;

#[test]
fn every_test_file_is_a_module() {
    vramscope_testkit::assert_every_test_file_is_a_module(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests"),
        include_str!("integration.rs"),
    );
}
