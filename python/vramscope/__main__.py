"""The `vramscope` command: `run` is Python's; every other command is Rust's."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vramscope` console script."""
    process = argv is None  # the command itself, not a call from a program
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["help", "run"]:
        # run's options are Python's (`_run.parse`); the Rust command only lists `run`
        argv = ["run", "--help"]
    if argv and argv[0] == "run":
        from ._run import main as run_main

        return run_main(argv[1:], process=process)
    from . import _native

    return _native.main(argv)


if __name__ == "__main__":
    sys.exit(main())
