"""``pldr-ref validate``: run a backend on the golden suite and print / write the verdict.

    pldr-ref validate --backend MODULE:ATTR [--dtype float64,float32 ...] [--suite default|DIR]
                      [--group model ...] [-k REGEX] [--report out.json] [--junit out.xml]
                      [--no-isolation] [--timing] [--quiet]

Exit status: 0 when no case fails or errors, 1 otherwise, 2 for a usage problem (bad backend name,
unknown dtype, missing suite).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path
from typing import Any

from pldr_ref.harness.protocol import DTYPES, load_backend


def register(subparsers: Any) -> None:
    """Add the ``validate`` subcommand."""
    p = subparsers.add_parser("validate", help="validate a backend against the golden fixtures",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", required=True, metavar="MODULE:ATTR",
                   help="the backend object, class or factory, e.g. pldr_ref.backends.torch_backend:TorchBackend")
    p.add_argument("--dtype", action="append", default=None, metavar="DTYPE",
                   help=f"dtype(s) to run, comma-separated or repeated ({', '.join(DTYPES)}); "
                        "default: every dtype the backend declares")
    p.add_argument("--suite", default="default",
                   help="'default' (the committed golden/ folder) or a path to a golden suite folder")
    p.add_argument("--group", action="append", default=None, help="only these case groups (op, layer, model, ...)")
    p.add_argument("-k", dest="pattern", default=None, metavar="REGEX", help="only cases whose name matches REGEX")
    p.add_argument("--report", default=None, metavar="OUT.json", help="write the JSON report here")
    p.add_argument("--junit", default=None, metavar="OUT.xml", help="write JUnit XML here")
    p.add_argument("--no-isolation", action="store_true", help="skip stage isolation (end-to-end comparison only)")
    p.add_argument("--timing", action="store_true", help="record per-case durations (reports stop being "
                                                          "byte-identical between runs)")
    p.add_argument("--quiet", action="store_true", help="print only the summary line")
    p.set_defaults(func=main)


def suite_root(name: str) -> Path:
    """The golden folder of ``--suite``."""
    if name == "default":
        from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR

        return Path(DEFAULT_GOLDEN_DIR)
    return Path(name)


def parse_dtypes(values: list[str] | None, declared: tuple[str, ...]) -> list[str]:
    """The dtypes to run: the given ones (validated) or every declared one, in :data:`DTYPES` order."""
    if not values:
        return [d for d in DTYPES if d in declared]
    out: list[str] = []
    for v in values:
        for d in v.split(","):
            d = d.strip()
            if d not in DTYPES:
                raise ValueError(f"unknown dtype {d!r}; choose from {', '.join(DTYPES)}")
            if d not in out:
                out.append(d)
    return out


def load_suite(root: Path, groups: list[str] | None, pattern: str | None) -> list[Any]:
    """Every case of the suite under ``root`` (hash-checked), filtered by group and name pattern."""
    from pldr_ref.fixtures.case import case_dirs, load_case

    if not root.is_dir():
        raise ValueError(f"golden suite folder {root} does not exist (build it with `pldr-ref golden build --out DIR`)")
    rx = re.compile(pattern) if pattern else None
    cases = []
    for d in case_dirs(root):  # filter on the folder name first: loading a case reads and hashes its tensors
        name = f"{d.parent.name}/{d.name}"
        if (groups is None or d.parent.name in groups) and (rx is None or rx.search(name)):
            cases.append(load_case(d))
    if not cases:
        raise ValueError(f"no cases selected under {root}")
    return cases


def main(args: argparse.Namespace) -> int:
    """Run the validation; return the exit status."""
    from pldr_ref.harness.report import build_report, dumps_report, junit_xml, passed, table
    from pldr_ref.harness.validate import validate

    try:
        backend = load_backend(args.backend)
        dtypes = parse_dtypes(args.dtype, backend.capabilities().dtypes)
        root = suite_root(args.suite)
        cases = load_suite(root, args.group, args.pattern)
    except ValueError as exc:
        print(f"pldr-ref validate: {exc}", file=sys.stderr)
        return 2

    def progress(r: Any) -> None:
        if not args.quiet:
            print(f"  {r.status.upper():<15} {r.dtype:<9} {r.case}", file=sys.stderr, flush=True)

    results = validate(backend, cases, dtypes, isolate=not args.no_isolation, timing=args.timing, progress=progress)
    text = table(results)
    print(text.splitlines()[-1] if args.quiet else text)
    manifest = root / "MANIFEST.json"
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest() if manifest.is_file() else None
    if args.report:
        report = build_report(results, backend_spec=args.backend, backend=backend, dtypes=dtypes,
                              suite_root=args.suite, manifest_sha256=digest, num_cases=len(cases))
        Path(args.report).write_text(dumps_report(report), encoding="utf-8")
    if args.junit:
        Path(args.junit).write_text(junit_xml(results, backend_name=str(backend.name)), encoding="utf-8")
    return 0 if passed(results) else 1
