"""The pass/fail policy: how far a backend output may be from the golden value (``docs/tolerances.md``).

Every allowance is elementwise, |backend - golden| <= atol + rtol |golden|, and every number in it
comes with its reason:

* **float64** -- the case's own tolerance from ``case.json`` (per output): 1000 x the largest change
  of the float64 reference under 1-ulp relative perturbations of every input and parameter, rounded
  up to a power of ten, floored at 16 unit roundoffs; for exact-tier cases it also covers the float64
  tier's distance to the correctly rounded value (``docs/accuracy.md``).  A float64 backend differs
  from the reference only by rounding (different summation order, different libm), which is what
  that perturbation measures.
* **float32, bfloat16, float16** -- the FlashAttention rule with a stored baseline:
  atol = k x baseline + floor, rtol = 0, where baseline is the max abs error of a naive run of
  the reference in that dtype (``case.baselines``; computed here for op cases and isolated
  stages) and floor = :data:`FLOOR_UNITS` unit roundoffs of the dtype times max|golden|.
  k = :data:`K_HALF` for bfloat16 / float16 and k = :data:`K_SQRT` x sqrt(n) (at least
  :data:`K_MIN`) for float32.  Reasons (numbers in ``docs/tolerances.md``): the naive run rounds once
  per stage, a real kernel after every op inside it (16-bit kernels accumulate in float32, so only
  those roundings count; float32 kernels also accumulate length-n dot products in float32, error
  ~ sqrt(n) u, Higham & Mary 2019); end to end, the backend's and the naive run's errors are two
  independent realizations pushed through an amplifying chain (A_P = A_LM^P, softmax), so their
  ratio has a heavy tail; k is twice the largest ratio measured on the suite, rounded up to a
  power of two (FlashAttention's factor 2 on top of the measured spread).
* Kinds whose naive run is not defined stage by stage (``cached_generation``, ``scoring_*``) have no
  low-precision baseline: their outputs are *not judged* below float64 (reported, never passed).
* An output whose naive baseline is non-finite (the dtype over/underflows on this case) is *not
  judged* in that dtype: it is reported as ``not_applicable`` with the reason, never as a pass.
* Boolean outputs (masks) must match exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.compare import machine_epsilon, numpy_dtype

#: k for bfloat16 and float16: bound of a real kernel's error in units of the naive stage-rounded run.
K_HALF = 32.0
#: float32: k = K_SQRT * sqrt(n) with n the longest dot product of the case ...
K_SQRT = 8.0
#: ... but never below K_MIN.
K_MIN = 16.0
#: floor = FLOOR_UNITS unit roundoffs of the dtype times max|golden| (a few ulps of the output's scale).
FLOOR_UNITS = 16.0

#: Name of each rule, as written in reports.
RULE_FLOAT64 = "float64: case tolerance"
RULE_BASELINE = "k x baseline + floor"
RULE_EXACT = "exact match (boolean)"
RULE_NOT_APPLICABLE = "not applicable"


@dataclasses.dataclass(frozen=True)
class Allowance:
    """The allowance for one output: |a - e| <= atol + rtol |e| when ``judged``.

    ``detail`` holds the inputs of the rule (k, baseline, floor, n) for the report; ``reason``
    says why an output is not judged.
    """

    atol: float | None
    rtol: float
    rule: str
    detail: Mapping[str, Any]
    judged: bool = True
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"atol": self.atol, "rtol": self.rtol, "rule": self.rule, "detail": dict(self.detail),
                "judged": self.judged, "reason": self.reason}


def unit_roundoff(dtype: str) -> float:
    """u = eps / 2 of the dtype."""
    return machine_epsilon(dtype) / 2.0


def inner_dimension(case: Any) -> int:
    """n: an upper bound on the length of the dot products and sums a stage of ``case`` evaluates.

    Model cases: the largest of d_model, dff, A_dff, A_dff_depth and the sequence length; op cases:
    the largest dimension of any input tensor (at least 1).
    """
    dims = [1]
    c = getattr(case, "config", None)
    if c is not None:
        dims += [c.d_model, c.dff, c.A_dff, c.A_dff_depth, c.d_k]
    for arr in (getattr(case, "inputs", None) or {}).values():
        dims += [int(d) for d in np.shape(arr)]
    return max(dims)


def k_factor(dtype: str, n: int) -> float:
    """k of the rule for ``dtype`` and inner dimension ``n`` (see module docstring)."""
    if dtype in ("bfloat16", "float16"):
        return K_HALF
    if dtype == "float32":
        return max(K_MIN, K_SQRT * math.sqrt(n))
    raise ValueError(f"no k x baseline rule for dtype {dtype!r} (float64 uses the case tolerance)")


def float64_allowance(case: Any, name: str) -> Allowance:
    """The case's own float64 tolerance for output ``name`` (per-output entry, else the global one)."""
    tol = getattr(case, "tolerance", None) or {}
    per = (tol.get("outputs") or {}).get(name)
    src = per if per is not None else tol
    if "atol" not in src and "rtol" not in src:
        return Allowance(None, 0.0, RULE_NOT_APPLICABLE, {}, judged=False,
                         reason=f"case {case.name} gives no float64 tolerance for {name!r}")
    atol, rtol = float(src.get("atol", 0.0)), float(src.get("rtol", 0.0))
    return Allowance(atol, rtol, RULE_FLOAT64, {"atol": atol, "rtol": rtol, "tier": getattr(case, "tier", "")})


