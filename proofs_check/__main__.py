"""``python -m proofs_check [prove options]``: the ``pldr-ref prove`` subcommand without the other subcommands."""

from __future__ import annotations

import argparse
import sys

from proofs_check.cli import register


def main(argv: list[str] | None = None) -> int:
    """Parse ``prove`` options (the word ``prove`` itself is optional) and run."""
    parser = argparse.ArgumentParser(prog="python -m proofs_check")
    register(parser.add_subparsers(dest="command"))
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "prove":
        args = ["prove", *args]
    ns = parser.parse_args(args)
    return int(ns.func(ns))


if __name__ == "__main__":
    sys.exit(main())
