"""The pass/fail policy: how far a backend output may be from the golden value (``docs/tolerances.md``).

Every number in an allowance comes with its reason:

* **float64** -- the case's own tolerance from ``case.json`` (per output, elementwise
  |a - e| <= atol + rtol |e|): 1000 x the largest change of the float64 reference under 1-ulp
  relative perturbations of every input and parameter (``docs/fixtures.md``).
* **float32, bfloat16, float16** -- four tests, each scaled by the statistics of a *calibration ensemble*
  (:mod:`pldr_ref.harness.ensemble`): twelve or thirteen legitimate low-precision implementations
  (:mod:`pldr_ref.harness.arithmetic`: accumulation in float32 or in the dtype, elementwise work in float32 or in
  the dtype, blocked and reordered sums, online softmax, exp2, reciprocals, unfused bias and activation, TF32
  products in float32, the naive run) run the case; per output and error measure (:class:`NaiveStats`: max error,
  relative RMS, |offset|, |gain|) the statistic the tests scale is the **largest, over the groups of members making
  one arithmetic choice, of the group's median** -- never one run's maximum, and never only the majority's
  arithmetic:

  1. max test: max|a - e| <= atol = k x max-error statistic + :data:`FLOOR_UNITS` u max|e|, with
     k = :data:`K_HALF` (16-bit) or max(:data:`K_MIN`, :data:`K_SQRT` sqrt(n)) (float32);
  2. relative RMS test: ||a - e|| / ||e|| <= :data:`K_RMS` rho;
  3. offset test: |mean(a - e)| / rms(e) <= :data:`K_BIAS` (|offset| statistic + rho / sqrt(N))
     + :data:`BIAS_FLOOR` rho;
  4. gain test: |<a - e, e>| / <e, e> <= :data:`K_BIAS` (|gain| statistic + rho / sqrt(N)) + :data:`BIAS_FLOOR` rho,
     rho = max(relative-RMS statistic, u), N = number of finite elements: independent rounding errors average
     out like 1 / sqrt(N); a systematic bug (LayerNorm with the unbiased variance, a scale or shift) does not.

  In float32 every allowance is multiplied by :data:`F32_FACTOR` (float32 kernels evaluate exp, log, power, sin,
  cos in float32; the members in float64).  Isolated stages are judged from golden upstream values with the
  ensemble run on *that stage alone* (their own conditioning); end-to-end outputs with the ensemble run on the
  whole case.  (The chain and subset factors of the earlier naive-run policy are kept as constants equal to 1,
  reported in every JSON report.)
* **not judgeable** ("not covered"): an output whose relative-RMS allowance exceeds :data:`MAX_ALLOWANCE_FRACTION`
  or whose max-test allowance exceeds :data:`MAX_ABS_FRACTION` of its scale (or whose ensemble is non-finite: the
  dtype cannot carry the case) cannot tell a right backend from a wrong one.  It is reported ``not_judgeable``
  for multi-stage kinds -- never a pass, never covered by isolated stages, not a failure of the run (a NaN / inf
  where the golden value is finite still fails) -- and ``not_applicable`` for a single-stage op case (the op's
  own inputs are ill-conditioned in that dtype).  So is every output computed from attention weights E that are
  not judgeable (:mod:`pldr_ref.harness.unresolved_upstream`: legitimate kernels scatter beyond the ensemble there).
* Boolean and integer outputs (masks, positions) must match exactly in every dtype.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.compare import machine_epsilon, numpy_dtype
from pldr_ref.harness.naive_run import (  # re-exported: the policy's public names
    SINGLE_STAGE_KINDS,
    NaiveStats,
    naive_error,  # noqa: F401
    naive_outputs,  # noqa: F401
    naive_stats,
    round_to,  # noqa: F401
)

#: Max test, bfloat16 and float16: allowance = K_HALF x the naive run's max error (+ floor).
K_HALF = 8.0
#: Max test, float32: k = K_SQRT * sqrt(n) with n the longest dot product of the case ...
K_SQRT = 2.0
#: ... but never below K_MIN.
K_MIN = 8.0
#: Floor of the max test: FLOOR_UNITS unit roundoffs of the dtype times max|golden| (one ulp of the scale).
FLOOR_UNITS = 2.0
#: Relative RMS test: allowance = K_RMS x rho, rho = max(ensemble statistic, u).  The statistic already takes the
#: worst arithmetic-choice group (:func:`pldr_ref.harness.ensemble.robust_stats`: accumulation or elementwise
#: work in the dtype, unfused epilogues ...), so K_RMS only covers the scatter of one kernel around its group's
#: median: the legitimate battery backends and the bundled torch backend land at most 3.3 x rho on the judged
#: outputs of the committed suite (``python -m pldr_ref.harness.battery --margins``; a chaotic cached chain at 4.9 x
#: is computed from attention weights the dtype cannot resolve and not judged:
#: :mod:`pldr_ref.harness.unresolved_upstream`); 8 would leave no bfloat16 forward case judgeable.
K_RMS = 4.0
#: Offset and gain tests: allowance = K_BIAS x (|naive value| + rho / sqrt(N)) + BIAS_FLOOR x rho,
#: rho = max(naive relative RMS, u).
K_BIAS = 8.0
#: Floor of the offset and gain tests in units of rho: internal roundings of a real kernel (a rounded constant,
#: the mean of a near-constant row) bias its error by a few roundings that the naive run does not make.
BIAS_FLOOR = 2.0
#: float32 multiplier of all four tests (:func:`whole_tensor_factor`): the members evaluate exp, log, power, sin
#: and cos in float64 and round once, a float32 kernel evaluates them in float32 (1-2 ulp, amplified by |P| in
#: A_LM^P and by the RoPE angles); the bundled float32 torch backend measured up to 2.1 x the unscaled relative-RMS
#: allowance (``model/tiny_left_pad_additive`` A_P); twice that, rounded up to a power of two.  In 16-bit
#: dtypes those errors are far below the storage rounding (factor 1).
F32_FACTOR = 4.0
#: End-to-end outputs of multi-stage cases: every k above times this factor per dtype.  1 everywhere: each
#: ensemble member runs the whole chain, so the compounding of errors along it is in the members' statistics.
#: Max test:
CHAIN_FACTORS = {"float32": 1.0, "bfloat16": 1.0, "float16": 1.0}
#: Relative-RMS, offset and gain tests:
WHOLE_CHAIN_FACTORS = {"float32": 1.0, "bfloat16": 1.0, "float16": 1.0}
#: End-to-end outputs judged on a representable part only (:mod:`pldr_ref.harness.representable`): every k and
#: whole-tensor factor above times this factor per dtype; 1 (the members' statistics are taken over the same part).
SUBSET_FACTORS = {"float32": 1.0, "bfloat16": 1.0, "float16": 1.0}
#: The largest of :data:`CHAIN_FACTORS` (reported in the JSON policy).
CHAIN_FACTOR = max(CHAIN_FACTORS.values())
#: An output is not judgeable when its relative-RMS allowance exceeds this fraction (of ||golden||) ...
MAX_ALLOWANCE_FRACTION = 0.1
#: ... or its max-test allowance exceeds this fraction of max|golden| (the max test bounds outliers only).
MAX_ABS_FRACTION = 0.5

#: Name of each rule, as written in reports.
RULE_FLOAT64 = "float64: case tolerance"
RULE_BASELINE = "naive-run conditioning: max, rms, offset, gain"
RULE_EXACT = "exact match"
RULE_NOT_APPLICABLE = "not applicable"
RULE_NOT_JUDGEABLE = "not judgeable"

@dataclasses.dataclass(frozen=True)
class Allowance:
    """The allowance for one output.

    Max test |a - e| <= atol + rtol |e| (elementwise); when ``rms`` is set, also relative RMS error
    <= rms, |offset| <= ``offset`` and |gain| <= ``gain`` (see module docstring).  ``judged`` False:
    not judged, with ``reason``; ``judgeable`` False additionally means it counts against the verdict
    unless covered by isolated stages.  ``detail`` holds the inputs of the rule for the report.
    """

    atol: float | None
    rtol: float
    rule: str
    detail: Mapping[str, Any]
    judged: bool = True
    reason: str = ""
    rms: float | None = None
    offset: float | None = None
    gain: float | None = None
    judgeable: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"atol": self.atol, "rtol": self.rtol, "rule": self.rule, "detail": dict(self.detail),
                "judged": self.judged, "reason": self.reason, "rms": self.rms, "offset": self.offset,
                "gain": self.gain, "judgeable": self.judgeable}


def unit_roundoff(dtype: str) -> float:
    """u = eps / 2 of the dtype."""
    return machine_epsilon(dtype) / 2.0


def inner_dimension(case: Any) -> int:
    """n: an upper bound on the length of the dot products and sums a stage of ``case`` evaluates.

    Model cases: the largest of d_model, dff, A_dff, A_dff_depth, d_k and every input dimension; op
    cases: the largest dimension of any input tensor (at least 1).
    """
    dims = [1]
    c = getattr(case, "config", None)
    if c is not None:
        dims += [c.d_model, c.dff, c.A_dff, c.A_dff_depth, c.d_k]
    for arr in (getattr(case, "inputs", None) or {}).values():
        dims += [int(d) for d in np.shape(arr)]
    return max(dims)


def k_factor(dtype: str, n: int) -> float:
    """k of the max test for ``dtype`` and inner dimension ``n`` (see module docstring)."""
    if dtype in ("bfloat16", "float16"):
        return K_HALF
    if dtype == "float32":
        return max(K_MIN, K_SQRT * math.sqrt(n))
    raise ValueError(f"no naive-run rule for dtype {dtype!r} (float64 uses the case tolerance)")


def whole_tensor_factor(dtype: str) -> float:
    """Multiplier of the four tests: :data:`F32_FACTOR` for float32 (a float32 kernel's transcendental functions,
    which the ensemble evaluates in float64), 1 for the 16-bit dtypes."""
    return F32_FACTOR if dtype == "float32" else 1.0


def float64_allowance(case: Any, name: str) -> Allowance:
    """The case's own float64 tolerance for output ``name`` (per-output entry, else the global one)."""
    tol = getattr(case, "tolerance", None) or {}
    per = (tol.get("outputs") or {}).get(name)
    src = per if per is not None else tol
    if "atol" not in src and "rtol" not in src:
        return Allowance(None, 0.0, RULE_NOT_APPLICABLE, {}, judged=False,
                         reason=f"case {getattr(case, 'name', '?')} gives no float64 tolerance for {name!r}")
    atol, rtol = float(src.get("atol", 0.0)), float(src.get("rtol", 0.0))
    return Allowance(atol, rtol, RULE_FLOAT64, {"atol": atol, "rtol": rtol, "tier": getattr(case, "tier", "")})


