"""``pldr-ref validate``: run a backend on the golden suite and print / write the verdict.

    pldr-ref validate (--backend MODULE:ATTR | --onnx MODEL.onnx) [--dtype float64,float32 ...]
                      [--suite-dir DIR] [--suite default|full] [--profile NAME | --switch K=V ... | --own-config]
                      [--group model ...] [-k REGEX] [--out OUT.json] [--junit OUT.xml]
                      [--timeout SECONDS] [--no-isolation] [--timing] [--quiet]

Exit status: 0 when no case fails or errors and at least one case was judged (passed) -- a case left not judgeable
("not covered": the dtype cannot resolve its primary output) is reported, never counted as a pass, and does not by
itself change the exit status; 1 when a case fails (a gross error fails even where not judgeable) or errors (crash,
exit, hang past --timeout), when nothing was judged (every case unsupported, not applicable or not judgeable), when
the suite's integrity cannot be checked (no MANIFEST.json, cases missing from it or from disk, modified files) or
the backend declares kinds the harness does not know -- the reason is printed, and the table, JSON and JUnit reports
are written in every one of these cases; 2 for a usage problem (bad backend name, a backend whose import,
constructor or capabilities() raises, unknown dtype, missing suite folder, nothing selected, a bad -k pattern,
--timeout not a finite number from 0 to 1000000, an output path that cannot be written or that is an input or
another output -- checked before the run); 130 after Ctrl-C (reports still written, atomically). ``--suite NAME`` is
the case set (default, full; its cases missing from the folder are a problem), ``--suite-dir DIR`` the folder;
``--suite DIR`` still works, deprecated. """

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

from pldr_ref.export import cli as onnx_cli
from pldr_ref.harness.protocol import DTYPES, load_backend
from pldr_ref.harness.suite_loading import (  # load_suite: kept importable from here for existing callers
    DEFAULT_SUITE,
    load_suite,  # noqa: F401
    load_suite_checked,
    suite_root,  # noqa: F401
)
from pldr_ref.output_paths import atomic_write_text
from pldr_ref.text_escape import escape_text
from pldr_ref.tool_cli import MAX_SECONDS, add_suite_arguments, loaded_store, seconds, suite_selection

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
    add_suite_arguments(p)  # --suite-dir DIR, --suite NAME (pldr_ref.tool_cli)
    p.add_argument("--group", action="append", default=None, help="only these case groups (op, layer, model, ...)")
    p.add_argument("-k", dest="pattern", default=None, metavar="REGEX", help="only cases whose name matches REGEX")
    p.add_argument("--out", "--report", dest="out", default=None, metavar="OUT.json",
                   help="write the JSON report here (--report is an alias)")
    p.add_argument("--junit", default=None, metavar="OUT.xml", help="write JUnit XML here")
    p.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"per-case time limit for the backend's calls (default {DEFAULT_TIMEOUT_S:g}; 0 = none; "
                        f"at most {MAX_SECONDS:.0f})")
    p.add_argument("--no-isolation", action="store_true", help="skip stage isolation (end-to-end comparison only)")
    p.add_argument("--timing", action="store_true", help="record per-case durations (reports stop being "
                                                          "byte-identical between runs)")
    p.add_argument("--quiet", action="store_true", help="print only the summary line, no progress")
    onnx_cli.add_validate_arguments(p)  # --onnx MODEL.onnx (pldr_ref.export.cli)
    add_generated_arguments(p)  # --profile / --switch / --own-config (issue 30)
    p.set_defaults(func=main)


#: ``--timeout``'s type (kept under its former name): a finite number of seconds from 0 (no limit) to
#: :data:`pldr_ref.tool_cli.MAX_SECONDS`.
timeout_seconds = seconds


def add_generated_arguments(p: argparse.ArgumentParser) -> None:
    """``--profile NAME``, ``--switch K=V``, ``--own-config``: judge on a suite generated for the backend."""
    g = p.add_argument_group("generated suites (docs/backends.md, 'validating an implementation of a released code "
                             "base')")
    g.add_argument("--profile", default=None, metavar="NAME",
                   help="judge on the templates at the switch values of this released code base's profile "
                        "(pt-v510-float32, tf-v500, hf-sdpa, ...); generated and calibrated on first use, cached")
    g.add_argument("--switch", action="append", default=None, metavar="SWITCH=VALUE",
                   help="judge on the templates at these switch values (repeatable)")
    g.add_argument("--own-config", action="store_true",
                   help="judge on the templates at the backend's own config (an ONNX file's pldr_ref.config)")


