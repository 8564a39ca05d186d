//! The integration tests of `report`, one binary (ripgrep's `tests/` layout):
//! each module is one area, `common` what they share.

mod fixtures;
mod golden;
mod html_chromium;
mod synthetic;
mod timeline_oracle;
