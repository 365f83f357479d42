"""The reference run of a case in a storage dtype, and its error statistics against the golden value.

What the calibration ensemble (:mod:`pldr_ref.harness.ensemble`) runs and measures, below the pass/fail policy
that scales those statistics (:mod:`pldr_ref.harness.tolerance`, which re-exports these names): a case run with
inputs, parameters and stage outputs rounded to the dtype (:func:`naive_outputs`; inside
:func:`pldr_ref.harness.arithmetic.emulating` every member's own arithmetic), and the four error measures of one
output (:class:`NaiveStats`, :func:`naive_stats`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from pldr_ref.harness.compare import numpy_dtype
from pldr_ref.registry import op_kinds

#: Kinds made of one stage: an allowance above MAX_ALLOWANCE_FRACTION makes them not_applicable
#: (the ``op`` category of :mod:`pldr_ref.registry`).
SINGLE_STAGE_KINDS = op_kinds("op")



@dataclasses.dataclass(frozen=True)
class NaiveStats:
    """Error statistics of the naive run on one output (d = naive - golden over the finite entries).

    max_abs: max|d| (None: the naive run is non-finite where the golden value is finite);
    rms_rel: ||d|| / ||golden||; offset: mean(d) / rms(golden); gain: <d, golden> / <golden, golden>;
    n: number of finite golden entries.
    """

    max_abs: float | None
    rms_rel: float = 0.0
    offset: float = 0.0
    gain: float = 0.0
    n: int = 0
    members: tuple[tuple[float, float, float, float], ...] = ()


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


def naive_stats(golden: np.ndarray, naive: np.ndarray) -> NaiveStats:
    """:class:`NaiveStats` of ``naive`` against ``golden`` (max_abs None if the naive value is non-finite
    where the golden one is finite, or has a different non-finite class)."""
    g = np.asarray(golden, dtype=np.float64)
    r = np.asarray(naive, dtype=np.float64)
    if g.shape != r.shape:
        return NaiveStats(None)
    fin = np.isfinite(g)
    if np.any(fin & ~np.isfinite(r)) or np.any(~fin & ~((r == g) | (np.isnan(r) & np.isnan(g)))):
        return NaiveStats(None)
    if not fin.any():
        return NaiveStats(0.0)
    d = r[fin] - g[fin]
    gf = g[fin]
    n = int(gf.size)
    scale = float(np.max(np.abs(gf)))
    if scale == 0.0:
        return NaiveStats(float(np.max(np.abs(d))), 0.0, 0.0, 0.0, n)
    gs, ds = gf / scale, d / scale  # scaled: no overflow in the sums of squares
    gg = float(np.dot(gs, gs))
    return NaiveStats(float(np.max(np.abs(d))), float(np.linalg.norm(ds)) / math.sqrt(gg),
                      float(np.mean(ds)) / math.sqrt(gg / n), float(np.dot(ds, gs)) / gg, n)


def naive_error(golden: np.ndarray, naive: np.ndarray) -> float | None:
    """max |naive - golden| over the golden's finite entries; None if the naive value is non-finite there."""
    return naive_stats(golden, naive).max_abs


def naive_outputs(case: Any, dtype: str) -> dict[str, np.ndarray] | None:
    """The naive ``dtype`` run of ``case`` by output name (None when the case has no float64 runner).

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
                run = RUNNERS[case.kind](case.config, _rounded_params(case.params, dtype), case.args, inputs)
            except (FloatingPointError, OverflowError, ValueError):
                return {}
            return {k: round_to(dtype, v) for k, v in run.items()}
        if case.params is None:
            return None
        try:
            return baseline_outputs(case.kind, case.params, case.args, case.inputs, PRECISIONS[dtype])
        except (FloatingPointError, OverflowError, ValueError):
            return {}


def _rounded_params(params: Any, dtype: str) -> Any:
    if params is None:
        return None
    from pldr_ref.params import Params

    return Params(params.config, {k: round_to(dtype, v) for k, v in params.items()})