def _scale(golden: np.ndarray) -> float:
    g = np.asarray(golden, dtype=np.float64)
    fin = np.isfinite(g)
    return float(np.max(np.abs(g[fin]))) if fin.any() else 0.0


def baseline_allowance(dtype: str, golden: np.ndarray, baseline: NaiveStats | float | None, n: int,
                       *, source: str, single_stage: bool = False, chain: bool = False, subset: bool = False
                       ) -> Allowance:
    """The four-test allowance from the naive run's statistics (a bare float: its max error only).

    Not judged if the naive run is non-finite or the max-test allowance exceeds
    :data:`MAX_ALLOWANCE_FRACTION` of the output's scale (``not_applicable`` for single-stage kinds,
    ``not_judgeable`` otherwise).
    """
    stats = baseline if isinstance(baseline, NaiveStats) or baseline is None else NaiveStats(float(baseline))
    scale = _scale(golden)
    label = RULE_NOT_APPLICABLE if single_stage else RULE_NOT_JUDGEABLE
    if stats is None or stats.max_abs is None:
        return Allowance(None, 0.0, label, {"baseline": None, "source": source}, judged=False,
                         judgeable=single_stage,
                         reason=f"the naive {dtype} run of the reference is non-finite on this output "
                                f"({dtype} cannot carry the case)")
    u = unit_roundoff(dtype)
    sub = SUBSET_FACTORS[dtype] if subset else 1.0
    f = (CHAIN_FACTORS[dtype] if chain else 1.0) * sub * whole_tensor_factor(dtype)
    k = f * k_factor(dtype, n)
    floor = FLOOR_UNITS * u * scale
    atol = k * float(stats.max_abs) + floor
    rho = max(stats.rms_rel, u)
    noise = rho / math.sqrt(max(stats.n, 1))
    detail = {"k": k, "n": n, "chain": chain, "subset": subset, "baseline": float(stats.max_abs),
              "naive_rms_rel": stats.rms_rel, "naive_offset": stats.offset, "naive_gain": stats.gain,
              "elements": stats.n, "floor": floor,
              "scale": scale, "kappa": float(stats.max_abs) / (u * scale) if scale > 0 else 0.0, "source": source}
    w = (WHOLE_CHAIN_FACTORS[dtype] if chain else 1.0) * whole_tensor_factor(dtype) * sub
    rms = w * K_RMS * rho
    offset = w * (K_BIAS * (abs(stats.offset) + noise) + BIAS_FLOOR * rho)
    gain = w * (K_BIAS * (abs(stats.gain) + noise) + BIAS_FLOOR * rho)
    if scale > 0 and (rms > MAX_ALLOWANCE_FRACTION or atol > MAX_ABS_FRACTION * scale):
        return Allowance(atol, 0.0, label, detail, judged=False, judgeable=single_stage, rms=rms, offset=offset,
                         gain=gain,
                         reason=f"allowance (relative RMS {rms:.1%}, max {atol / scale:.1%} of the scale) exceeds "
                                f"{MAX_ALLOWANCE_FRACTION:.0%} RMS / {MAX_ABS_FRACTION:.0%} max (naive {dtype} "
                                f"error: RMS {stats.rms_rel:.1%}, max {stats.max_abs / scale:.1%}): {dtype} cannot "
                                "resolve this output" + ("" if single_stage else " end to end"))
    return Allowance(atol, 0.0, RULE_BASELINE, detail, rms=rms, offset=offset, gain=gain)


