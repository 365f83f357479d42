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
#: Exit status of a refused command (bad input, unreadable or unwritable file, failing backend setup).
EXIT_ERROR = 2
#: Exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: Set this environment variable to 1 to get the traceback of an error instead of its one line.
TRACEBACK_ENV = "PLDR_REF_TRACEBACK"

#: Output flags checked before each subcommand runs (pldr_ref.output_paths): attribute -> (flag, kind).
OUTPUT_FLAGS = {
    "validate": {"out": ("--out", "file"), "junit": ("--junit", "file")},
    "accuracy": {"out": ("--out", "file")},
    "prove": {"out": ("--out", "file")},
    "diagnose": {"json": ("--json", "file"), "markdown": ("--markdown", "file"), "out": ("--out", "folder")},
    "golden": {"out": ("--out", "suite")},
    "export": {"out": ("--out", "file")},
}

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


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse unwritable output paths and writes into the committed golden/ before the command runs."""
    from pldr_ref.output_paths import check_output

    for attr, (flag, kind) in OUTPUT_FLAGS.get(args.command, {}).items():
        value = getattr(args, attr, None)
        if value is not None:
            check_output(value, kind, flag)


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
    check_outputs(args)
    code = int(args.func(args) or 0)
    sys.stdout.flush()  # a closed pipe surfaces here, inside the handler below, not at interpreter exit
    return code


def describe(exc: BaseException) -> str:
    """One line for an error: the message (an OSError with its file and reason), else the exception type."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, RecursionError):
        return f"input nested too deeply ({exc})"
    if isinstance(exc, MemoryError):
        return "out of memory (see the size guard in docs/backends.md; PLDR_REF_MEMORY_BUDGET)"
    text = " ".join(str(exc).split())
    known = (ValueError, OSError, LookupError, TypeError, ImportError, FloatingPointError)
    return text if text and isinstance(exc, known) else f"{type(exc).__name__}: {text}"


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
    try:
        return _run(argv)
    except BrokenPipeError:
        # stdout is gone: point it at devnull so the interpreter's final flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        print(f"\n{command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            raise  # argparse's own usage errors (status 2) and explicit exit statuses
        print(f"{command}: error: {exc.code}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        print(f"{command}: error: {describe(exc)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
