//! `vramscope view`: serve a snapshot's viewer on 127.0.0.1 and open it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use clap::Args;
use vramscope_report::explore::Explorer;
use vramscope_report::Options;
use vramscope_view::Viewer;

use crate::EXIT_OK;

/// Arguments of `vramscope view`.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// A `torch.cuda.memory._dump_snapshot` pickle.
    pub snapshot: PathBuf,
    /// Port on 127.0.0.1 (0: any free port; the address is printed).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Print the address without opening a browser.
    #[arg(long)]
    pub no_open: bool,
    /// Which device's trace (default: the first device with a trace).
    #[arg(long)]
    pub device: Option<usize>,
}

/// Run `vramscope view` (until interrupted).
pub fn run(args: &ViewArgs) -> anyhow::Result<ExitCode> {
    let snap = crate::inspect::read(&args.snapshot)?;
    let (cfg, _) = vramscope_replay::from_snapshot::config(&snap);
    let opts = Options {
        device: args.device.unwrap_or_else(|| snap.default_device()),
        ..Options::default()
    };
    let name = args.snapshot.display().to_string();
    let viewer =
        Viewer::bind(Explorer::new(snap, cfg, opts, &name), args.port).with_context(|| {
            format!(
                "cannot listen on 127.0.0.1:{} (--port 0 picks a free port)",
                args.port
            )
        })?;
    let url = viewer.url();
    eprintln!("vramscope view: {name} at {url} (Ctrl-C to stop)");
    if !args.no_open {
        open(&url);
    }
    viewer.serve(&AtomicBool::new(false));
    Ok(ExitCode::from(EXIT_OK))
}

/// Open `url` in the default browser; say so when none could be started.
fn open(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else if cfg!(windows) {
        "explorer"
    } else {
        "xdg-open"
    };
    let started = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if started.is_err() {
        eprintln!("vramscope view: could not start {opener}; open {url} yourself");
    }
}
