"""The pass/fail policy: how far a backend output may be from the golden value (``docs/tolerances.md``).

* **float64** -- the case's own tolerance from ``case.json`` (per output, elementwise
  |a - e| <= atol + rtol |e|): 1000 x the largest change of the float64 reference under 1-ulp
  relative perturbations of every input and parameter (``docs/fixtures.md``).
* **float32, bfloat16, float16** -- the backend's error must stay within a small multiple of the error of
  legitimate implementations of the same case in the same dtype: the *calibration ensemble*
  (:mod:`pldr_ref.harness.policy.ensemble`), restricted to the arithmetic the backend declares
  (:data:`pldr_ref.harness.protocol.ARITHMETICS`; default ``float32-accumulate``, what GPU kernels do).  Per output
  and error measure (:class:`ErrorStats`: max error, relative RMS, |offset|, |gain|) the *reference error* is the
  largest, over the choice groups of those members, of the group's median (:func:`pldr_ref.harness.policy.ensemble
  .robust_stats`), and each test allows a multiple of it (w = :data:`F32_FACTOR` in float32, else 1):

  1. max test: max|a - e| <= w k x max-error reference + :data:`FLOOR_UNITS` u max|e|, with
     k = :data:`K_HALF` (16-bit) or max(:data:`K_MIN`, :data:`K_SQRT` sqrt(n)) (float32);
  2. relative RMS test: ||a - e|| / ||e|| <= w :data:`K_RMS` [arithmetic] rho, rho = max(relative-RMS reference, u);
  3. offset and gain tests: |offset|, |gain| <= w :data:`K_BIAS` (|statistic| + rho / sqrt(N)
     + :data:`BIAS_FLOOR` rho / :data:`K_BIAS`), N = number of finite elements: independent rounding errors average
     out like 1 / sqrt(N); a systematic bug (LayerNorm with the unbiased variance, a scale or shift) does not.

  Isolated stages are judged from golden upstream values with the ensemble run on *that stage alone*; end-to-end
  outputs with the ensemble run on the whole case (the compounding along the chain is in the members' errors).
* **not judgeable** ("not covered"): an output whose relative-RMS allowance exceeds :data:`MAX_ALLOWANCE_FRACTION`
  or whose max-test allowance exceeds :data:`MAX_ABS_FRACTION` of its scale (or whose ensemble is non-finite)
  cannot tell a right backend from a wrong one; so is every output computed from unresolved attention weights
  (:mod:`pldr_ref.harness.verdict.unresolved_upstream`).  Not judgeable only stops a pass: **a gross error fails
  everywhere** -- a relative RMS error above w :data:`K_GROSS` x the widest legitimate arithmetic's reference error
  (every member, :data:`pldr_ref.harness.policy.ensemble.WIDEST`) is beyond what any legitimate kernel produces.
* Boolean and integer outputs (masks, positions) must match exactly in every dtype.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.policy.storage_run import (  # re-exported: the policy's public names
    SINGLE_STAGE_KINDS,
    ArithmeticStats,
    ErrorStats,
    error_stats,
    round_to,  # noqa: F401
    storage_outputs,  # noqa: F401
)
from pldr_ref.harness.verdict.compare import TensorComparison, machine_epsilon, numpy_dtype

#: Max test, bfloat16 and float16: allowance = K_HALF x the max-error reference (+ floor).
K_HALF = 8.0
#: Max test, float32: k = K_SQRT * sqrt(n) with n the longest dot product of the case ...
K_SQRT = 2.0
#: ... but never below K_MIN.
K_MIN = 8.0
#: Floor of the max test: FLOOR_UNITS unit roundoffs of the dtype times max|golden| (one ulp of the scale).
FLOOR_UNITS = 2.0
#: Relative RMS test: allowance = K_RMS[arithmetic] x rho, rho = max(reference error, u), per declared arithmetic
#: (keys of :data:`pldr_ref.harness.policy.ensemble.ARITHMETIC_KEYS`).  The reference already takes the worst choice
#: group of the declared arithmetic's members (tiles, orders, online softmax, exp2, unfused epilogues ...), so K_RMS
#: only covers the scatter of one kernel around its group's median.  float32-accumulate: 2, FlashAttention's rule (its
#: members' relative RMS errors on the logits agree within 15 %; the float32-accumulating battery kernels land at
#: most 1.7 x rho on any judged output).  The dtype arithmetics: 4 (the order of a 16-bit accumulation scatters the
#: error: the battery's bfloat16 / float16 accumulators land up to 3.3 x their rho).  Measured:
#: ``python -m pldr_ref.harness.controls.battery --margins``, ``docs/tolerances.md``.
K_RMS = {"float32-accumulate": 2.0, "dtype-accumulate-or-elementwise": 4.0}
#: Offset and gain tests: allowance = K_BIAS x (|statistic| + rho / sqrt(N)) + BIAS_FLOOR x rho.
K_BIAS = 8.0
#: Floor of the offset and gain tests in units of rho: internal roundings of a real kernel (a rounded constant,
#: the mean of a near-constant row) bias its error by a few roundings that the members do not make.
BIAS_FLOOR = 2.0
#: float32 multiplier of every multiple (:func:`whole_tensor_factor`): the members evaluate exp, log, power, sin
#: and cos in float64 and round once, a float32 kernel evaluates them in float32 (1-2 ulp, amplified by |P| in
#: A_LM^P and by the RoPE angles); the bundled float32 torch backend measured up to 2.1 x the unscaled relative-RMS
#: allowance (``model/tiny_left_pad_additive`` A_P); twice that, rounded up to a power of two.  In 16-bit
#: dtypes those errors are far below the storage rounding (factor 1).
F32_FACTOR = 4.0
#: Gross error: a relative RMS error above K_GROSS x the *widest* legitimate arithmetic's reference error
#: (w K_GROSS rho_widest) fails in every dtype, judgeable or not -- no legitimate kernel lands there.  Measured
#: (``docs/tolerances.md``, "Gross errors"): the bundled torch backend lands 10.5 x rho_widest on
#: ``model/tiny_left_pad_finfo_min`` layer 1 G_LM in bfloat16 (A_LM^P amplifies its roundings); the next power of two.
K_GROSS = 16.0
#: An output is not judgeable when its relative-RMS allowance exceeds this fraction (of ||golden||) ...
MAX_ALLOWANCE_FRACTION = 0.1
#: ... or its max-test allowance exceeds this fraction of max|golden| (the max test bounds outliers only).
MAX_ABS_FRACTION = 0.5

#: Name of each rule, as written in reports.
RULE_FLOAT64 = "float64: case tolerance"
RULE_ENSEMBLE = "multiple of the calibration ensemble's error: max, rms, offset, gain"
RULE_EXACT = "exact match"
RULE_NOT_APPLICABLE = "not applicable"
RULE_NOT_JUDGEABLE = "not judgeable"

#: The arithmetic the verdicts in progress are judged against (a key of
#: :data:`pldr_ref.harness.policy.ensemble.ARITHMETIC_KEYS`), set by :func:`judged_as` for one backend's validation.
_ARITHMETIC: contextvars.ContextVar[str] = contextvars.ContextVar("judged_arithmetic", default="float32-accumulate")


@contextlib.contextmanager
def judged_as(declared: Iterable[str]) -> Iterator[str]:
    """Judge every allowance computed inside the block against the arithmetic a backend declares (its
    ``Capabilities.arithmetic``); yields the key (:func:`pldr_ref.harness.policy.ensemble.arithmetic_key`)."""
    from pldr_ref.harness.policy.ensemble import arithmetic_key

    key = arithmetic_key(declared)
    token = _ARITHMETIC.set(key)
    try:
        yield key
    finally:
        _ARITHMETIC.reset(token)


def judged_arithmetic() -> str:
    """The arithmetic key allowances are computed against now (default ``float32-accumulate``)."""
    return _ARITHMETIC.get()


@dataclasses.dataclass(frozen=True)
class Allowance:
    """The allowance for one output.

    Max test |a - e| <= atol + rtol |e| (elementwise); when ``rms`` is set, also relative RMS error
    <= rms, |offset| <= ``offset`` and |gain| <= ``gain`` (see module docstring).  ``judged`` False:
    not judged, with ``reason``; ``judgeable`` False additionally means a multi-stage output (not covered, not
    not-applicable).  ``gross``: the relative RMS error beyond which the output fails even when not judged.
    ``detail`` holds the inputs of the rule for the report (arithmetic, reference errors, the groups that set
    them, multiples).
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
    gross: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"atol": self.atol, "rtol": self.rtol, "rule": self.rule, "detail": dict(self.detail),
                "judged": self.judged, "reason": self.reason, "rms": self.rms, "offset": self.offset,
                "gain": self.gain, "judgeable": self.judgeable, "gross": self.gross}


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
    raise ValueError(f"no ensemble rule for dtype {dtype!r} (float64 uses the case tolerance)")


