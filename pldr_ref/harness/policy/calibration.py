"""Writes the committed calibration store (``python -m pldr_ref.harness.policy.calibration --write``;
``docs/tolerances.md``).

The ensemble, its statistic and the store it reads live in :mod:`pldr_ref.harness.policy.ensemble` (re-exported here);
this module computes the statistics of a whole suite by validating a golden-output backend on every case (which
evaluates every statistic the harness uses) and writes :data:`~pldr_ref.harness.policy.ensemble.CACHE_FILE`.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import numpy as np

from pldr_ref.harness.policy import ensemble
from pldr_ref.harness.policy.calibration_store import dumps_store, load_store_cases, read_document
from pldr_ref.harness.policy.ensemble import (  # re-exported: the names the harness and its tests know from here
    CACHE_FILE,
    CALIBRATION_REVISION,  # noqa: F401
    CHOICES,  # noqa: F401
    ENSEMBLE,  # noqa: F401
    MIN_GROUP,  # noqa: F401
    SIGNIFICANT_DIGITS,  # noqa: F401
    TF32_MEMBER,  # noqa: F401
    case_digest,  # noqa: F401
    case_runs,  # noqa: F401
    choice_groups,  # noqa: F401
    fingerprint,
    members,  # noqa: F401
    robust_stats,  # noqa: F401
    round_up,  # noqa: F401
    stage_runs,  # noqa: F401
    stored_stats,  # noqa: F401
)
from pldr_ref.output_paths import atomic_write_text


def write_store(cases: list[Any], path: Path = CACHE_FILE, dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16"),
                merge: tuple[Path, ...] = (), *, prune: bool = False) -> int:
    """Write the statistics of ``cases`` in ``dtypes`` (computed where missing by validating a golden-output backend
    on every case), plus those of the ``merge`` files (same fingerprint), into the store at ``path``; returns the
    number of entries written.

    The entries already in ``path`` (same fingerprint) are kept: writing the statistics of a small suite adds to
    the store, never shrinks it (issue 29, cause 5).  ``prune=True`` drops the entries of cases not in ``cases``
    (the whole suite after a change of its cases).  Every file read is checked
    (:func:`~pldr_ref.harness.policy.calibration_store.read_document`); the store is written atomically.
    """
    from pldr_ref.harness.validate import validate

    store = ensemble._store()
    merged: dict[str, Any] = {}
    for other in merge:
        doc = read_document(other)
        if doc["fingerprint"] != fingerprint():
            raise ValueError(f"{other}: statistics of another ensemble (fingerprint {doc['fingerprint']})")
        for digest, by_dtype in doc["cases"].items():
            for dt, entries in by_dtype.items():
                store.setdefault(digest, {}).setdefault(dt, {}).update(entries)
                merged.setdefault(digest, {}).setdefault(dt, {}).update(entries)
    for case in cases:  # one case at a time: progress on stderr, the member runs freed as it goes
        failed = [r for r in validate(_GoldenBackend(), [case], dtypes, timeout=None) if r.status == "error"]
        if failed:  # no per-case time limit: the ensemble's runs are the work (a cut case had no statistics)
            raise RuntimeError(f"calibration of {case.name} in {failed[0].dtype} failed: {failed[0].reason}")
        print(f"calibrated {case.name}", file=sys.stderr, flush=True)
    keep = {} if prune else copy.deepcopy(load_store_cases(path, fingerprint()))
    for digest, by_dtype in merged.items():
        for dt, entries in by_dtype.items():
            keep.setdefault(digest, {}).setdefault(dt, {}).update(entries)
    for c in cases:
        d = ensemble._digest(c)
        for dt, entries in store.get(d, {}).items():
            if dt in dtypes or dt in keep.get(d, {}):
                keep.setdefault(d, {})[dt] = dict(entries)
    atomic_write_text(path, dumps_store(fingerprint(), keep))
    return sum(len(v) for d in keep.values() for v in d.values())


class _GoldenBackend:
    """The golden outputs of every case and the float64 reference stages, in every dtype: validating it computes
    every statistic the harness uses."""

    name = "golden"

    def capabilities(self) -> Any:
        from pldr_ref.fixtures.runners import RUNNERS
        from pldr_ref.harness.protocol import DTYPES, SWITCHES, Capabilities, every_value
        from pldr_ref.registry import ALL_STAGES

        return Capabilities(dtypes=DTYPES, kinds=tuple(RUNNERS), stages=tuple(s.name for s in ALL_STAGES),
                            caches=("kv", "g"), position_ids=True, switches=every_value(*SWITCHES))

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        return dict(case.outputs)

    def run_stage(self, request: Any) -> dict[str, np.ndarray]:
        from pldr_ref.harness.policy.stage_reference import reference_stage

        return reference_stage(request.stage, request.layer, request.config, request.params, request.inputs)


def main(argv: list[str] | None = None) -> int:
    """``--write``: compute the statistics of a suite and add them to the store (default: the committed one)."""
    from pldr_ref.tool_cli import add_suite_arguments, run_tool, tool_parser

    p = tool_parser("python -m pldr_ref.harness.policy.calibration", __doc__)
    p.add_argument("--write", action="store_true",
                   help="compute the statistics of the suite's cases and write them into --out, keeping the entries "
                        "already there (writing the committed store, the default --out, needs this flag)")
    p.add_argument("--fresh", action="store_true", help="recompute every statistic of the suite's cases")
    p.add_argument("--prune", action="store_true",
                   help="drop the entries of cases not in the suite (without it the store never shrinks)")
    p.add_argument("--dtype", action="append", default=None, choices=("float32", "bfloat16", "float16"))
    p.add_argument("--out", default=None, metavar="STORE.json",
                   help=f"the store to write (default: the committed {CACHE_FILE.name} in the package, the only "
                        "package file a command may write)")
    p.add_argument("--merge", nargs="*", default=[], metavar="FILE",
                   help="statistics files (e.g. per-dtype --out files) to merge in")
    add_suite_arguments(p)
    return run_tool(p, argv, _run)


def _run(args: Any) -> int:
    """The body of :func:`main` (checked paths first, then the work)."""
    from pldr_ref.output_paths import FILE, INPUT_FILE, INPUT_FOLDER, check_command_paths
    from pldr_ref.tool_cli import load_selected_suite, suite_selection

    if not args.write:
        if args.fresh or args.prune or args.out or args.merge or args.dtype:
            raise ValueError("--fresh, --prune, --out, --merge and --dtype go with --write")
        return 0
    out = Path(args.out) if args.out else CACHE_FILE
    root, names = suite_selection(args, "python -m pldr_ref.harness.policy.calibration")
    committed = out.resolve() == CACHE_FILE.resolve()
    check_command_paths([("--out", out, FILE)],
                        [("--suite-dir", root, INPUT_FOLDER), *[("--merge", m, INPUT_FILE) for m in args.merge]],
                        allow_package=frozenset({"--out"}) if committed else frozenset())
    if out.exists():
        read_document(out)  # a malformed store is refused before the work, not overwritten after it
    for m in args.merge:
        read_document(m)
    cases = load_selected_suite(root, names)
    if args.fresh:
        ensemble._store().clear()
    dtypes = tuple(args.dtype or ("float32", "bfloat16", "float16"))
    n = write_store(cases, out, dtypes, tuple(Path(m) for m in args.merge), prune=args.prune)
    print(f"wrote {n} statistics to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
