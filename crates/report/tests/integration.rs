//! The integration tests of `report`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod fixtures;
mod golden;
mod html_chromium;
mod synthetic;
mod timeline_oracle;

#[test]
fn every_test_file_is_a_module() {
    vramscope_testkit::assert_every_test_file_is_a_module(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests"),
        include_str!("integration.rs"),
    );
}
