//! `vramscope`: parse the command line, run, print the error chain, exit
//! with a code that means something (see `vramscope --help`).

use std::process::ExitCode;

// mimalloc: the estimate of a 70B training step makes ~10^6 small heap
// allocations; glibc malloc took about a third of its time (perf).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    vramscope::main_with(std::env::args_os().collect())
}
