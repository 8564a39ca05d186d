//! `vramscope`: parse the command line, run, print the error chain, exit
//! with a code that means something (see `vramscope --help`).

use std::ffi::OsString;
use std::process::ExitCode;

// mimalloc: the estimate of a 70B training step makes ~10^6 small heap
// allocations; glibc malloc took about a third of its time (perf).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if purge_at_once(&args, std::env::var_os(PURGE_DELAY).is_some()) {
        again_purging_at_once(&args);
    }
    vramscope::main_with(args)
}

/// mimalloc's option: how long freed memory is kept before it is given
/// back to the system, in ms (1000 by default: mimalloc v3's
/// `src/options.c`), read from the environment when the process starts.
const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// Whether this command runs again with freed memory given back at once:
/// the commands that read snapshots (`inspect`, `diff`, `view`), unless
/// the option is set already. Their parallel decoder frees on its threads
/// what the rest of the read does not reuse, and with the default delay
/// that memory stays in the process for the whole run (on the GPU
/// machine's 16 cores, peak RSS of `inspect --json` 1.4-1.6 times the
/// file with the default, 0.84-0.92 times with `MIMALLOC_PURGE_DELAY=0`,
/// at the same speed: `docs/inspect-speed.md`, session 9).
fn purge_at_once(args: &[OsString], set: bool) -> bool {
    !set && args
        .get(1)
        .is_some_and(|c| c == "inspect" || c == "diff" || c == "view")
}

/// Replace this process by the same command with `MIMALLOC_PURGE_DELAY=0`
/// (mimalloc takes its options only from the environment at start, or
/// through its C API, which would need `unsafe`). Returns only if that
/// fails; the command then runs here as it is.
fn again_purging_at_once(args: &[OsString]) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut cmd = std::process::Command::new(exe);
        if let Some(arg0) = args.first() {
            cmd.arg0(arg0);
        }
        let _failed = cmd.args(&args[1..]).env(PURGE_DELAY, "0").exec();
    }
    #[cfg(not(unix))]
    let _ = args;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_commands_run_again_unless_the_option_is_set() {
        let args = |s: &str| -> Vec<OsString> { s.split(' ').map(OsString::from).collect() };
        for cmd in [
            "vramscope inspect f.pickle --json",
            "vramscope diff a b",
            "vramscope view f",
        ] {
            assert!(purge_at_once(&args(cmd), false), "{cmd}");
            assert!(!purge_at_once(&args(cmd), true), "{cmd}");
        }
        for cmd in [
            "vramscope estimate --model x",
            "vramscope",
            "vramscope --help",
        ] {
            assert!(!purge_at_once(&args(cmd), false), "{cmd}");
        }
    }
}
