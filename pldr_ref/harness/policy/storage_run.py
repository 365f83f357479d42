"""The reference run of a case in a storage dtype, and its error statistics against the golden value.

What the calibration ensemble (:mod:`pldr_ref.harness.policy.ensemble`) runs and measures, below the pass/fail policy
that scales those statistics (:mod:`pldr_ref.harness.policy.tolerance`, which re-exports these names): a case run with
inputs, parameters and stage outputs rounded to the dtype (:func:`storage_outputs`; with a member's ``ops``,
:func:`pldr_ref.harness.policy.arithmetic.arithmetic_ops`, in that member's own arithmetic), and the four error measures
of one output (:class:`ErrorStats`, :func:`error_stats`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from pldr_ref.harness.verdict.compare import numpy_dtype
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.registry import op_kinds

#: Kinds made of one stage: an allowance above MAX_ALLOWANCE_FRACTION makes them not_applicable
#: (the ``op`` category of :mod:`pldr_ref.registry`).
SINGLE_STAGE_KINDS = op_kinds("op")



@dataclasses.dataclass(frozen=True)
class ErrorStats:
    """Error statistics of one run on one output (d = run - golden over the finite entries), or the ensemble's
    statistic of them (:func:`pldr_ref.harness.policy.ensemble.robust_stats`).

    max_abs: max|d| (None: the run is non-finite where the golden value is finite);
    rms_rel: ||d|| / ||golden||; offset: mean(d) / rms(golden); gain: <d, golden> / <golden, golden>;
    n: number of finite golden entries; groups: for an ensemble statistic, the label of the choice group that set
    each of (max_abs, rms_rel, offset, gain) (empty for one run).
    """

    max_abs: float | None
    rms_rel: float = 0.0
    offset: float = 0.0
    gain: float = 0.0
    n: int = 0
    groups: tuple[str, str, str, str] | tuple[()] = ()

    @property
    def rms_group(self) -> str:
        """The choice group that set the relative-RMS statistic ("" for one run)."""
        return self.groups[1] if self.groups else ""


@dataclasses.dataclass(frozen=True)
class ArithmeticStats:
    """The ensemble's statistics of one output for every arithmetic a backend may declare.

    by_arithmetic: arithmetic key (:data:`pldr_ref.harness.policy.ensemble.ARITHMETIC_KEYS`) -> the statistic over the
    members that arithmetic covers (None: non-finite there).  The last key is the widest (every member).
    """

    by_arithmetic: tuple[tuple[str, ErrorStats | None], ...]

    def of(self, key: str) -> ErrorStats | None:
        """The statistic of arithmetic ``key``."""
        return dict(self.by_arithmetic)[key]

    @property
    def widest(self) -> ErrorStats | None:
        """The statistic over every member (the widest legitimate arithmetic)."""
        return self.by_arithmetic[-1][1]


def round_to(dtype: str, x: np.ndarray) -> np.ndarray:
    """``x`` rounded to ``dtype`` (range-aware, :func:`pldr_ref.fixtures.baselines.storage_round`) and widened
    back to float64; non-float arrays pass through."""
    from pldr_ref.fixtures.baselines import storage_round

    a = np.asarray(x)
    if a.dtype.kind != "f":
        return a
    if dtype == "float64":
        return a.astype(np.float64)
    return storage_round(a, numpy_dtype(dtype))


def error_stats(golden: np.ndarray, run: np.ndarray) -> ErrorStats:
    """:class:`ErrorStats` of ``run`` against ``golden`` (max_abs None if the run is non-finite where the golden
    value is finite, or has a different non-finite class)."""
    g = np.asarray(golden, dtype=np.float64)
    r = np.asarray(run, dtype=np.float64)
    if g.shape != r.shape:
        return ErrorStats(None)
    fin = np.isfinite(g)
    if np.any(fin & ~np.isfinite(r)) or np.any(~fin & ~((r == g) | (np.isnan(r) & np.isnan(g)))):
        return ErrorStats(None)
    if not fin.any():
        return ErrorStats(0.0)
    d = r[fin] - g[fin]
    gf = g[fin]
    n = int(gf.size)
    scale = float(np.max(np.abs(gf)))
    if scale == 0.0:
        return ErrorStats(float(np.max(np.abs(d))), 0.0, 0.0, 0.0, n)
    gs, ds = gf / scale, d / scale  # scaled: no overflow in the sums of squares
    gg = float(np.dot(gs, gs))
    return ErrorStats(float(np.max(np.abs(d))), float(np.linalg.norm(ds)) / math.sqrt(gg),
                      float(np.mean(ds)) / math.sqrt(gg / n), float(np.dot(ds, gs)) / gg, n)


def storage_outputs(case: Any, dtype: str, ops: Ops = FLOAT64_OPS) -> dict[str, np.ndarray] | None:
    """The ``dtype`` run of ``case`` by output name (None when the case has no float64 runner), every stage in the
    arithmetic ``ops`` (default float64: the naive run).

    Op cases: inputs and parameters rounded, the float64 runner, outputs rounded.  Other kinds:
    :func:`pldr_ref.fixtures.baselines.baseline_outputs` (stage-by-stage rounding for model and layer
    cases, rounded inputs and parameters per call and step for cache and scoring cases).
    """
    from pldr_ref.fixtures.baselines import PRECISIONS, baseline_outputs
    from pldr_ref.fixtures.runners import RUNNERS

    if case.kind not in RUNNERS:
        return None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if case.kind in SINGLE_STAGE_KINDS:
            inputs = {k: round_to(dtype, v) for k, v in case.inputs.items()}
            try:
                run = RUNNERS[case.kind](case.config, _rounded_params(case.params, dtype), case.args, inputs, ops)
            except (FloatingPointError, OverflowError, ValueError):
                return {}
            return {k: round_to(dtype, v) for k, v in run.items()}
        if case.params is None:
            return None
        try:
            return baseline_outputs(case.kind, case.params, case.args, case.inputs, PRECISIONS[dtype], ops)
        except (FloatingPointError, OverflowError, ValueError):
            return {}


def _rounded_params(params: Any, dtype: str) -> Any:
    if params is None:
        return None
    from pldr_ref.params import Params

    return Params(params.config, {k: round_to(dtype, v) for k, v in params.items()})
