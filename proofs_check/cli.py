"""``pldr-ref prove``: run the numerical mirrors of the Lean theorems and print the coverage table.

    pldr-ref prove [--profile ci|thorough] [--only NAME] [--table] [--no-controls] [--write-docs PATH]

Exit code 0 when every selected check passes and every negative control observed its violation, else 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from proofs_check.registry import PROFILES


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``prove`` subcommand to the ``pldr-ref`` parser."""
    p = subparsers.add_parser("prove", help="run the numerical mirrors of the Lean-checked lemmas", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=PROFILES, default="ci",
                   help="ci: derandomized, 25 examples per property; thorough: 1000 examples per property")
    p.add_argument("--only", metavar="NAME", help="run only checks whose name, Lean name or paper result contains NAME")
    p.add_argument("--table", action="store_true", help="print the Lean name -> check -> status table")
    p.add_argument("--no-controls", action="store_true", help="skip the negative controls")
    p.add_argument("--write-docs", metavar="PATH", type=Path, help="write the markdown coverage report to PATH")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``prove``; returns the exit code."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        print("pldr-ref prove needs hypothesis: pip install 'pldr-ref[test]'", file=sys.stderr)
        return 2
    from proofs_check.registry import select
    from proofs_check.report import format_table, lean_rows, markdown, status_word, summary, timed_run

    try:
        checks = select(args.only)
    except ValueError as exc:
        print(f"pldr-ref prove: {exc}", file=sys.stderr)
        return 2
    if args.write_docs and args.only:
        print("pldr-ref prove: --write-docs needs the full registry (drop --only)", file=sys.stderr)
        return 2

    def progress(o) -> None:
        if not args.table:
            extra = "" if o.control_status == "skipped" else f" | control {o.control_status}: {o.control_detail}"
            print(f"{status_word(o):<6} {o.check.name:<40} {o.seconds:6.2f}s  {o.detail}{extra}", flush=True)

    outcomes, seconds = timed_run(checks, args.profile, controls=not args.no_controls, progress=progress)
    if args.table:
        print(format_table(lean_rows(outcomes), ("Lean file", "Lean name", "check", "status")))
        beyond = [(o.check.name, o.check.paper, o.check.label, status_word(o)) for o in outcomes if not o.check.lean]
        if beyond:
            print()
            print(format_table(beyond, ("check (beyond Lean)", "paper", "label", "status")))
    print(summary(outcomes) + f"; {seconds:.1f} s ({args.profile})")
    if args.write_docs:
        args.write_docs.parent.mkdir(parents=True, exist_ok=True)
        args.write_docs.write_text(markdown(outcomes, args.profile), encoding="utf-8")
        print(f"wrote {args.write_docs}")
    return 0 if all(o.ok for o in outcomes) else 1
