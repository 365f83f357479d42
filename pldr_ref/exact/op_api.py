"""Op-level exact functions on NumPy inputs returning correctly rounded float64 arrays.

``exact_op(name, **inputs)`` mirrors the float64 op of the same name in
:data:`pldr_ref.registry.OP_FUNCTIONS` (same argument names and shapes), evaluates it in the
exact tier at ``dps`` digits, checks it against ``2 * dps`` (``guard``) and rounds each value
once to binary64.  Overflow of the exact value rounds to +-inf, as IEEE 754 prescribes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np

from pldr_ref.constants import EPS_ADJ, EPS_LN, FINFO_MIN_F64, MASK_VALUE, ROPE_BASE
from pldr_ref.exact import ops, plga
from pldr_ref.exact.guard import guarded
from pldr_ref.exact.layer import head_scores
from pldr_ref.exact.numbers import mpf_exact, to_float64, to_mp
from pldr_ref.exact.params import exact_tree
from pldr_ref.exact.rope import RopeTables, rotate


def _blocks(arr: Any, core: int) -> tuple[list, tuple[int, ...]]:
    """Split ``arr`` into exact blocks over its last ``core`` axes: (list of blocks, leading shape)."""
    a = np.asarray(arr, dtype=np.float64)
    if a.ndim < core:
        raise ValueError(f"input of shape {a.shape} needs at least {core} axes")
    lead = a.shape[: a.ndim - core]
    return to_mp(a.reshape(-1, *a.shape[a.ndim - core:])), lead


def _elementwise(fn: Callable[[Any], Any]) -> Callable[..., np.ndarray]:
    def run(z: Any) -> tuple[list, tuple[int, ...]]:
        blocks, lead = _blocks(z, 0)
        return [fn(v) for v in blocks], lead
    return run


def _rows(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Lift a row function ``fn(row, *args)`` to any leading shape of its first argument."""
    def run(x: Any, *args: Any) -> tuple[list, tuple[int, ...]]:
        blocks, lead = _blocks(x, 1)
        return [fn(r, *args) for r in blocks], lead
    return run


def _per_head(fn: Callable[..., Any], x: Any, *per_head: Any) -> tuple[list, tuple[int, ...]]:
    """Apply ``fn(matrix, *params[h])`` to x [B, H, (S,) d, d] with per-head params [H, d, d]."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim not in (4, 5):
        raise ValueError(f"expected [B, H, d, d] or [B, H, S, d, d], got shape {a.shape}")
    h = a.shape[1]
    heads = [to_mp(np.asarray(p, dtype=np.float64)) for p in per_head]
    for p in heads:
        if len(p) != h:
            raise ValueError(f"per-head parameter has {len(p)} heads, input has {h}")
    mats = to_mp(a.reshape(a.shape[0], h, -1, *a.shape[-2:]))
    out = [fn(m, *(p[i] for p in heads)) for bb in mats for i, mb in enumerate(bb) for m in mb]
    return out, a.shape[:-2]


def _layer_norm(x: Any, gamma: Any, beta: Any, eps: float = EPS_LN) -> tuple[list, tuple[int, ...]]:
    g, b, e = to_mp(gamma), to_mp(beta), mpf_exact(eps)
    return _rows(lambda r: ops.layer_norm(r, g, b, e))(x)


def _linear(x: Any, weight: Any, bias: Any = None) -> tuple[list, tuple[int, ...]]:
    w, b = to_mp(weight), None if bias is None else to_mp(bias)
    return _rows(lambda r: ops.affine(r, w, b))(x)


def _glu(x: Any, p: Any) -> tuple[list, tuple[int, ...]]:
    e = exact_tree(p)
    return _rows(lambda r: ops.glu(r, *plga.glu_params(e)))(x)


def _apply_rope(x: Any, positions: Any, *, layout: str = "interleaved", precision: str = "exact",
                base: float = ROPE_BASE) -> tuple[list, tuple[int, ...]]:
    pos = np.asarray(positions)
    blocks, lead = _blocks(x, 2)
    if pos.ndim != 1 or (blocks and len(blocks[0]) != pos.shape[0]):
        raise ValueError(f"positions must be 1-D of length S, got shape {pos.shape}")
    tables = RopeTables(len(blocks[0][0]) if blocks else 2, base, precision)
    out = [[rotate(r, *tables(int(p)), layout, precision) for r, p in zip(blk, pos, strict=True)] for blk in blocks]
    return out, lead


def _matrix_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(x: Any, *args: Any) -> tuple[list, tuple[int, ...]]:
        blocks, lead = _blocks(x, 2)
        return [fn(m, *args) for m in blocks], lead
    return run


def _row_params(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Metric-learner ops act row by row on the last axis; params converted once."""
    def run(a: Any, p: Any, eps: float = EPS_LN) -> tuple[list, tuple[int, ...]]:
        ep, e = exact_tree(p), mpf_exact(eps)
        blocks, lead = _blocks(a, 2)
        return [fn(m, ep, e) for m in blocks], lead
    return run


