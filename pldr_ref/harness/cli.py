"""``pldr-ref validate``: run a backend on the golden suite and print / write the verdict.

    pldr-ref validate (--backend MODULE:ATTR | --onnx MODEL.onnx) [--dtype float64,float32 ...] [--suite-dir DIR]
                      [--group model ...] [-k REGEX] [--out OUT.json] [--junit OUT.xml]
                      [--timeout SECONDS] [--no-isolation] [--timing] [--quiet]

Exit status: 0 when no case fails or errors and at least one case was judged (passed) -- a case left not
judgeable ("not covered": the dtype cannot resolve its primary output) is reported, never counted as a pass,
and does not by itself change the exit status; 1 when a case fails (a gross error fails even where not
judgeable), errors (crash, exit, hang past --timeout), when nothing was judged (every case unsupported, not
applicable or not judgeable), when the suite's integrity cannot be checked (no MANIFEST.json, cases missing from it or
from disk, modified files) or the backend declares kinds the harness does not know -- the reason is
printed, and the table, JSON and JUnit reports are written in every one of these cases; 2 for a
usage problem (bad backend name, a backend whose import, constructor or capabilities() raises, unknown
dtype, missing suite folder, nothing selected, a bad -k pattern, --timeout not a finite number >= 0, an
output path that cannot be written -- checked before the run); 130 after Ctrl-C (reports still written).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from pathlib import Path
from typing import Any

from pldr_ref.export import cli as onnx_cli
from pldr_ref.harness.protocol import DTYPES, load_backend
from pldr_ref.harness.suite_loading import (  # load_suite: kept importable from here for existing callers
    DEFAULT_SUITE,
    load_suite,  # noqa: F401
    load_suite_checked,
    suite_root,
)

#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def register(subparsers: Any) -> None:
    """Add the ``validate`` subcommand."""
    from pldr_ref.harness.validate import DEFAULT_TIMEOUT_S

    p = subparsers.add_parser("validate", help="validate a backend against the golden fixtures",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default=None, metavar="MODULE:ATTR",
                   help="the backend object, class or factory, e.g. pldr_ref.backends.torch_backend:TorchBackend")
    p.add_argument("--dtype", action="append", default=None, metavar="DTYPE",
                   help=f"dtype(s) to run, comma-separated or repeated ({', '.join(DTYPES)}); "
                        "default: every dtype the backend declares")
    p.add_argument("--suite-dir", "--suite", dest="suite_dir", default=DEFAULT_SUITE, metavar="DIR",
                   help="the golden suite folder to read (default: the committed golden/; --suite is an alias)")
    p.add_argument("--group", action="append", default=None, help="only these case groups (op, layer, model, ...)")
    p.add_argument("-k", dest="pattern", default=None, metavar="REGEX", help="only cases whose name matches REGEX")
    p.add_argument("--out", "--report", dest="out", default=None, metavar="OUT.json",
                   help="write the JSON report here (--report is an alias)")
    p.add_argument("--junit", default=None, metavar="OUT.xml", help="write JUnit XML here")
    p.add_argument("--timeout", type=timeout_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"per-case time limit for the backend's calls (default {DEFAULT_TIMEOUT_S:g}; 0 = none)")
    p.add_argument("--no-isolation", action="store_true", help="skip stage isolation (end-to-end comparison only)")
    p.add_argument("--timing", action="store_true", help="record per-case durations (reports stop being "
                                                          "byte-identical between runs)")
    p.add_argument("--quiet", action="store_true", help="print only the summary line, no progress")
    onnx_cli.add_validate_arguments(p)  # --onnx MODEL.onnx (pldr_ref.export.cli)
    p.set_defaults(func=main)


def timeout_seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds >= 0 (0 = no limit); -5, nan and inf are usage errors."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0 (0 = no limit), got {text!r}")
    return value


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


def load_backend_checked(spec: str) -> Any:
    """:func:`load_backend`, with any exception of the backend's own code (its module raising on import, its
    constructor or ``capabilities()`` raising) turned into a ``ValueError`` naming the backend: a usage error."""
    try:
        backend = load_backend(spec)
        backend.capabilities()
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"backend {spec} failed while loading ({type(exc).__name__}: {exc})") from None
    return backend


def backend_problems(backend: Any) -> list[str]:
    """Declared kinds and stages the harness does not know (a typo makes a backend support nothing)."""
    from pldr_ref.fixtures.runners import RUNNERS
    from pldr_ref.registry import ALL_STAGES

    caps = backend.capabilities()
    out = []
    bad = sorted(set(caps.kinds) - set(RUNNERS))
    if bad:
        out.append(f"the backend declares unknown case kind(s) {bad} (known: {', '.join(sorted(RUNNERS))})")
    known_stages = {s.name for s in ALL_STAGES}
    bad = sorted(set(caps.stages) - known_stages)
    if bad:
        out.append(f"the backend declares unknown stage(s) {bad} (known: {', '.join(sorted(known_stages))})")
    return out


def main(args: argparse.Namespace) -> int:
    """Run the validation; return the exit status."""
    from pldr_ref.harness.report import build_report, dumps_report, junit_xml, passed, table
    from pldr_ref.harness.validate import validate
    from pldr_ref.progress import Progress

    try:
        if args.backend and not getattr(args, "onnx", None):
            backend = load_backend_checked(args.backend)
        else:  # --onnx MODEL.onnx, or neither / both given (pldr_ref.export.cli says which)
            backend = onnx_cli.validation_backend(args)
        dtypes = parse_dtypes(args.dtype, backend.capabilities().dtypes)
        root = suite_root(args.suite_dir)
        cases, problems = load_suite_checked(root, args.group, args.pattern)
    except ValueError as exc:
        print(f"pldr-ref validate: {exc}", file=sys.stderr)
        return 2
    problems += backend_problems(backend)
    if not dtypes:
        problems.append(f"no dtype to run: the backend declares {list(backend.capabilities().dtypes)}")

    results: list[Any] = []
    interrupted = False
    with Progress(len(cases) * len(dtypes), "validate", enabled=not args.quiet) as bar:
        def progress(r: Any) -> None:
            bar.advance(f"{r.status.upper()} {r.dtype} {r.case}")

        try:
            results = validate(backend, cases, dtypes, isolate=not args.no_isolation, timing=args.timing,
                               progress=progress, timeout=args.timeout or None)
        except KeyboardInterrupt:
            problems.append("interrupted: the report holds no results")
            interrupted = True
    text = table(results, problems)
    print(text.splitlines()[-1] if args.quiet else text)
    manifest = root / "MANIFEST.json"
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest() if manifest.is_file() else None
    if args.out:
        report = build_report(results, backend_spec=args.backend, backend=backend, dtypes=dtypes,
                              suite_root=args.suite_dir, manifest_sha256=digest, num_cases=len(cases),
                              problems=problems)
        Path(args.out).write_text(dumps_report(report), encoding="utf-8")
    if args.junit:
        Path(args.junit).write_text(junit_xml(results, backend_name=str(backend.name), problems=problems),
                                    encoding="utf-8")
    ok = passed(results, problems)
    if not ok and args.quiet:
        for msg in problems:
            print(f"pldr-ref validate: {msg}", file=sys.stderr)
    if interrupted:
        print("pldr-ref validate: interrupted (reports written without results)", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0 if ok else 1