def whole_tensor_factor(dtype: str) -> float:
    """Multiplier of every multiple: :data:`F32_FACTOR` for float32 (a float32 kernel's transcendental functions,
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


def _select(stats: ArithmeticStats | ErrorStats | float | None, key: str) -> tuple[Any, Any]:
    """(the statistic of arithmetic ``key``, that of the widest arithmetic) of ``stats`` (a bare
    :class:`ErrorStats` or float stands for every arithmetic)."""
    if isinstance(stats, ArithmeticStats):
        return stats.of(key), stats.widest
    if stats is not None and not isinstance(stats, ErrorStats):
        stats = ErrorStats(float(stats))
    return stats, stats


def ensemble_allowance(dtype: str, golden: np.ndarray, stats: ArithmeticStats | ErrorStats | float | None, n: int,
                       *, source: str, single_stage: bool = False) -> Allowance:
    """The four-test allowance, a multiple of the ensemble's reference errors under the arithmetic being judged
    (:func:`judged_arithmetic`; a bare float: the max error only), and the gross-error bound from the widest.

    Not judged if the statistic is non-finite or an allowance exceeds the not-judgeable fractions of the output's
    scale (``not_applicable`` for single-stage kinds, ``not_judgeable`` otherwise).
    """
    key = judged_arithmetic()
    st, wide = _select(stats, key)
    scale = _scale(golden)
    label = RULE_NOT_APPLICABLE if single_stage else RULE_NOT_JUDGEABLE
    u = unit_roundoff(dtype)
    w = whole_tensor_factor(dtype)
    gross = None if wide is None or wide.max_abs is None else w * K_GROSS * max(wide.rms_rel, u)
    if st is None or st.max_abs is None:
        return Allowance(None, 0.0, label, {"statistic": None, "source": source, "arithmetic": key}, judged=False,
                         judgeable=single_stage, gross=gross,
                         reason=f"the {key} members' {dtype} runs of the reference are non-finite on this output "
                                f"({dtype} cannot carry the case)")
    k = w * k_factor(dtype, n)
    floor = FLOOR_UNITS * u * scale
    atol = k * float(st.max_abs) + floor
    rho = max(st.rms_rel, u)
    noise = rho / math.sqrt(max(st.n, 1))
    groups = st.groups or ("all",) * 4
    detail = {"arithmetic": key, "dtype": dtype, "source": source, "n": n, "elements": st.n, "scale": scale,
              "k": k, "floor": floor, "max_statistic": float(st.max_abs), "rho": rho, "rms_statistic": st.rms_rel,
              "k_rms": w * K_RMS[key], "offset_statistic": st.offset, "gain_statistic": st.gain, "k_bias": w * K_BIAS,
              "offset_reference": abs(st.offset) + noise + BIAS_FLOOR * rho / K_BIAS,
              "gain_reference": abs(st.gain) + noise + BIAS_FLOOR * rho / K_BIAS,
              "groups": {"max": groups[0], "rms": groups[1], "offset": groups[2], "gain": groups[3]},
              "widest_rho": None if gross is None else gross / (w * K_GROSS), "k_gross": w * K_GROSS}
    rms = w * K_RMS[key] * rho
    offset = w * K_BIAS * detail["offset_reference"]
    gain = w * K_BIAS * detail["gain_reference"]
    if scale > 0 and (rms > MAX_ALLOWANCE_FRACTION or atol > MAX_ABS_FRACTION * scale):
        return Allowance(atol, 0.0, label, detail, judged=False, judgeable=single_stage, rms=rms, offset=offset,
                         gain=gain, gross=gross,
                         reason=f"allowance (relative RMS {rms:.1%}, max {atol / scale:.1%} of the scale) exceeds "
                                f"{MAX_ALLOWANCE_FRACTION:.0%} RMS / {MAX_ABS_FRACTION:.0%} max ({key} reference "
                                f"error in {dtype}: RMS {st.rms_rel:.1%}, max {st.max_abs / scale:.1%}): {dtype} "
                                "cannot resolve this output" + ("" if single_stage else " end to end"))
    return Allowance(atol, 0.0, RULE_ENSEMBLE, detail, rms=rms, offset=offset, gain=gain, gross=gross)


def output_allowance(case: Any, name: str, dtype: str, golden: np.ndarray,
                     stats: ArithmeticStats | ErrorStats | float | str | None, *, source: str = "calibration ensemble"
                     ) -> Allowance:
    """The allowance for output ``name`` of ``case`` computed in ``dtype``.

    ``stats``: the ensemble's statistics (or a max error as a float), None when non-finite, or a string saying why
    there are none (then the output is not judgeable, with that reason).
    """
    numpy_dtype(dtype)
    g = np.asarray(golden)
    if g.dtype.kind in "biu":
        return Allowance(0.0, 0.0, RULE_EXACT, {})
    if dtype == "float64":
        return float64_allowance(case, name)
    single = getattr(case, "kind", None) in SINGLE_STAGE_KINDS
    if isinstance(stats, str):
        return Allowance(None, 0.0, RULE_NOT_APPLICABLE if single else RULE_NOT_JUDGEABLE, {"source": source},
                         judged=False, judgeable=single,
                         reason=f"no {dtype} calibration ensemble for {name!r} ({stats})")
    return ensemble_allowance(dtype, golden, stats, inner_dimension(case), source=source, single_stage=single)


# ---------------------------------------------------------------------------------------------------------------
# the verdict's sentences and margins

def _multiple(x: float, ref: float) -> str:
    return f"{x / ref:.3g}" if ref > 0 else "inf"


def failed_tests(cmp: TensorComparison, allowance: Allowance) -> list[str]:
    """One sentence per test ``cmp`` fails under ``allowance`` (empty: pass): the error as a multiple of the
    reference error of the judged arithmetic in that dtype, the multiple allowed, and the choice group that set the
    reference (``docs/tolerances.md``)."""
    if cmp.error is not None:
        return [cmp.error]
    d = allowance.detail
    if allowance.rule != RULE_ENSEMBLE and not d.get("arithmetic"):  # exact, float64: the plain bounds
        out = []
        if cmp.mismatches:
            out.append(f"max test: {cmp.mismatches}/{cmp.size} elements outside atol {cmp.atol:.3g}"
                       + (f" + rtol {cmp.rtol:.3g}|golden|" if cmp.rtol else "")
                       + (f" ({cmp.class_mismatches} NaN/inf class mismatches)" if cmp.class_mismatches else ""))
        return out
    where = f"{d['arithmetic']} arithmetic in {d['dtype']}"
    groups = d["groups"]
    out = []
    if cmp.class_mismatches:
        out.append(f"{cmp.class_mismatches} NaN/inf class mismatches (never within any allowance)")
    elif cmp.mismatches:
        out.append(f"max error {cmp.max_abs:.3g} ({cmp.mismatches}/{cmp.size} elements outside {cmp.atol:.3g}) is "
                   f"{_multiple(cmp.max_abs - d['floor'], d['max_statistic'])} x the reference max error of {where} "
                   f"({d['max_statistic']:.2g}, set by group {groups['max']}); allowed: {d['k']:.3g} x + a floor of "
                   f"{d['floor']:.2g}")
    for test, got, allowed, ref in (
            ("relative RMS error", cmp.rms_rel, allowance.rms, d["rho"]),
            ("offset", cmp.offset, allowance.offset, d["offset_reference"]),
            ("gain", cmp.gain, allowance.gain, d["gain_reference"])):
        if allowed is not None and not abs(got) <= allowed:  # NaN fails
            key = {"relative RMS error": "rms"}.get(test, test)
            mult = d["k_rms"] if key == "rms" else d["k_bias"]
            out.append(f"{test} {got:.3g} is {_multiple(abs(got), ref)} x the reference {test.split()[-1]} of "
                       f"{where} ({ref:.2g}, set by group {groups[key]}); allowed: {mult:.3g} x")
    return out


def gross_error(cmp: TensorComparison, allowance: Allowance) -> str | None:
    """The sentence of a gross error -- a relative RMS error beyond :data:`K_GROSS` x the widest legitimate
    arithmetic's reference error, which fails whether or not the output is judgeable -- else None."""
    if allowance.gross is None or cmp.error is not None or abs(cmp.rms_rel) <= allowance.gross:
        return None
    d = allowance.detail
    rho = d.get("widest_rho") or allowance.gross / (whole_tensor_factor(cmp.dtype) * K_GROSS)
    from pldr_ref.harness.policy.ensemble import WIDEST

    return (f"gross error: relative RMS error {cmp.rms_rel:.3g} is {_multiple(abs(cmp.rms_rel), rho)} x the reference "
            f"error of the widest legitimate arithmetic ({WIDEST}) in {cmp.dtype} ({rho:.2g}); allowed even where "
            f"{cmp.dtype} cannot resolve the output: {allowance.gross / rho:.3g} x")