def _metric_tensor(a: Any, W: Any, b: Any, eps_adj: float = EPS_ADJ) -> tuple[list, tuple[int, ...]]:
    e = mpf_exact(eps_adj)
    return _per_head(lambda m, w, bb: plga.metric_tensor(m, w, bb, e), a, W, b)


def _potential_tensor(a_lm: Any, P: Any) -> tuple[list, tuple[int, ...]]:
    return _per_head(plga.potential_tensor, a_lm, P)


def _energy_curvature(a_p: Any, a: Any, b_a: Any) -> tuple[list, tuple[int, ...]]:
    return _per_head(plga.energy_curvature, a_p, a, b_a)


def _attention_scores(q_rot: Any, g_lm: Any, k_rot: Any) -> tuple[list, tuple[int, ...]]:
    q = np.asarray(q_rot, dtype=np.float64)
    k = np.asarray(k_rot, dtype=np.float64)
    g = np.asarray(g_lm, dtype=np.float64)
    if q.ndim != 4 or k.ndim != 4 or g.ndim not in (4, 5):
        raise ValueError(f"attention_scores needs q [B,H,S,d], k [B,H,T,d], G [B|1,H,(S,)d,d]; got {q.shape}, "
                         f"{k.shape}, {g.shape}")
    cumulative = g.ndim == 5
    g = np.broadcast_to(g, (q.shape[0], *g.shape[1:]))
    inv = 1 / mpmath.sqrt(q.shape[-1])
    qm, km, gm = to_mp(q), to_mp(k), to_mp(g)
    out = [head_scores(qh, gh, kh, inv, cumulative) for qb, gb, kb in zip(qm, gm, km, strict=True)
           for qh, gh, kh in zip(qb, gb, kb, strict=True)]
    return out, q.shape[:2]


def _apply_mask(scores: Any, mask: Any, mode: str, mask_value: float = MASK_VALUE) -> tuple[list, tuple[int, ...]]:
    s = np.asarray(scores, dtype=np.float64)
    if mask is None:
        return to_mp(s.reshape(-1)), s.shape
    m = np.broadcast_to(np.asarray(mask, dtype=bool), s.shape).reshape(-1).tolist()
    mv, fm = mpf_exact(mask_value), mpf_exact(FINFO_MIN_F64)
    vals = to_mp(s.reshape(-1))
    return [ops.masked_logit(v, mm, mode, mv, fm) for v, mm in zip(vals, m, strict=True)], s.shape


def _mix_values(e: Any, v: Any) -> tuple[list, tuple[int, ...]]:
    ea, va = np.asarray(e, dtype=np.float64), np.asarray(v, dtype=np.float64)
    if ea.shape[:-2] != va.shape[:-2] or ea.shape[-1] != va.shape[-2]:
        raise ValueError(f"mix_values shapes {ea.shape} and {va.shape} do not match")
    eb, lead = _blocks(ea, 2)
    vb, _ = _blocks(va, 2)
    return [ops.matmul(x, y) for x, y in zip(eb, vb, strict=True)], lead


OPS: dict[str, Callable[..., tuple[list, tuple[int, ...]]]] = {
    "sigmoid": _elementwise(ops.sigmoid),
    "silu": _elementwise(ops.silu),
    "iswiglu": _elementwise(ops.iswiglu),
    "layer_norm": _layer_norm,
    "linear": _linear,
    "glu": _glu,
    "apply_rope": _apply_rope,
    "density_operator": _matrix_op(plga.density_operator),
    "cumulative_density_operator": _matrix_op(plga.cumulative_density_operator),
    "residual_unit": _row_params(plga.residual_unit),
    "metric_learner_v500": _row_params(plga.metric_learner_v500),
    "metric_learner_v900": _row_params(plga.metric_learner_v900),
    "metric_tensor": _metric_tensor,
    "potential_tensor": _potential_tensor,
    "energy_curvature": _energy_curvature,
    "attention_scores": _attention_scores,
    "apply_mask": _apply_mask,
    "masked_softmax": _rows(ops.softmax_row),
    "mix_values": _mix_values,
}


def exact_op(name: str, *args: Any, dps: int = 50, guard: bool = True, **inputs: Any) -> np.ndarray:
    """The float64-rounded exact value of op ``name`` (a key of :data:`OPS`) on float64 inputs.

    Arguments are those of the float64 op of the same name (positional or keyword).
    With ``guard`` the result must agree at ``dps`` and ``2 * dps`` or
    :class:`~pldr_ref.exact.guard.PrecisionError` is raised.
    """
    if name not in OPS:
        raise ValueError(f"unknown exact op {name!r}; available: {sorted(OPS)}")
    fn = OPS[name]

    def compute(d: int) -> dict[str, np.ndarray]:
        with mpmath.workdps(d):
            blocks, lead = fn(*args, **inputs)
        out = to_float64(blocks)
        return {name: out.reshape(tuple(lead) + out.shape[1:])}

    result = guarded(compute, dps) if guard else compute(dps)
    return result[name]