def output_allowance(case: Any, name: str, dtype: str, golden: np.ndarray, baseline: NaiveStats | float | str | None,
                     *, source: str = "naive run", subset: bool = False) -> Allowance:
    """The allowance for output ``name`` of ``case`` computed in ``dtype`` (``subset``: judged on a representable
    part only, :data:`SUBSET_FACTORS`).

    ``baseline``: the naive run's statistics (or its max error as a float), None when non-finite, or a
    string saying why no naive run exists (then the output is not judgeable, with that reason).
    """
    numpy_dtype(dtype)
    g = np.asarray(golden)
    if g.dtype.kind in "biu":
        return Allowance(0.0, 0.0, RULE_EXACT, {})
    if dtype == "float64":
        return float64_allowance(case, name)
    single = getattr(case, "kind", None) in SINGLE_STAGE_KINDS
    if isinstance(baseline, str):
        return Allowance(None, 0.0, RULE_NOT_APPLICABLE if single else RULE_NOT_JUDGEABLE, {"source": source},
                         judged=False, judgeable=single, reason=f"no {dtype} naive run for {name!r} ({baseline})")
    return baseline_allowance(dtype, golden, baseline, inner_dimension(case), source=source, single_stage=single,
                              chain=not single, subset=subset)


#: Largest finite float32 magnitude: the widest format of any mixed-precision backend below float64.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def beyond_float32(case: Any) -> str | None:
    """The name of a float input or golden output of ``case`` holding a finite value beyond the float32 range
    (e.g. a finfo(float64).min mask, sigmoid inputs of 1e150), else None."""
    for label, tensors in (("input", case.inputs), ("output", case.outputs)):
        for name, v in tensors.items():
            a = np.asarray(v)
            if a.dtype.kind == "f" and np.any(np.isfinite(a) & (np.abs(a) > FLOAT32_MAX)):
                return f"{label} {name!r}"
    return None


