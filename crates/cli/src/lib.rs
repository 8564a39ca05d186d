//! The `vramscope` command line: argument definitions and the commands,
//! each a thin layer over the library crates (allocator twin, replay,
//! snapshot reader) that turns their results into text or JSON.

#![deny(missing_docs)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod demo;
pub mod diff;
pub mod estimate;
pub mod inspect;
pub mod plan;
pub mod plan_context;
pub mod plan_parallel;
mod plan_sharding;
pub mod replay;
pub mod view;

/// Exit code: the command ran and the answer is "yes" (exact, fits, ...).
pub const EXIT_OK: u8 = 0;
/// Exit code: the command ran and found a difference (a divergence, a regression).
pub const EXIT_DIFFERENT: u8 = 1;
/// Exit code: the input could not be used (not a snapshot, bad settings, ...).
pub const EXIT_BAD_INPUT: u8 = 2;

/// vramscope: a memory twin of PyTorch. It reproduces PyTorch's CUDA caching
/// allocator rule for rule, so it can tell you exactly how much GPU memory a
/// run takes and why, from a real memory snapshot or before you run.
///
/// Exit codes: 0 success (exact), 1 a difference was found, 2 the input could
/// not be used.
#[derive(Debug, Parser)]
#[command(name = "vramscope", version, about, long_about, max_term_width = 100)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an unmodified PyTorch script on the simulated GPU: its memory per
    /// phase as torch.cuda would report it (`vramscope run --help`).
    ///
    /// `run` is the Python package's command (`pip install .`; it runs
    /// your PyTorch): its options and help are Python's, `vramscope run
    /// --help` there. This Rust command alone only names it.
    #[command(disable_help_flag = true)]
    Run(RunArgs),
    /// Replay a real memory snapshot through the allocator twin and check it
    /// does exactly what the GPU did.
    ///
    /// The snapshot must be recorded from the first allocation: call
    /// `torch.cuda.memory._record_memory_history(max_entries=1_000_000)`
    /// before any CUDA work, run, then save it with
    /// `torch.cuda.memory._dump_snapshot("run.pickle")`.
    ///
    /// The twin is configured from the snapshot's allocator_settings. It
    /// compares every segment action (segment_alloc, segment_free,
    /// segment_map, segment_unmap), every address handed out, and the final
    /// segments and blocks. Without a file it replays a built-in snapshot of
    /// three AdamW training steps of a transformer layer on an H100.
    ///
    /// Exit 0 when exact, 1 at a divergence (the first one is named), 2 when
    /// the file cannot be replayed.
    Replay(replay::ReplayArgs),
    /// Run a built-in experiment on the eager twin and explain every step:
    /// what each byte is and why it was allocated or freed (small
    /// PyTorch programs about activations, gradients, optimizer states,
    /// the cuBLAS workspace, the caching allocator's rounding and cache).
    ///
    /// The figures are those torch.cuda reports (memory_allocated,
    /// max_memory_allocated, memory_reserved, ...), predicted without a GPU;
    /// each experiment was measured on an H100 and the twin gives the same
    /// bytes. `vramscope demo --list` lists them.
    Demo(demo::DemoArgs),
    /// Inspect a memory snapshot: the timeline of allocated, active and
    /// reserved bytes, what is live at the peak by allocation site and
    /// category (with the evidence), fragmentation and out-of-memory events.
    ///
    /// Exit 0, or 2 when the file cannot be read.
    Inspect(inspect::InspectArgs),
    /// Explore a memory snapshot in the browser, served by this process on
    /// 127.0.0.1: the active memory timeline (zoom to any range with full
    /// detail, pan, the stack of each allocation on hover with your own
    /// frames first), what is live at any entry by category and site,
    /// search by site or module, the out-of-memory events one click away,
    /// the allocator's segments and blocks after any entry (memory_viz's
    /// allocator state history), and a time axis in seconds.
    ///
    /// Runs until interrupted (Ctrl-C); exit 2 when the file cannot be read
    /// or the port cannot be opened.
    View(view::ViewArgs),
    /// Compare two snapshots: how the peaks changed and which sites grew.
    ///
    /// Exit 1 when peak allocated grew by more than --fail-over.
    Diff(diff::DiffArgs),
    /// Estimate the memory of training or serving a Hugging Face model from
    /// its config.json, before running it: every phase's allocated and
    /// reserved bytes as torch.cuda would report them, what is live at the
    /// peak and why, and whether it fits.
    ///
    /// The workload is what you would write: the model loaded with
    /// AutoModelFor*.from_config(config, dtype=W, attn_implementation="sdpa")
    /// .cuda(); random input_ids (batch, seq) and labels = input_ids.clone();
    /// then --steps training steps (forward with loss under optional
    /// autocast, loss.backward(), optimizer.step(), zero_grad(set_to_none=True))
    /// or inference passes under torch.no_grad().
    ///
    /// Exit 0 when it fits, 1 when it runs out of memory (the op, module and
    /// phase are named), 2 when the config or options cannot be used.
    #[command(after_long_help = ESTIMATE_EXAMPLES)]
    Estimate(estimate::EstimateArgs),
    /// What fits: the largest batch that completes every step under the
    /// limit (the allocator twin's real out-of-memory path: free the cache,
    /// retry, fail), and what each lever buys — bf16 weights, autocast,
    /// another optimizer, activation checkpointing (every layer, every k-th,
    /// or the fewest layers that reach --target-batch), allocator settings,
    /// gradient accumulation — each computed by the twin.
    ///
    /// The search is the one validation/plan_bisect.py runs on a GPU: batch
    /// 1, 2, 4, ... until one fails, then bisection.
    ///
    /// With --batch (a list or a range, e.g. 1..64) and several --seq
    /// (512,1024,2048) it sweeps the grid instead and prints each cell's
    /// peak allocated / peak reserved, `*` marking those that do not fit
    /// (--csv or --json for plotting).
    ///
    /// With --fsdp N or --ddp N: the largest batch per rank over N GPUs, the
    /// fewest GPUs for --target-batch (a global batch) and the levers there.
    /// On one GPU, where not even batch 1 fits (or --target-batch does not),
    /// it also gives the fewest GPUs (2 to 64) under FSDP2 and under DDP with
    /// their defaults, and the `plan --fsdp N` command to run next.
    ///
    /// Exit 0 when batch 1 fits, 1 when not even batch 1 fits (on this one
    /// GPU, whatever more GPUs would do; per rank under --fsdp/--ddp), 2 on
    /// bad input.
    #[command(after_long_help = PLAN_EXAMPLES)]
    Plan(plan::PlanArgs),
}