def generated_suite_dir(args: argparse.Namespace, backend: Any, dtypes: list[str]) -> Path | None:
    """The generated suite folder that ``--profile`` / ``--switch`` / ``--own-config`` ask for (None: none
    asked); ``ValueError`` (a usage error) for an unknown profile or switch value, a backend without a config, a
    combination with ``--suite-dir``, or an unusable cache folder."""
    from pldr_ref.config import EMULATIONS

    chosen = [f for f, on in (("--profile", args.profile), ("--switch", args.switch), ("--own-config",
                                                                                      args.own_config)) if on]
    if not chosen:
        return None
    if len(chosen) > 1:
        raise ValueError(f"{' and '.join(chosen)} exclude each other: give one")
    if args.suite_dir is not None or args.suite is not None:
        raise ValueError(f"{chosen[0]} generates its own suite: drop --suite-dir / --suite")
    from pldr_ref.fixtures.templates import Target, parse_switches, profile_target
    from pldr_ref.harness.profile_suites import backend_config, generated_suite

    if args.profile:
        if args.profile not in EMULATIONS:
            raise ValueError(f"unknown profile {args.profile!r}; profiles: {', '.join(EMULATIONS)}")
        target = profile_target(args.profile)
    elif args.switch:
        target = Target(switches=parse_switches(args.switch))
    else:
        config = backend_config(backend)
        if config is None:
            raise ValueError("--own-config needs a backend with a config (an ONNX file, or a backend attribute "
                             "'config' holding a PLDRConfig)")
        target = Target(config=config)
    caps = backend.capabilities()
    stages = () if args.no_isolation else tuple(caps.stages)
    return generated_suite(target, tuple(caps.kinds), tuple(dtypes), stages=stages,
                           progress=None if args.quiet else sys.stderr)


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


def select_case_set(cases: list[Any], problems: list[str], names: frozenset[str], args: argparse.Namespace,
                    root: Any) -> tuple[list[Any], list[str]]:
    """The loaded cases that belong to the ``--suite`` case set, with a problem naming the set's cases missing from
    the folder (within the --group / -k selection)."""
    import re

    rx = re.compile(args.pattern) if args.pattern else None
    wanted = {n for n in names if (args.group is None or n.split("/", 1)[0] in args.group)
              and (rx is None or rx.search(n))}
    gone = sorted(wanted - {c.name for c in cases})
    if gone:
        problems = [*problems, f"{len(gone)} case(s) of suite {args.suite!r} are not in {root}: "
                    + ", ".join(gone[:5]) + (" ..." if len(gone) > 5 else "")
                    + f" (build them: pldr-ref golden build --suite {args.suite} --out DIR --only NAME)"]
    return [c for c in cases if c.name in names], problems


def main(args: argparse.Namespace) -> int:
    """Run the validation; return the exit status."""
    from pldr_ref.harness.report import build_report, dumps_report, junit_xml, passed, table
    from pldr_ref.harness.validate import validate
    from pldr_ref.progress import Progress

    try:
        if args.backend and not getattr(args, "onnx", None):
            backend = (onnx_cli.child_process_backend(("spec", args.backend), args.timeout or None)  # engines
                       or load_backend_checked(args.backend))
        else:  # --onnx MODEL.onnx, or neither / both given (pldr_ref.export.cli says which)
            backend = onnx_cli.validation_backend(args)
        dtypes = parse_dtypes(args.dtype, backend.capabilities().dtypes)
        generated = generated_suite_dir(args, backend, dtypes)
        root, names = (generated, None) if generated is not None else suite_selection(args, "pldr-ref validate")
        cases, problems = load_suite_checked(root, args.group, args.pattern)
        loaded_store()  # a malformed calibration store: one error naming the file, not an error in every case
    except ValueError as exc:
        print(f"pldr-ref validate: error: {escape_text(exc, one_line=True)}", file=sys.stderr)
        return 2
    if names is not None:  # --suite NAME: the cases of that set, those missing from the folder reported
        cases, problems = select_case_set(cases, problems, names, args, root)
    problems += backend_problems(backend)
    if not dtypes:
        problems.append(f"no dtype to run: the backend declares {list(backend.capabilities().dtypes)}")

    results: list[Any] = []
    interrupted = False
    with Progress(len(cases) * len(dtypes), "validate", enabled=not args.quiet) as bar:
        def progress(r: Any) -> None:
            bar.advance(escape_text(f"{r.status.upper()} {r.dtype} {r.case}", one_line=True))

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
        shown_root = str(root) if generated is not None else str(args.suite_dir or DEFAULT_SUITE)
        report = build_report(results, backend_spec=args.backend, backend=backend, dtypes=dtypes,
                              suite_root=shown_root, manifest_sha256=digest, num_cases=len(cases),
                              problems=problems)
        atomic_write_text(args.out, dumps_report(report))
    if args.junit:
        atomic_write_text(args.junit, junit_xml(results, backend_name=str(backend.name), problems=problems))
    ok = passed(results, problems)
    if not ok and args.quiet:
        for msg in problems:
            print(f"pldr-ref validate: {escape_text(msg, one_line=True)}", file=sys.stderr)
    if interrupted:
        print("pldr-ref validate: interrupted (reports written without results)", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0 if ok else 1
