"""``pldr-ref`` command line: each subcommand lives in the module that owns its job."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# subcommand -> module exposing ``register(subparsers)``; each registered parser sets ``func``.
SUBCOMMANDS = {
    "golden": "pldr_ref.fixtures.cli",
    "validate": "pldr_ref.harness.cli",
    "accuracy": "pldr_ref.exact.accuracy",
    "prove": "proofs_check.cli",
    "diagnose": "pldr_ref.diagnostics.cli",
    "export": "pldr_ref.export.cli",
}

#: What ``pldr-ref --help`` says first.
DESCRIPTION = ("pldr-ref: the float64 / exact reference implementation of PLDR-LLM and Power Law Graph Attention "
               "(golden fixtures, backend validation, accuracy of the float64 path, Lean-lemma mirrors).")

#: Exit status of a command whose output pipe was closed by its reader (128 + SIGPIPE, as a shell reports it).
EXIT_BROKEN_PIPE = 141

#: The flag names every subcommand uses for the same thing (shown by ``pldr-ref --help``).
FLAG_CONVENTION = """\
flag convention (the same name means the same thing in every subcommand):
  --suite-dir DIR   a golden suite directory that is read (default: the committed golden/)
  --suite NAME      the case set: default (committed cases) or full (adds on-demand cases)
  --out PATH        what the command writes (golden build: refuses the committed golden/ without --overwrite)
  --quiet           no progress display (progress goes to stderr: a bar on a terminal, plain lines otherwise)

run `pldr-ref SUBCOMMAND --help` for the options of one subcommand."""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="pldr-ref", description=DESCRIPTION, epilog=FLAG_CONVENTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="store_true", help="print the pldr-ref version and exit")
    sub = parser.add_subparsers(dest="command", title="subcommands", metavar="SUBCOMMAND")
    for module in SUBCOMMANDS.values():
        importlib.import_module(module).register(sub)
    return parser


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from pldr_ref import __version__

        print(__version__)
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    code = int(args.func(args) or 0)
    sys.stdout.flush()  # a closed pipe surfaces here, inside the handler below, not at interpreter exit
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code.

    Output into a pipe closed by its reader (``pldr-ref golden list | head``) ends the command quietly
    with status :data:`EXIT_BROKEN_PIPE` instead of a ``BrokenPipeError`` traceback.
    """
    try:
        return _run(argv)
    except BrokenPipeError:
        # stdout is gone: point it at devnull so the interpreter's final flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