/// `vramscope run`'s arguments, as they are: the Python package parses them
/// (`python/vramscope/_run.py`, one definition of its options); this command
/// line only lists `run` among the others.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// `vramscope run`'s options, the script and the script's arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<std::ffi::OsString>,
}

/// What the Rust command says to `vramscope run`: it needs the Python package.
pub const RUN_NEEDS_PYTHON: &str = "`vramscope run` runs a PyTorch script: it is the Python \
package's command (`pip install .` from a checkout installs it, with PyTorch beside it), \
not this Rust command's";

/// `estimate --help`'s examples (after the options, line by line: a doc
/// comment's lines would be joined into one paragraph).
const ESTIMATE_EXAMPLES: &str = "\
Examples:
  vramscope estimate --model llama-3.1-8b --mode train --batch 1 --seq 2048 --weights bf16
  vramscope estimate --config config.json --mode infer --batch 8 --seq 1024 --json
  vramscope estimate --model qwen3-8b --mode train --batch 4 --seq 2048 --weights bf16 \\
      --checkpointing --html run.html --snapshot run.pickle";

/// `plan --help`'s examples.
const PLAN_EXAMPLES: &str = "\
Examples:
  vramscope plan --model llama-3.2-1b --mode train --seq 2048 --weights bf16 --gpu h100
  vramscope plan --model gpt2 --mode train --batch 1..16 --seq 512,1024 --csv
  vramscope plan --model mistral-7b --mode train --seq 4096 --weights bf16 --target-batch 8
  vramscope plan --model llama-3.1-8b --mode train --seq 4096 --fsdp 8 --target-batch 64";