def output_margins(cmp: TensorComparison | None, allowance: Allowance | None) -> dict[str, float] | None:
    """observed / allowed of each test that applies (``max``, ``rms``, ``offset``, ``gain``, and ``gross`` for the
    gross-error bound), plus ``rms_multiple`` (relative RMS error / reference error) and ``allowed_multiple``;
    a margin below 1 passes that test.  None when nothing was compared."""
    if cmp is None or allowance is None or cmp.error is not None:
        return None
    out: dict[str, float] = {}
    if allowance.atol is not None:
        bound = allowance.atol + allowance.rtol * cmp.ref_max_abs
        out["max"] = cmp.max_abs / bound if bound > 0 else (0.0 if cmp.max_abs == 0 else math.inf)
    for test, got, allowed in (("rms", cmp.rms_rel, allowance.rms), ("offset", cmp.offset, allowance.offset),
                               ("gain", cmp.gain, allowance.gain), ("gross", cmp.rms_rel, allowance.gross)):
        if allowed:
            out[test] = abs(got) / allowed
    rho = allowance.detail.get("rho")
    if rho:
        out["rms_multiple"] = abs(cmp.rms_rel) / rho
        out["allowed_multiple"] = allowance.detail["k_rms"]
    return out


#: Largest finite float32 magnitude: the widest format of any mixed-precision backend below float64.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _first_beyond(tensors: Mapping[str, Any], top: float) -> str | None:
    """The name of the first float tensor holding a finite value of magnitude above ``top``, else None."""
    for name, v in tensors.items():
        a = np.asarray(v)
        if a.dtype.kind == "f" and np.any(np.isfinite(a) & (np.abs(a) > top)):
            return name
    return None


