"""The command-line conventions shared by ``pldr-ref`` and the module tools (``python -m
pldr_ref.harness.controls.battery``, ``verdict_power``, ``mutants``; ``pldr_ref.harness.tools.figures``,
``engine_report``; ``pldr_ref.harness.policy.calibration``).

* Bad input -- a bad flag value, an unreadable input, an output path refused by :mod:`pldr_ref.output_paths`, a
  malformed environment variable (:mod:`pldr_ref.env_vars`) -- is one ``PROG: error: ...`` line on stderr and exit
  status :data:`EXIT_ERROR` (2), never a traceback (``PLDR_REF_TRACEBACK=1`` shows it); argparse's own usage errors
  also exit 2.
* Ctrl-C ends with one ``PROG: interrupted`` line and :data:`EXIT_INTERRUPTED` (130); a reader closing the output
  pipe ends the command quietly with :data:`EXIT_BROKEN_PIPE` (141).
* The environment and every output path are checked before any computation; outputs are written atomically.
* Flag values are validated at parse time: comma-separated choices (:func:`choice_list`), time limits
  (:func:`seconds`: finite, >= 0, at most :data:`MAX_SECONDS`, which ``setitimer`` accepts), counts
  (:func:`positive_int`).

:data:`CONVENTIONS` is the text each tool's ``--help`` ends with.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pldr_ref.text_escape import escape_text

#: Exit status of a command whose output pipe was closed by its reader (128 + SIGPIPE, as a shell reports it).
EXIT_BROKEN_PIPE = 141
#: Exit status of a refused command (bad input, unreadable or unwritable file, failing backend setup).
EXIT_ERROR = 2
#: Exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: Set this environment variable to 1 to get the traceback of an error instead of its one line.
TRACEBACK_ENV = "PLDR_REF_TRACEBACK"
#: Largest time limit a flag accepts, in seconds (11.6 days): far below what ``signal.setitimer`` overflows at
#: (2**31 s on a 32-bit time_t, ~1e10 s was refused on this platform's 64-bit one).
MAX_SECONDS = 1e6

#: The epilog of every module tool's ``--help``.
CONVENTIONS = f"""\
conventions (the same as pldr-ref's): bad input is one `PROG: error: ...` line and exit status 2 (set
PLDR_REF_TRACEBACK=1 for a traceback); Ctrl-C exits 130; environment variables and output paths are checked
before any work (an output may not lie in the committed golden/ or the pldr_ref package, nor be an input or
another output) and outputs are written atomically; time limits are finite seconds from 0 (no limit) to
{MAX_SECONDS:.0f}."""


def describe(exc: BaseException) -> str:
    """One line for an error: the message (an OSError with its file and reason), else the exception type; every
    control character escaped (:func:`~pldr_ref.text_escape.escape_text`)."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    elif isinstance(exc, RecursionError):
        text = f"input nested too deeply ({exc})"
    elif isinstance(exc, MemoryError):
        text = "out of memory (see the size guard in docs/backends.md; PLDR_REF_MEMORY_BUDGET)"
    else:
        text = " ".join(str(exc).split())
        known = (ValueError, OSError, LookupError, TypeError, ImportError, FloatingPointError)
        text = text if text and isinstance(exc, known) else f"{type(exc).__name__}: {text}"
    return escape_text(text, one_line=True)


