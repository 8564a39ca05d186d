//! `vramscope`: parse the command line, run, print the error chain, exit
//! with a code that means something (see `vramscope --help`).

use std::process::ExitCode;

use clap::Parser;

// mimalloc: the estimate of a 70B training step makes ~10^6 small heap
// allocations; glibc malloc took about a third of its time (perf).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match vramscope::Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // `--model list` alone: clap asks for --mode and --batch first
        Err(e)
            if e.kind() == clap::error::ErrorKind::MissingRequiredArgument
                && vramscope::estimate::asks_for_presets(&args) =>
        {
            return vramscope::list_presets();
        }
        Err(e) => e.exit(),
    };
    match vramscope::run(cli) {
        Ok(code) => code,
        Err(e) => {
            // A closed pipe (`vramscope ... | head`) is not an error.
            // (serde_json's writer wraps the io error in its own)
            let broken = |k: Option<std::io::ErrorKind>| k == Some(std::io::ErrorKind::BrokenPipe);
            if e.chain().any(|c| {
                broken(c.downcast_ref::<std::io::Error>().map(|io| io.kind()))
                    || broken(
                        c.downcast_ref::<serde_json::Error>()
                            .and_then(|j| j.io_error_kind()),
                    )
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(vramscope::EXIT_BAD_INPUT)
        }
    }
}