/// `estimate --model list` (or `plan`'s): print the presets, exit 0.
pub fn list_presets() -> ExitCode {
    match estimate::presets_table() {
        Ok(table) => {
            // a closed pipe is not an error (`... --model list | head`)
            let _ = std::io::Write::write_all(&mut std::io::stdout(), table.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(_) => anyhow::bail!(RUN_NEEDS_PYTHON),
        Command::Replay(args) => replay::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::View(args) => view::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Estimate(args) if args.model.is_list() => Ok(list_presets()),
        Command::Plan(args) if args.model.is_list() => Ok(list_presets()),
        Command::Estimate(args) => estimate::run(&args),
        Command::Plan(args) => plan::run(&args),
    }
}

/// The whole command line, from the program's arguments (the program name
/// first) to its exit code: parse, run, print the error chain; a closed
/// pipe is not an error. `main.rs` and the Python package's `vramscope`
/// both call it.
pub fn main_with(args: Vec<std::ffi::OsString>) -> ExitCode {
    let mut cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // `--model list` alone: clap asks for --mode and --batch first
        Err(e)
            if e.kind() == clap::error::ErrorKind::MissingRequiredArgument
                && estimate::asks_for_presets(&args) =>
        {
            return list_presets();
        }
        // `--help`, `--version` and usage errors: clap's text and code, but
        // returned, not `exit()`ed (the Python package calls this in its
        // own process)
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    if let Command::Plan(plan) = &mut cli.command {
        // (the commands a plan suggests repeat its arguments)
        plan.argv = args
            .iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
    }
    match run(cli) {
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
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// A signed byte count as PyTorch prints sizes (`format_size`), with a
/// minus sign when negative (a difference).
pub(crate) fn signed_size(bytes: i64) -> String {
    let size = vramscope_alloc::format_size(bytes.unsigned_abs());
    if bytes < 0 {
        format!("-{size}")
    } else {
        size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Help text as words, whatever the width it was wrapped to.
    fn words(help: impl std::fmt::Display) -> String {
        help.to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// `vramscope --help` lists `run` and `vramscope help run` names where
    /// its options are; its arguments, `--help` among them, pass untouched
    /// (the Python package parses them), and this command alone refuses it.
    #[test]
    fn help_lists_run_whose_options_are_the_python_packages() {
        let mut cli = Cli::command();
        let help = cli.render_help().to_string();
        assert!(
            help.lines().any(|l| l.trim_start().starts_with("run ")),
            "{help}"
        );
        let long = words(
            cli.find_subcommand_mut("run")
                .expect("run")
                .render_long_help(),
        );
        assert!(long.contains("the Python package's command"), "{long}");
        let argv = [
            "vramscope",
            "run",
            "--gpu",
            "h200",
            "--help",
            "train.py",
            "--epochs",
            "1",
        ];
        let parsed = Cli::try_parse_from(argv).expect("parses");
        let Command::Run(args) = &parsed.command else {
            panic!("{parsed:?}")
        };
        assert_eq!(
            args.args,
            argv[2..]
                .iter()
                .map(std::ffi::OsString::from)
                .collect::<Vec<_>>()
        );
        let e = run(parsed).expect_err("refused");
        assert_eq!(e.to_string(), RUN_NEEDS_PYTHON);
    }

    /// `plan --batch`'s grid prints each cell's peak allocated / peak
    /// reserved (plan.rs, the sweep's text), and its help says so.
    #[test]
    fn plan_help_names_the_grids_figures() {
        let mut cli = Cli::command();
        let plan = cli.find_subcommand_mut("plan").expect("plan");
        for help in [words(plan.render_long_help()), words(plan.render_help())] {
            assert!(help.contains("peak allocated / peak reserved"), "{help}");
            assert!(!help.contains("fits / doesn't"), "{help}");
        }
    }
}
