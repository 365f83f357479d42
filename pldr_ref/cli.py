"""``pldr-ref`` command line: each subcommand lives in the module that owns its job."""

from __future__ import annotations

import argparse
import importlib
import sys

from pldr_ref.tool_cli import (  # noqa: F401  (re-exported: the exit statuses and describe() known from here)
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    TRACEBACK_ENV,
    describe,
    guarded,
)

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

#: Output flags checked before each subcommand runs (pldr_ref.output_paths): attribute -> (flag, kind).
OUTPUT_FLAGS = {
    "validate": {"out": ("--out", "file"), "junit": ("--junit", "file")},
    "accuracy": {"out": ("--out", "file")},
    "prove": {"out": ("--out", "file")},
    "diagnose": {"json": ("--json", "file"), "markdown": ("--markdown", "file"), "out": ("--out", "folder")},
    "golden": {"out": ("--out", "suite")},
    "export": {"out": ("--out", "file")},
}
#: Input flags no output may overwrite or lie inside (pldr_ref.output_paths.check_distinct): attribute -> (flag,
#: kind); a suite folder given as "default" is the committed golden/.
INPUT_FLAGS = {
    "validate": {"suite_dir": ("--suite-dir", "folder"), "suite": ("--suite", "folder"), "onnx": ("--onnx", "file")},
    "diagnose": {"checkpoint": ("--checkpoint", "file"), "config": ("--config", "file"), "file": ("--file", "file"),
                 "prompts": ("--prompts", "file")},
    "export": {"config": ("--config", "file"), "suite_dir": ("--suite-dir", "folder")},
    "golden": {"suite_dir": ("--suite-dir", "folder")},
}

#: The flag names every subcommand uses for the same thing (shown by ``pldr-ref --help``).
FLAG_CONVENTION = """\
flag convention (the same name means the same thing in every subcommand):
  --suite-dir DIR   a golden suite directory that is read (default: the committed golden/)
  --suite NAME      the case set: default (committed cases) or full (adds on-demand cases)
  --out PATH        what the command writes (golden build: refuses the committed golden/ without --overwrite)
  --quiet           no progress display (progress goes to stderr: a bar on a terminal, plain lines otherwise)

errors: one `pldr-ref SUBCOMMAND: error: ...` line and exit status 2 (PLDR_REF_TRACEBACK=1: a traceback); Ctrl-C
exits 130; environment variables and output paths are checked before any work (an output may not lie in the
committed golden/ or the pldr_ref package, nor be an input or another output); outputs are written atomically.
The module tools (python -m pldr_ref.harness.controls.{battery,verdict_power,mutants},
pldr_ref.harness.tools.{figures,engine_report,margins}, pldr_ref.harness.policy.calibration) follow the same
conventions (pldr_ref/tool_cli.py).

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


def _input_path(value: object) -> object:
    """An input flag's path ("default" suite = the committed golden/; a case set name is no path)."""
    if value == "full":
        return None
    if value == "default":
        from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR

        return DEFAULT_GOLDEN_DIR
    return value


def check_outputs(args: argparse.Namespace) -> None:
    """The output-path policy (pldr_ref.output_paths) before the command runs: unwritable paths, writes into the
    committed golden/ or the package, an output that is an input or another output."""
    from pldr_ref.output_paths import check_command_paths

    outputs = [(flag, getattr(args, attr, None), kind) for attr, (flag, kind) in OUTPUT_FLAGS.get(args.command,
                                                                                                   {}).items()]
    inputs = [(flag, _input_path(getattr(args, attr, None)), kind)
              for attr, (flag, kind) in INPUT_FLAGS.get(args.command, {}).items()]
    check_command_paths(outputs, inputs)


def _run(argv: list[str] | None) -> int:
    from pldr_ref.env_vars import check_environment

    check_environment()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from pldr_ref import __version__

        print(__version__)
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    check_outputs(args)
    code = int(args.func(args) or 0)
    sys.stdout.flush()  # a closed pipe surfaces here, inside the handler below, not at interpreter exit
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code.

    Every failure ends in one ``pldr-ref SUBCOMMAND: error: ...`` line on stderr and exit status
    :data:`EXIT_ERROR` (2), never a traceback (set ``PLDR_REF_TRACEBACK=1`` to see one); Ctrl-C ends with one
    line and :data:`EXIT_INTERRUPTED` (130).  Output into a pipe closed by its reader (``pldr-ref golden list |
    head``) ends the command quietly with status :data:`EXIT_BROKEN_PIPE` instead of a ``BrokenPipeError``.
    """
    command = "pldr-ref"
    if argv is None:
        argv = sys.argv[1:]
    words = [a for a in argv if not a.startswith("-")]
    if words and words[0] in SUBCOMMANDS:
        command = f"pldr-ref {words[0]}"
    return guarded(command, lambda: _run(argv))


if __name__ == "__main__":
    sys.exit(main())
