"""Allowances calibrated on an ensemble of legitimate low-precision implementations (``docs/tolerances.md``).

Each member of :data:`ENSEMBLE` is an :class:`~pldr_ref.harness.arithmetic.Arithmetic`: one legitimate way to
compute the model in a storage dtype (accumulation in float32 or in the dtype, one-pass or blocked sums in two
orders, two-pass or online softmax, exp or exp2, division or reciprocal, fused or unfused bias and activation,
TF32 products in float32 runs, and the naive run that rounds only stage outputs).  Every member runs the case (or
the isolated stage) through the reference code with its arithmetic (:func:`pldr_ref.harness.arithmetic.emulating`);
its error against the golden value gives four numbers per output (max error, relative RMS, offset, gain).  The
allowance takes the **median over the members** of each number (:func:`robust_stats`) -- never one run's maximum --
and scales it by the factors of :mod:`pldr_ref.harness.tolerance`.  The medians are rounded up to
:data:`SIGNIFICANT_DIGITS` significant digits, so an allowance is the same on every machine, BLAS, thread count
and ml_dtypes version (the arithmetic is elementwise NumPy in explicit order, the rounding pldr_ref's own).

Members are evaluated once per case, dtype (and isolated stage) and process (:func:`case_runs`, memoized on the
case's content).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pldr_ref.harness.arithmetic import Arithmetic, emulating

#: The calibration ensemble (10 members for bfloat16 / float16; the float32 ensemble adds a TF32 member).
ENSEMBLE: tuple[Arithmetic, ...] = (
    Arithmetic("naive", internal=False),
    Arithmetic("f32acc-seq"),
    Arithmetic("f32acc-t16-online16-exp2", tile=16, softmax="online", softmax_tile=16, exp2=True),
    Arithmetic("f32acc-t64-online64-recip-unfused", tile=64, softmax="online", softmax_tile=64, reciprocal=True,
               fused=False),
    Arithmetic("f32acc-t256-exp2-recip", tile=256, exp2=True, reciprocal=True),
    Arithmetic("f32acc-reverse-unfused", order="reverse", fused=False),
    Arithmetic("dtype-acc-t16", accumulate="storage", tile=16),
    Arithmetic("dtype-acc-seq-online64", accumulate="storage", softmax="online", softmax_tile=64),
    Arithmetic("dtype-all-t64-recip", accumulate="storage", compute="storage", tile=64, reciprocal=True),
    Arithmetic("f32acc-reverse-t16-online256-exp2-unfused", order="reverse", tile=16, softmax="online",
               softmax_tile=256, exp2=True, fused=False),
)
#: Added to the float32 ensemble only.
TF32_MEMBER = Arithmetic("tf32-products", tf32=True, tile=64)

#: Medians are rounded up to this many significant digits (machine independence, see module docstring).
SIGNIFICANT_DIGITS = 2


def members(dtype: str) -> tuple[Arithmetic, ...]:
    """The calibration ensemble of ``dtype``."""
    return ENSEMBLE + ((TF32_MEMBER,) if dtype == "float32" else ())


def round_up(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``x`` >= 0 rounded up to ``digits`` significant decimal digits (0 stays 0)."""
    if not x > 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(x)) - digits + 1
    q = 10.0 ** e
    return float(f"{math.ceil(x / q - 1e-9) * q:.{digits}g}")


def case_digest(case: Any) -> str:
    """A digest of what a calibration depends on: the case's name, kind, config, args, inputs, outputs, params."""
    h = hashlib.sha256()
    h.update(repr((case.name, case.kind, repr(case.config), sorted(case.args.items()))).encode())
    tensors = [case.inputs, case.outputs] + ([dict(case.params.items())] if case.params is not None else [])
    for group in tensors:
        for k in sorted(group):
            a = np.ascontiguousarray(group[k])
            h.update(k.encode())
            h.update(str(a.dtype).encode())
            h.update(repr(a.shape).encode())
            h.update(a.tobytes())
    return h.hexdigest()


_MEMO: dict[tuple, Any] = {}
#: Most member runs kept in :data:`_MEMO` (oldest dropped first): the statistics are kept in :data:`_STORE`, the
#: runs only while the outputs of one case are judged.
MEMO_ENTRIES = 48


def _memo(key: tuple, compute: Callable[[], Any]) -> Any:
    if key not in _MEMO:
        if len(_MEMO) >= MEMO_ENTRIES:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = compute()
    return _MEMO[key]


def _digest(case: Any) -> str:
    cached = getattr(case, "_calibration_digest", None)
    if cached is None:
        cached = case_digest(case)
        with contextlib.suppress(AttributeError, TypeError):
            object.__setattr__(case, "_calibration_digest", cached)
    return cached


def case_runs(case: Any, dtype: str) -> list[tuple[str, dict[str, np.ndarray] | None]]:
    """(member name, outputs) of every member's run of ``case`` in ``dtype`` (None: no run for this kind)."""
    from pldr_ref.harness.tolerance import naive_outputs

    def compute() -> list[tuple[str, dict[str, np.ndarray] | None]]:
        out = []
        for m in members(dtype):
            with emulating(m, dtype):
                out.append((m.name, naive_outputs(case, dtype)))
        return out

    return _memo(("case", _digest(case), dtype), compute)


