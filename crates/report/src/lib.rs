//! `vramscope-report`: the timeline of a PyTorch memory snapshot, what is
//! live at its peak and why, and renderers that are pure functions of a
//! report (hyperfine's `export/` style): [`text`], [`json`], [`html`].
//!
//! ```no_run
//! let snap = vramscope_snapshot::read_snapshot_file("run.pickle")?;
//! let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
//! let report = vramscope_report::analyze(&snap, &cfg, &Default::default());
//! print!("{}", vramscope_report::text::render(&report, false));
//! # Ok::<(), vramscope_snapshot::Error>(())
//! ```
#![deny(missing_docs)]

pub mod analysis;
pub mod diff;
pub mod explore;
pub mod html;
pub mod json;
pub mod schema;
pub mod state;
pub mod sweep;
pub mod text;
pub mod timeline;

pub use analysis::{analyze, Options};
pub use schema::Report;
