"""``pldr-ref`` command line: each subcommand lives in the module that owns its job."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module exposing ``register(subparsers)``; each registered parser sets ``func``.
SUBCOMMANDS = {
    "golden": "pldr_ref.fixtures.cli",
    "validate": "pldr_ref.harness.cli",
    "accuracy": "pldr_ref.exact.accuracy",
    "prove": "proofs_check.cli",
    "diagnose": "pldr_ref.diagnostics.cli",
}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="pldr-ref", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the pldr-ref version and exit")
    sub = parser.add_subparsers(dest="command")
    for module in SUBCOMMANDS.values():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from pldr_ref import __version__

        print(__version__)
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