#: Stored in place of statistics for an output the ensemble's runs do not produce.
ABSENT = "absent"


def case_baselines(case: Any, dtype: str, keep: Mapping[str, np.ndarray] | None = None
                   ) -> tuple[dict[str, NaiveStats] | None, str]:
    """(naive-run statistics by output, source) of ``case`` in ``dtype``; (None, "none") for float64 or a
    case without a naive run.  Outputs the naive run does not produce are absent (not judgeable).  ``keep``:
    boolean masks by output name (:mod:`pldr_ref.harness.representable`): those outputs' statistics are taken
    over the kept elements only."""
    if dtype == "float64":
        return None, "none"
    wide = beyond_float32(case)
    if wide:
        return {}, f"{wide} holds finite values beyond the float32 range: no backend below float64 can carry it"
    from pldr_ref.fixtures.runners import RUNNERS
    from pldr_ref.harness.ensemble import case_runs, robust_stats, stored_stats

    if case.kind not in RUNNERS or (case.kind not in SINGLE_STAGE_KINDS and case.params is None):
        return None, "none"
    source = ("calibration ensemble (one stage)" if case.kind in SINGLE_STAGE_KINDS
              else "calibration ensemble (whole case)")
    keep = keep or {}
    out = {}
    for name, g in case.outputs.items():

        def compute(name: str = name, g: np.ndarray = g) -> NaiveStats | str | None:
            runs = [run for _, run in case_runs(case, dtype)]
            if any(run is None or name not in run for run in runs):
                return ABSENT
            sel = keep.get(name)
            per = [naive_stats(np.asarray(g)[sel], np.asarray(run[name])[sel])
                   if sel is not None and np.shape(run[name]) == np.shape(g) else naive_stats(g, run[name])
                   for run in runs]
            return robust_stats(per, dtype)

        st = stored_stats(case, dtype, name, compute)
        if st != ABSENT:
            out[name] = st
    return out, source
