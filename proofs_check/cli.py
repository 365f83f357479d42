"""``pldr-ref prove``: run the numerical mirrors of the Lean theorems and print the coverage table.

    pldr-ref prove [--profile ci|thorough] [--only NAME] [--table] [--no-controls] [--mutants] [--quiet]
                   [--out PATH]

Progress goes to stderr (a bar on a terminal, plain lines otherwise; ``--quiet`` turns it off); the table, the
reason of every failure and the summary go to stdout.  ``--out PATH`` writes the markdown coverage report
(``docs/lean_coverage.md``).  ``--mutants`` also runs the operator mutation run.

Exit code 0 when every selected check passes, every negative control observed its violation (unless
``--no-controls``) and, with ``--mutants``, every mutant was caught by its own operator's mirrors; else 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from proofs_check.profiles import PROFILES


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``prove`` subcommand to the ``pldr-ref`` parser."""
    p = subparsers.add_parser("prove", help="run the numerical mirrors of the Lean-checked lemmas", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=PROFILES, default="ci",
                   help="ci: 25 seeded examples per property; thorough: 1000 per property, another seed")
    p.add_argument("--only", metavar="NAME", help="run only checks whose name, Lean name or paper result contains NAME")
    p.add_argument("--table", action="store_true", help="print the Lean name -> check -> status table")
    p.add_argument("--no-controls", action="store_true", help="skip the negative controls")
    p.add_argument("--mutants", action="store_true",
                   help="also inject operator bugs and report which mirrors of the operator's Lean file catch each")
    p.add_argument("--quiet", action="store_true", help="no progress display and no per-check lines")
    p.add_argument("--out", metavar="PATH", type=Path, help="write the markdown coverage report to PATH")
    # the earlier name of --out, kept working but no longer advertised
    p.add_argument("--write-docs", dest="out", type=Path, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``prove``; returns the exit code."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        print("pldr-ref prove needs hypothesis: pip install 'pldr-ref[test]'", file=sys.stderr)
        return 2
    from pldr_ref.progress import Progress
    from proofs_check.registry import select
    from proofs_check.report import failure_reasons, format_table, lean_rows, markdown, status_word, summary, timed_run

    try:
        checks = select(args.only)
    except ValueError as exc:
        print(f"pldr-ref prove: {exc}", file=sys.stderr)
        return 2
    if args.out and args.only:
        print("pldr-ref prove: --out needs the full registry (drop --only)", file=sys.stderr)
        return 2
    quiet = getattr(args, "quiet", False)

    with Progress(len(checks), f"prove ({args.profile})", enabled=not quiet) as bar:

        def progress(o) -> None:
            bar.advance(o.check.name)
            if not args.table and not quiet:
                extra = "" if o.control_status == "skipped" else f" | control {o.control_status}: {o.control_detail}"
                print(f"{status_word(o):<6} {o.check.name:<40} {o.seconds:6.2f}s  {o.detail}{extra}", flush=True)

        outcomes, seconds = timed_run(checks, args.profile, controls=not args.no_controls, progress=progress)
    if args.table:
        print(format_table(lean_rows(outcomes), ("Lean file", "Lean name", "check", "status")))
        beyond = [(o.check.name, o.check.paper, o.check.label, status_word(o)) for o in outcomes if not o.check.lean]
        if beyond:
            print()
            print(format_table(beyond, ("check (beyond Lean)", "paper", "label", "status")))
    reasons = failure_reasons(outcomes)
    if reasons:
        print("\nnot ok:")
        for line in reasons:
            print(f"  {line}")
    mutants = None
    if args.mutants:
        from proofs_check.mutants import MUTANTS, mutation_table, run_mutants

        with Progress(len(MUTANTS), "mutants", enabled=not quiet) as bar:
            mutants = run_mutants(args.profile, progress=bar.advance)
        print()
        print(format_table(mutation_table(mutants), ("mutant", "operator", "bug", "Lean file", "caught by")))
        print(f"mutants: {sum(r.caught for r in mutants)}/{len(mutants)} caught by their own operator's mirrors")
    print(summary(outcomes) + f"; {seconds:.1f} s ({args.profile})")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        from pldr_ref.output_paths import atomic_write_text

        atomic_write_text(args.out, markdown(outcomes, args.profile, mutants))
        print(f"wrote {args.out}")
    ok = all(o.ok if not args.no_controls else o.passed for o in outcomes)
    return 0 if ok and (mutants is None or all(r.caught for r in mutants)) else 1