def stage_runs(case: Any, stage: str, layer: int | None, dtype: str,
               run: Callable[[], dict[str, np.ndarray] | None]) -> list[tuple[str, dict[str, np.ndarray] | None]]:
    """(member name, outputs) of every member's run of one isolated stage (``run`` evaluates it)."""

    def compute() -> list[tuple[str, dict[str, np.ndarray] | None]]:
        out = []
        for m in members(dtype):
            with emulating(m, dtype):
                out.append((m.name, run()))
        return out

    return _memo(("stage", _digest(case), dtype, stage, layer), compute)


# ---------------------------------------------------------------------------------------------------------------
# the statistics store: computed once per case, dtype and output, committed in CACHE_FILE

#: The committed statistics of the committed suite (``python -m pldr_ref.harness.calibration --write``): validation
#: reads them instead of running the ensemble; a case whose digest is absent (another suite, a changed case) is
#: calibrated at validation time.  ``tests/test_harness_calibration.py`` recomputes a sample and checks coverage.
CACHE_FILE = Path(__file__).with_name("calibration.json")
#: Bumped whenever the emulated arithmetic or the statistic changes: statistics of another revision are ignored.
CALIBRATION_REVISION = 1

_STORE: dict[str, Any] | None = None


def fingerprint() -> str:
    """Identifies the ensemble, the statistic and :data:`CALIBRATION_REVISION`."""
    text = repr((members("float32"), members("bfloat16"), SIGNIFICANT_DIGITS, CALIBRATION_REVISION))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _store() -> dict[str, Any]:
    global _STORE
    if _STORE is None:
        _STORE = {}
        if CACHE_FILE.is_file():
            doc = json.loads(CACHE_FILE.read_text(encoding="utf-8"))
            if doc.get("fingerprint") == fingerprint():
                _STORE = doc["cases"]
    return _STORE


def _encode(st: Any) -> list | str | None:
    return st if st is None or isinstance(st, str) else [st.max_abs, st.rms_rel, st.offset, st.gain, st.n]


def _decode(v: list | str | None) -> Any:
    from pldr_ref.harness.tolerance import NaiveStats

    return v if v is None or isinstance(v, str) else NaiveStats(v[0], v[1], v[2], v[3], int(v[4]))


def stored_stats(case: Any, dtype: str, key: str, compute: Callable[[], Any]) -> Any:
    """The ensemble statistics of ``key`` (an output name, or ``stage:layer:leaf``) of ``case`` in ``dtype``:
    from the store, else ``compute()`` (then kept in the store for this process)."""
    entry = _store().setdefault(_digest(case), {}).setdefault(dtype, {})
    if key not in entry:
        entry[key] = _encode(compute())
    return _decode(entry[key])


def write_store(cases: list[Any], path: Path = CACHE_FILE, dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16"),
                merge: tuple[Path, ...] = ()) -> int:
    """Write the statistics of ``cases`` in ``dtypes`` (computed where missing by validating a golden-output backend
    on every case), plus those of the ``merge`` files (same fingerprint), to ``path``; returns the number of
    entries."""
    from pldr_ref.harness.validate import validate

    store = _store()
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
        d = _digest(c)
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

    from pldr_ref.harness.cli import load_suite, suite_root

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
        global _STORE
        if args.fresh:
            _STORE = {}
        dtypes = tuple(args.dtype or ("float32", "bfloat16", "float16"))
        n = write_store(load_suite(suite_root(args.suite), None, None), Path(args.out), dtypes,
                        tuple(Path(m) for m in args.merge))
        print(f"wrote {n} statistics to {args.out}")
    return 0


def robust_stats(per_member: list[Any]) -> Any:
    """The ensemble's statistics of one output: the median over the members of max error, relative RMS, |offset|
    and |gain| (each rounded up to :data:`SIGNIFICANT_DIGITS` digits), with the members' values in ``members``.
    None (non-finite) when at least half the members are non-finite there."""
    from pldr_ref.harness.tolerance import NaiveStats

    finite = [s for s in per_member if s is not None and s.max_abs is not None]
    if not per_member or 2 * len(finite) <= len(per_member):
        return None
    n = finite[0].n

    def med(vals: list[float]) -> float:
        return round_up(float(np.median(np.asarray(vals, dtype=np.float64))))

    return NaiveStats(med([s.max_abs for s in finite]), med([s.rms_rel for s in finite]),
                      med([abs(s.offset) for s in finite]), med([abs(s.gain) for s in finite]), n,
                      members=tuple((s.max_abs, s.rms_rel, s.offset, s.gain) for s in per_member if s is not None
                                    and s.max_abs is not None))


if __name__ == "__main__":  # run main() of the imported module, whose store the harness fills
    from pldr_ref.harness.calibration import main as _main

    sys.exit(_main())