def beyond_float32(case: Any) -> str | None:
    """The name of a float input or golden output of ``case`` holding a finite value beyond the float32 range
    (e.g. a finfo(float64).min mask, sigmoid inputs of 1e150), else None."""
    for label, tensors in (("input", case.inputs), ("output", case.outputs)):
        name = _first_beyond(tensors, FLOAT32_MAX)
        if name is not None:
            return f"{label} {name!r}"
    return None


def inputs_beyond(case: Any, dtype: str) -> str | None:
    """The name of a float input of ``case`` holding a finite value beyond the largest finite value of ``dtype``
    (e.g. the 1e6 rows of ``op/layer_norm_large_offset`` in float16, whose largest is 65504), else None: a
    backend storing in ``dtype`` is handed inf there, so its NaN is legitimate and no allowance applies."""
    top = float(np.finfo(np.float16).max) if dtype == "float16" else FLOAT32_MAX
    name = _first_beyond(case.inputs, top)
    return None if name is None else f"input {name!r}"


#: Stored in place of statistics for an output the ensemble's runs do not produce.
ABSENT = "absent"


def case_statistics(case: Any, dtype: str, keep: Mapping[str, np.ndarray] | None = None
                    ) -> tuple[dict[str, ArithmeticStats] | None, str]:
    """(the calibration ensemble's statistics by output, source) of ``case`` in ``dtype``; (None, "none") for
    float64 or a case the members cannot run.  Outputs the members do not produce are absent (not judgeable).
    ``keep``: boolean masks by output name (:mod:`pldr_ref.harness.verdict.representable`): those outputs' statistics
    are taken over the kept elements only."""
    if dtype == "float64":
        return None, "none"
    wide = beyond_float32(case)
    if wide:
        return {}, f"{wide} holds finite values beyond the float32 range: no backend below float64 can carry it"
    wide = inputs_beyond(case, dtype)
    if wide:
        return {}, f"{wide} holds finite values beyond the {dtype} range: a {dtype} backend is handed inf there"
    from pldr_ref.fixtures.runners import RUNNERS
    from pldr_ref.harness.policy.ensemble import arithmetic_stats, case_runs, stored_stats

    if case.kind not in RUNNERS or (case.kind not in SINGLE_STAGE_KINDS and case.params is None):
        return None, "none"
    source = ("calibration ensemble (one stage)" if case.kind in SINGLE_STAGE_KINDS
              else "calibration ensemble (whole case)")
    keep = keep or {}
    out = {}
    for name, g in case.outputs.items():

        def compute(name: str = name, g: np.ndarray = g) -> ArithmeticStats | str | None:
            runs = [run for _, run in case_runs(case, dtype)]
            if any(run is None or name not in run for run in runs):
                return ABSENT
            sel = keep.get(name)
            per = [error_stats(np.asarray(g)[sel], np.asarray(run[name])[sel])
                   if sel is not None and np.shape(run[name]) == np.shape(g) else error_stats(g, run[name])
                   for run in runs]
            return arithmetic_stats(per, dtype)

        st = stored_stats(case, dtype, name, compute)
        if st != ABSENT:
            out[name] = st
    return out, source
