"""Writes the committed calibration store (``python -m pldr_ref.harness.calibration --write``; ``docs/tolerances.md``).

The ensemble, its statistic and the store it reads live in :mod:`pldr_ref.harness.ensemble` (re-exported here);
this module computes the statistics of a whole suite by validating a golden-output backend on every case (which
evaluates every statistic the harness uses) and writes :data:`~pldr_ref.harness.ensemble.CACHE_FILE`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from pldr_ref.harness import ensemble
from pldr_ref.harness.ensemble import (  # re-exported: the names the harness and its tests know from here
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


def write_store(cases: list[Any], path: Path = CACHE_FILE, dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16"),
                merge: tuple[Path, ...] = ()) -> int:
    """Write the statistics of ``cases`` in ``dtypes`` (computed where missing by validating a golden-output backend
    on every case), plus those of the ``merge`` files (same fingerprint), to ``path``; returns the number of
    entries."""
    from pldr_ref.harness.validate import validate

    store = ensemble._store()
    for other in merge:
        doc = json.loads(Path(other).read_text(encoding="utf-8"))
        if doc.get("fingerprint") != fingerprint():
            raise ValueError(f"{other}: statistics of another ensemble (fingerprint {doc.get('fingerprint')})")
        for digest, by_dtype in doc["cases"].items():
            for dt, entries in by_dtype.items():
                store.setdefault(digest, {}).setdefault(dt, {}).update(entries)
    for case in cases:  # one case at a time: progress on stderr, the member runs freed as it goes
        validate(_GoldenBackend(), [case], dtypes)
        print(f"calibrated {case.name}", file=sys.stderr, flush=True)
    keep = {}
    for c in cases:
        d = ensemble._digest(c)
        if d in store:
            keep[d] = {dt: v for dt, v in store[d].items() if dt in dtypes or merge}
    doc = {"fingerprint": fingerprint(), "cases": keep}
    Path(path).write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8")
    return sum(len(v) for d in keep.values() for v in d.values())


class _GoldenBackend:
    """The golden outputs of every case and the float64 reference stages, in every dtype: validating it computes
    every statistic the harness uses."""

    name = "golden"

    def capabilities(self) -> Any:
        from pldr_ref.fixtures.runners import RUNNERS
        from pldr_ref.harness.protocol import DTYPES, Capabilities
        from pldr_ref.registry import ALL_STAGES

        return Capabilities(dtypes=DTYPES, kinds=tuple(RUNNERS), stages=tuple(s.name for s in ALL_STAGES),
                            caches=("kv", "g"), position_ids=True)

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        return dict(case.outputs)

    def run_stage(self, request: Any) -> dict[str, np.ndarray]:
        from pldr_ref.harness.stage_reference import reference_stage

        return reference_stage(request.stage, request.layer, request.config, request.params, request.inputs)


def main(argv: list[str] | None = None) -> int:
    """``--write``: recompute and write :data:`CACHE_FILE` for the committed suite."""
    import argparse

    from pldr_ref.harness.suite_loading import load_suite, suite_root

    p = argparse.ArgumentParser(prog="python -m pldr_ref.harness.calibration", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", action="store_true",
                   help=f"write {CACHE_FILE.name} for the suite (statistics of cases already stored are kept; "
                        "cases no longer in the suite dropped)")
    p.add_argument("--fresh", action="store_true", help="recompute every statistic")
    p.add_argument("--dtype", action="append", default=None, choices=("float32", "bfloat16", "float16"))
    p.add_argument("--out", default=str(CACHE_FILE), help="where to write (default: the committed store)")
    p.add_argument("--merge", nargs="*", default=[], help="statistics files (e.g. per-dtype --out files) to merge in")
    p.add_argument("--suite-dir", "--suite", dest="suite", default="default")
    args = p.parse_args(argv)
    if args.write:
        if args.fresh:
            ensemble._STORE = {}
        dtypes = tuple(args.dtype or ("float32", "bfloat16", "float16"))
        n = write_store(load_suite(suite_root(args.suite), None, None), Path(args.out), dtypes,
                        tuple(Path(m) for m in args.merge))
        print(f"wrote {n} statistics to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