def baseline_allowance(dtype: str, golden: np.ndarray, baseline_max_abs: float | None, n: int,
                       *, source: str) -> Allowance:
    """atol = k x baseline + FLOOR_UNITS u max|golden| (rtol 0); not judged if the baseline is None (non-finite)."""
    if baseline_max_abs is None:
        return Allowance(None, 0.0, RULE_NOT_APPLICABLE, {"baseline": None, "source": source}, judged=False,
                         reason=f"the naive {dtype} run of the reference is non-finite on this output "
                                f"({dtype} cannot represent the case)")
    g = np.asarray(golden, dtype=np.float64)
    fin = np.isfinite(g)
    scale = float(np.max(np.abs(g[fin]))) if fin.any() else 0.0
    k = k_factor(dtype, n)
    floor = FLOOR_UNITS * unit_roundoff(dtype) * scale
    atol = k * float(baseline_max_abs) + floor
    return Allowance(atol, 0.0, RULE_BASELINE, {"k": k, "n": n, "baseline": float(baseline_max_abs),
                                                "floor": floor, "source": source})


def output_allowance(case: Any, name: str, dtype: str, golden: np.ndarray, baseline: float | str | None,
                     *, source: str = "case.json") -> Allowance:
    """The allowance for output ``name`` of ``case`` computed in ``dtype``.

    ``baseline``: the naive-run max abs error in ``dtype`` (float), None when non-finite, or the
    string ``"missing"`` when no baseline exists (then the output is not judged, with that reason).
    """
    numpy_dtype(dtype)
    if np.asarray(golden).dtype == np.bool_:
        return Allowance(0.0, 0.0, RULE_EXACT, {})
    if dtype == "float64":
        return float64_allowance(case, name)
    if isinstance(baseline, str):
        return Allowance(None, 0.0, RULE_NOT_APPLICABLE, {"source": source}, judged=False,
                         reason=f"no {dtype} baseline for {name!r} ({baseline})")
    return baseline_allowance(dtype, golden, baseline, inner_dimension(case), source=source)


def round_to(dtype: str, x: np.ndarray) -> np.ndarray:
    """``x`` rounded to ``dtype`` and widened back to float64 (non-float arrays pass through)."""
    a = np.asarray(x)
    if a.dtype.kind != "f":
        return a
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(numpy_dtype(dtype)).astype(np.float64)