def guarded(command: str, body: Callable[[], int]) -> int:
    """Run ``body()`` under the conventions above; returns the exit status.  ``command`` starts every line
    (``pldr-ref validate``, ``python -m pldr_ref.harness.tools.figures``)."""
    from pldr_ref.env_vars import traceback_requested

    try:
        return int(body() or 0)
    except BrokenPipeError:
        # stdout is gone: point it at devnull so the interpreter's final flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        if traceback_requested():
            raise
        print(f"\n{command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            raise  # argparse's own usage errors (status 2) and explicit exit statuses
        print(f"{command}: error: {escape_text(exc.code, one_line=True)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        if traceback_requested():
            raise
        print(f"{command}: error: {describe(exc)}", file=sys.stderr)
        return EXIT_ERROR


def run_tool(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
             run: Callable[[argparse.Namespace], int]) -> int:
    """A module tool's ``main``: check the environment, parse ``argv`` with ``parser`` (usage errors exit 2),
    then ``run(args)`` -- everything under :func:`guarded` with the parser's ``prog`` as the command name.
    ``run`` checks its output paths (:func:`pldr_ref.output_paths.check_command_paths`) before any work."""
    from pldr_ref.env_vars import check_environment

    def body() -> int:
        check_environment()
        args = parser.parse_args(argv)
        code = int(run(args) or 0)
        sys.stdout.flush()  # a closed pipe surfaces here, inside the guard
        return code

    return guarded(parser.prog, body)


def tool_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The argument parser of a module tool: its docstring as description, :data:`CONVENTIONS` as epilog."""
    return argparse.ArgumentParser(prog=prog, description=description, epilog=CONVENTIONS,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


# ----------------------------------------------------------------------------- flag value types
def seconds(text: str) -> float:
    """A time limit: a finite number of seconds, 0 (no limit) to :data:`MAX_SECONDS`; -5, nan, inf, 1e10 and
    words are usage errors."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds from 0 (no limit) to "
                                         f"{MAX_SECONDS:.0f}, got {text!r}")
    return value


def positive_int(upper: int) -> Callable[[str], int]:
    """A type for an integer from 1 to ``upper``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not 1 <= value <= upper:
            raise argparse.ArgumentTypeError(f"expected an integer from 1 to {upper}, got {text!r}")
        return value

    parse.__name__ = "positive integer"
    return parse


def choice_list(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """A type for a non-empty comma-separated list of ``choices`` (order kept, duplicates dropped)."""
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if not names:
            raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(choices)} (comma-separated), "
                                             f"got {text!r}")
        bad = [n for n in names if n not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(map(repr, bad))}; choose from "
                                             f"{', '.join(choices)}")
        return names

    parse.__name__ = "choice list"
    return parse


# ----------------------------------------------------------------------------- --suite-dir DIR / --suite NAME
#: What ``--suite NAME`` accepts (pldr_ref.fixtures.suite.SUITES).
SUITE_NAMES = ("default", "full")


def add_suite_arguments(p: argparse.ArgumentParser) -> None:
    """``--suite-dir DIR`` (the golden folder read) and ``--suite NAME`` (the case set), the ``pldr-ref``
    convention; :func:`suite_selection` reads them."""
    p.add_argument("--suite-dir", dest="suite_dir", default=None, metavar="DIR",
                   help="the golden suite folder to read (default: the committed golden/)")
    p.add_argument("--suite", dest="suite", default=None, metavar="NAME",
                   help="the case set: default (the committed cases) or full (adds the on-demand cases, built with "
                        "`pldr-ref golden build --suite full --out DIR [--only SUBSTRING]`); cases of the set "
                        "missing from the folder are reported; without --suite: every case of the folder.  "
                        "Deprecated: a folder here still means --suite-dir (with a warning; removed in the next "
                        "version)")


def suite_selection(args: argparse.Namespace, command: str) -> tuple[Path, frozenset[str] | None]:
    """(folder, names of the case set or None for every case of the folder) from ``--suite-dir`` / ``--suite``.

    ``--suite`` naming something other than a case set is the deprecated spelling of ``--suite-dir``: it still
    works, with one warning on stderr that says what to use; given together with ``--suite-dir`` it is an error.
    """
    from pldr_ref.harness.suite_loading import suite_root

    suite_dir, suite = getattr(args, "suite_dir", None), getattr(args, "suite", None)
    if suite is not None and suite not in SUITE_NAMES:
        if suite_dir is not None:
            raise ValueError(f"--suite {suite!r} is not a case set ({', '.join(SUITE_NAMES)}); the folder goes in "
                             "--suite-dir")
        print(f"{command}: warning: --suite DIR is deprecated and will be removed in the next version: use "
              f"--suite-dir {escape_text(suite, one_line=True)} (--suite now names the case set: "
              f"{', '.join(SUITE_NAMES)})", file=sys.stderr)
        suite_dir, suite = suite, None
        args.suite_dir, args.suite = suite_dir, None
    root = suite_root(suite_dir if suite_dir is not None else "default")
    from pldr_ref.fixtures.build import recover_swap

    recover_swap(root)  # a build killed between the two renames of its fallback: the previous suite comes back
    if suite is None:
        return root, None
    from pldr_ref.fixtures.suite import build_suite

    return root, frozenset(s.name for s in build_suite(suite) if suite == "full" or s.committed)


def load_selected_suite(root: Path, names: frozenset[str] | None) -> list:
    """Every case of the suite under ``root`` (hash-checked; any suite problem is a ValueError), only those of the
    case set ``names`` when given -- a case of the set missing from the folder is a ValueError naming it."""
    from pldr_ref.harness.suite_loading import load_suite

    cases = load_suite(root, None, None)
    if names is None:
        return cases
    gone = sorted(names - {c.name for c in cases})
    if gone:
        raise ValueError(f"{len(gone)} case(s) of the case set are not in {root}: " + ", ".join(gone[:5])
                         + (" ..." if len(gone) > 5 else "") + " (build them with `pldr-ref golden build --suite "
                         "full --out DIR --only NAME`)")
    return [c for c in cases if c.name in names]


def loaded_store() -> dict:
    """The calibration store as the harness uses it (:mod:`pldr_ref.harness.policy.ensemble`), loaded now: a tool calls
    this before its run so that a malformed store is one error naming the file, not an error in every case."""
    from pldr_ref.harness.policy import ensemble

    return ensemble._store()
