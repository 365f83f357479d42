"""Op-level certified values through the arb engine, on float64 inputs (names of ``pldr_ref.exact.exact_op``).

``arb_op(name, *args, **kwargs)`` takes the arguments of the float64 op of the same name
(:data:`pldr_ref.registry.OP_FUNCTIONS`), evaluates it in ball arithmetic under Ziv's strategy and
returns the float64 array of certified correctly rounded values (``UncertifiedError`` if some value
stays undecided at ``max_prec``); :func:`arb_op_certified` returns the :class:`Certified` record.
Entries that are not real numbers of the op (-inf of an ``ideal`` mask, the zero weight of a -inf
logit) are exact by definition and set after rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pldr_ref.constants import EPS_ADJ, EPS_LN, FINFO_MIN_F64, MASK_VALUE, ROPE_BASE
from pldr_ref.exact.arb import stages as st
from pldr_ref.exact.arb.balls import balls
from pldr_ref.exact.arb.model import UncertifiedError
from pldr_ref.exact.arb.ziv import DEFAULT_MAX_PREC, DEFAULT_PREC, Certified, Stages, certify
from pldr_ref.params import GLUParams
from pldr_ref.switches import switch

#: An op returns (balls, nonneg, special): ``special`` is None or a float64 array, NaN where the ball
#: value is used and the exact value elsewhere (e.g. -inf of a masked logit).
OpResult = tuple[np.ndarray, bool, np.ndarray | None]


def _f64(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _elementwise(fn: Callable[[np.ndarray], np.ndarray], nonneg: bool) -> Callable[..., OpResult]:
    def run(z: Any, rn32: st.Float32Rounder) -> OpResult:
        return fn(balls(z)), nonneg, None
    return run


def _layer_norm(x: Any, gamma: Any, beta: Any, eps: float = EPS_LN, *, rn32: st.Float32Rounder) -> OpResult:
    return st.layer_norm(balls(x), _f64(gamma), _f64(beta), float(eps)), False, None


def _linear(x: Any, weight: Any, bias: Any = None, *, rn32: st.Float32Rounder) -> OpResult:
    return st.linear(balls(x), _f64(weight), None if bias is None else _f64(bias)), False, None


def _glu(x: Any, p: GLUParams, *, rn32: st.Float32Rounder) -> OpResult:
    return st.glu(balls(x), p), False, None


def _apply_rope(x: Any, positions: Any, *, layout: str = "interleaved", precision: str = "exact",
                base: float = ROPE_BASE, rn32: st.Float32Rounder) -> OpResult:
    xb = balls(x)
    pos = np.asarray(positions)
    if pos.ndim != 1 or pos.shape[0] != xb.shape[-2]:
        raise ValueError(f"positions must be 1-D of length S={xb.shape[-2]}, got shape {pos.shape}")
    cos, sin = st.rope_tables([int(p) for p in pos], xb.shape[-1], float(base), precision, rn32)
    return st.apply_rope(xb, cos, sin, layout, precision, rn32), False, None


def _density(q_rot: Any, *, rn32: st.Float32Rounder) -> OpResult:
    return st.density_operator(balls(q_rot)), False, None


def _cumulative(q_rot: Any, *, rn32: st.Float32Rounder) -> OpResult:
    return st.cumulative_density_operator(balls(q_rot)), False, None


def _residual_unit(a: Any, unit: Any, eps: float = EPS_LN, *, rn32: st.Float32Rounder) -> OpResult:
    return st.residual_unit(balls(a), unit, float(eps)), False, None


def _metric_learner(kind: str) -> Callable[..., OpResult]:
    def run(a0: Any, lp: Any, eps: float = EPS_LN, *, rn32: st.Float32Rounder) -> OpResult:
        return st.metric_learner(balls(a0), lp, kind, float(eps)), False, None
    return run


def _metric_tensor(a: Any, W: Any, b: Any, eps_adj: float = EPS_ADJ, *, rn32: st.Float32Rounder) -> OpResult:
    return st.metric_tensor(balls(a), _f64(W), _f64(b), float(eps_adj)), True, None


def _potential_tensor(a_lm: Any, P: Any, *, rn32: st.Float32Rounder) -> OpResult:
    a = _f64(a_lm)
    if not np.all(a > 0):
        raise ValueError("potential_tensor needs A_LM > 0 for the real power A_LM^P")
    return st.potential_tensor(balls(a), _f64(P)), True, None


def _energy_curvature(a_p: Any, a: Any, b_a: Any, *, rn32: st.Float32Rounder) -> OpResult:
    return st.energy_curvature(balls(a_p), _f64(a), _f64(b_a)), False, None


def _attention_scores(q_rot: Any, g_lm: Any, k_rot: Any, *, rn32: st.Float32Rounder) -> OpResult:
    q, g, k = _f64(q_rot), _f64(g_lm), _f64(k_rot)
    if q.ndim != 4 or k.ndim != 4 or g.ndim not in (4, 5):
        raise ValueError(f"attention_scores needs q [B,H,S,d], k [B,H,T,d], G [B|1,H,(S,)d,d]; got {q.shape}, "
                         f"{k.shape}, {g.shape}")
    g = np.broadcast_to(g, (q.shape[0], *g.shape[1:]))
    return st.attention_scores(balls(q), balls(g), balls(k)), False, None


def _apply_mask(scores: Any, mask: Any, mode: str, mask_value: float = MASK_VALUE, *,
                rn32: st.Float32Rounder) -> OpResult:
    s = _f64(scores)
    switch("mask_mode").check(mode, allowed=switch("mask_mode").implemented_by("arb"))
    sb = balls(s)
    if mask is None:
        return sb, False, None
    m = np.broadcast_to(np.asarray(mask, dtype=bool), s.shape)
    if mode == "ideal":
        return sb, False, np.where(m, -np.inf, np.nan)
    shift = st.ball(float(mask_value) if mode == "additive" else FINFO_MIN_F64)
    return np.where(m, sb + shift, sb), False, None


def _masked_softmax(logits: Any, *, rn32: st.Float32Rounder) -> OpResult:
    x = _f64(logits)
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError("masked_softmax in the arb engine takes finite or -inf logits")
    allowed = np.isfinite(x)
    return st.softmax_rows(balls(np.where(allowed, x, 0.0)), allowed), True, None


def _mix_values(e: Any, v: Any, *, rn32: st.Float32Rounder) -> OpResult:
    ea, va = _f64(e), _f64(v)
    if ea.shape[:-2] != va.shape[:-2] or ea.shape[-1] != va.shape[-2]:
        raise ValueError(f"mix_values shapes {ea.shape} and {va.shape} do not match")
    return st.mix_values(balls(ea), balls(va)), False, None


#: Op name -> ball implementation (each takes the float64 op's arguments plus ``rn32``).
ARB_OPS: dict[str, Callable[..., OpResult]] = {
    "sigmoid": _elementwise(st.sigmoid, True),
    "silu": _elementwise(st.silu, False),
    "iswiglu": _elementwise(st.iswiglu, True),
    "layer_norm": _layer_norm,
    "linear": _linear,
    "glu": _glu,
    "apply_rope": _apply_rope,
    "density_operator": _density,
    "cumulative_density_operator": _cumulative,
    "residual_unit": _residual_unit,
    "metric_learner_v500": _metric_learner("v500"),
    "metric_learner_v900": _metric_learner("v900"),
    "metric_tensor": _metric_tensor,
    "potential_tensor": _potential_tensor,
    "energy_curvature": _energy_curvature,
    "attention_scores": _attention_scores,
    "apply_mask": _apply_mask,
    "masked_softmax": _masked_softmax,
    "mix_values": _mix_values,
}


def arb_op_certified(name: str, *args: Any, prec: int = DEFAULT_PREC, max_prec: int = DEFAULT_MAX_PREC,
                     **kwargs: Any) -> Certified:
    """Op ``name`` in ball arithmetic under Ziv's strategy; the stage is called ``out``."""
    if name not in ARB_OPS:
        raise ValueError(f"unknown arb op {name!r}; available: {sorted(ARB_OPS)}")
    fn = ARB_OPS[name]
    special: list[np.ndarray | None] = [None]

    def compute(_prec: int, final: bool) -> Stages:
        rn32 = st.Float32Rounder(final)
        out, nonneg, special[0] = fn(*args, rn32=rn32, **kwargs)
        yield "out", out, nonneg, rn32.undecided > 0

    res = certify(compute, prec=prec, max_prec=max(max_prec, prec), total_stages=1)
    fill = special[0]
    if fill is not None:
        exact = ~np.isnan(fill)
        res.values["out"] = np.where(exact, fill, res.values["out"])
        res.certified["out"] = res.certified["out"] | exact
    return res


def arb_op(name: str, *args: Any, prec: int = DEFAULT_PREC, max_prec: int = DEFAULT_MAX_PREC,
           **kwargs: Any) -> np.ndarray:
    """Certified correctly rounded float64 value of op ``name``; :class:`UncertifiedError` if undecided."""
    res = arb_op_certified(name, *args, prec=prec, max_prec=max_prec, **kwargs)
    if not res.all_certified:
        raise UncertifiedError(res)
    return res.values["out"]