def naive_error(golden: np.ndarray, naive: np.ndarray) -> float | None:
    """max |naive - golden| over the golden's finite entries; None if the naive value is non-finite there
    (or has a different non-finite class)."""
    g = np.asarray(golden, dtype=np.float64)
    r = np.asarray(naive, dtype=np.float64)
    fin = np.isfinite(g)
    if np.any(fin & ~np.isfinite(r)) or np.any(~fin & ~((r == g) | (np.isnan(r) & np.isnan(g)))):
        return None
    if not fin.any():
        return 0.0
    return float(np.max(np.abs(r[fin] - g[fin])))


#: Op kinds that are one stage of the forward map (their naive run is: round inputs, compute, round).
SINGLE_STAGE_KINDS = ("sigmoid", "silu", "iswiglu", "layer_norm", "linear", "glu", "apply_rope", "density_operator",
                      "cumulative_density_operator", "metric_tensor", "potential_tensor", "energy_curvature",
                      "attention_scores", "causal_padding_mask", "apply_mask", "masked_softmax", "mix_values",
                      "embedding", "lm_head", "residual_unit", "metric_learner_v500", "metric_learner_v900")


def stored_baselines(case: Any, dtype: str) -> dict[str, float | None] | None:
    """``case.baselines[dtype]`` as {output: max_abs or None (non-finite)}; None when absent."""
    table = (getattr(case, "baselines", None) or {}).get(dtype)
    if not table:
        return None
    out: dict[str, float | None] = {}
    for name, metrics in table.items():
        out[name] = None if metrics.get("max_abs") is None else float(metrics["max_abs"])
    return out


def computed_baselines(case: Any, dtype: str) -> dict[str, float | None] | None:
    """Naive-run baselines computed now, for kinds whose cases store none.  Op cases (one stage):
    inputs and parameters rounded to ``dtype``, the float64 runner, the output rounded; model and
    layer cases: :func:`pldr_ref.fixtures.baselines.baseline_outputs`.  None for other kinds (a
    single rounding of their inputs would not bound a multi-stage run)."""
    from pldr_ref.fixtures.runners import RUNNERS

    if case.kind in ("forward", "decoder_layer"):
        return _model_baselines(case, dtype)
    if case.kind not in RUNNERS or case.kind not in SINGLE_STAGE_KINDS:
        return None
    inputs = {k: round_to(dtype, v) for k, v in case.inputs.items()}
    params = _rounded_params(case.params, dtype)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        try:
            run = RUNNERS[case.kind](case.config, params, case.args, inputs)
        except (FloatingPointError, OverflowError, ValueError):
            return {name: None for name in case.outputs}
    return {name: naive_error(g, round_to(dtype, run[name])) if name in run else None
            for name, g in case.outputs.items()}


def _model_baselines(case: Any, dtype: str) -> dict[str, float | None] | None:
    if case.kind not in ("forward", "decoder_layer") or case.params is None:
        return None
    from pldr_ref.fixtures.baselines import PRECISIONS, baseline_outputs

    try:
        run = baseline_outputs(case.kind, case.params, case.args, case.inputs, PRECISIONS[dtype])
    except (OverflowError, ValueError):
        return None
    return {name: naive_error(g, run[name]) if name in run else None for name, g in case.outputs.items()}


def _rounded_params(params: Any, dtype: str) -> Any:
    if params is None:
        return None
    from pldr_ref.params import Params

    try:
        return Params(params.config, {k: round_to(dtype, v) for k, v in params.items()})
    except ValueError:  # a parameter overflows the dtype
        return params


def case_baselines(case: Any, dtype: str) -> tuple[dict[str, float | None] | None, str]:
    """(baselines by output, source): stored in ``case.json`` when present, else computed now."""
    if dtype == "float64":
        return None, "none"
    stored = stored_baselines(case, dtype)
    if stored is not None:
        return stored, "case.json"
    computed = computed_baselines(case, dtype)
    return computed, "computed (naive run)" if computed is not None else "none"
