"""Every stage of the PLDR-LLM forward map in ball arithmetic (spec §1-§2, §7, §12).

Inputs and outputs are ball tensors (:mod:`pldr_ref.exact.arb.balls`) with the shapes of the
float64 path (:mod:`pldr_ref.layer`); parameters arrive as float64 arrays and are converted
exactly.  Each function returns balls that provably contain the real value of its equation for
the (exact) inputs; nothing here rounds to float64, except the binary32 steps the configuration
prescribes (float32 RoPE and sqrt(d), spec §12), which :class:`Float32Rounder` performs on balls.
Every matrix product is one ``arb_mat`` product per (batch, head) block.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flint import arb

from pldr_ref import attention
from pldr_ref.exact.arb.balls import (
    GUARD_BITS,
    ONE,
    ZERO,
    accuracy_bits,
    ball,
    balls,
    batched_matmul,
    lower_precision_to,
    matmul,
    round_ball,
    round_ball_to_float32,
)
from pldr_ref.params import GLUParams, LayerParams, NormParams, ResUnitParams
from pldr_ref.switches import switch


class NeedPrecisionError(ArithmeticError):
    """The computation cannot succeed at this precision (an undecided binary32 rounding, or a projected loss of
    accuracy): raise the precision and redo.  ``suggested_prec`` (bits), when known, is the precision to try next."""

    def __init__(self, message: str, suggested_prec: int | None = None) -> None:
        super().__init__(message)
        self.suggested_prec = suggested_prec


class Float32Rounder:
    """RN32 of balls (spec §12 float32 quirks): exact float32 balls, or :class:`NeedPrecisionError` when undecided.

    With ``final`` (the last precision of the Ziv loop) an undecided ball is rounded from its
    midpoint instead and counted in ``undecided``: results downstream are then not certified.
    """

    def __init__(self, final: bool = False) -> None:
        self.final = final
        self.undecided = 0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = np.empty(x.shape, dtype=object)
        flat = out.reshape(-1)
        for i, v in enumerate(x.reshape(-1).tolist()):
            r = round_ball_to_float32(v)
            if r is None:
                if not self.final:
                    raise NeedPrecisionError("a binary32 rounding (float32 RoPE / sqrt(d)) is undecided")
                self.undecided += 1
                r = arb(float(np.float32(round_ball(v)[0])))
            flat[i] = r
        return out


# ----------------------------------------------------------------------------- activations
def exp_pos(z: np.ndarray) -> np.ndarray:
    """e^z, intersected with [0, inf) (exact: e^z > 0), elementwise."""
    return np.vectorize(lambda v: v.exp().nonnegative_part(), otypes=[object])(z) if z.size else z


def sigmoid(z: np.ndarray) -> np.ndarray:
    """sigma(z) = 1 / (1 + e^{-z}) (spec §1)."""
    return ONE / (ONE + exp_pos(-z))


def silu(z: np.ndarray) -> np.ndarray:
    """silu(z) = z / (1 + e^{-z}) (spec §1)."""
    return z / (ONE + exp_pos(-z))


def iswiglu(z: np.ndarray) -> np.ndarray:
    """iSwiGLU(z) = z^2 / (1 + e^{-z}) >= 0 (paper Definition 3.1)."""
    return (z * z) / (ONE + exp_pos(-z))


def nonneg(x: np.ndarray) -> np.ndarray:
    """Intersect every ball with [0, inf): valid for quantities known to be >= 0."""
    return np.vectorize(lambda v: v.nonnegative_part(), otypes=[object])(x) if x.size else x


# ----------------------------------------------------------------------------- linear maps, LayerNorm
def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """y = x W^T + b on the last axis (torch layout [out, in]); one ``arb_mat`` product for all rows."""
    rows = x.reshape(-1, x.shape[-1])
    y = matmul(rows, np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T))
    if bias is not None:
        y = y + balls(bias)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def glu(x: np.ndarray, p: GLUParams) -> np.ndarray:
    """SwiGLU W3 (silu(W1 z + b1) * (W2 z + b2)) + b3 on the last axis (spec §2.3)."""
    gate = silu(linear(x, p.w1, p.b1)) * linear(x, p.w2, p.b2)
    return linear(gate, p.w3, p.b3)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """LN(x) = (x - mu) / sqrt(var + eps) * gamma + beta over the last axis, biased variance (spec §1)."""
    n = x.shape[-1]
    mu = x.sum(axis=-1, keepdims=True) / n
    xc = x - mu
    var = nonneg((xc * xc).sum(axis=-1, keepdims=True) / n)
    inv = ONE / np.sqrt(var + ball(eps))
    return xc * inv * balls(gamma) + balls(beta)


# ----------------------------------------------------------------------------- heads, RoPE
# split_heads / merge_heads (pure reshapes, no arithmetic, so the engines stay independent) are
# pldr_ref.attention's own, re-exported for the arb model: they act on object arrays of balls unchanged.
split_heads = attention.split_heads
merge_heads = attention.merge_heads


def rope_tables(positions: Sequence[int], d_k: int, base: float, precision: str,
                rn32: Float32Rounder) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) balls [S, d_k/2] of phi_{p,i} = p base^(-2i/d_k) (``exact``) or the binary32 table (``float32``).

    float32 (spec §12): e_i = RN32(2i/d_k), omega_i = RN32(1 / RN32(base^e_i)), phi = RN32(p omega_i),
    c = RN32(cos phi), s = RN32(sin phi), every step correctly rounded.
    """
    half = d_k // 2
    pos = np.array([arb(int(p)) for p in positions], dtype=object)[:, None]
    i2 = np.array([arb(2 * i) for i in range(half)], dtype=object)[None, :]
    log_base = ball(base).log()
    if precision == "exact":
        omega = np.vectorize(lambda v: (-v / d_k * log_base).exp(), otypes=[object])(i2)
        phi = pos * omega
        return np.vectorize(lambda v: v.cos(), otypes=[object])(phi), np.vectorize(lambda v: v.sin(),
                                                                                   otypes=[object])(phi)
    if precision != "float32":
        raise switch("rope_precision").error(precision, allowed=switch("rope_precision").implemented_by("arb"))
    e = rn32(i2 / d_k)
    pw = rn32(np.vectorize(lambda v: (v * log_base).exp(), otypes=[object])(e))
    omega = rn32(ONE / pw)
    phi = rn32(rn32(pos) * omega)
    return (rn32(np.vectorize(lambda v: v.cos(), otypes=[object])(phi)),
            rn32(np.vectorize(lambda v: v.sin(), otypes=[object])(phi)))


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, precision: str,
               rn32: Float32Rounder) -> np.ndarray:
    """y_a = x_a cos - x_b sin, y_b = x_b cos + x_a sin for the pairs of ``layout`` (x [..., S, d_k]).

    float32: x is rounded to binary32 and each product and sum is rounded to binary32 (no FMA).
    """
    d_k = x.shape[-1]
    if layout == "interleaved":
        ia, ib = np.arange(0, d_k, 2), np.arange(1, d_k, 2)
    elif layout == "half":
        ia, ib = np.arange(d_k // 2), np.arange(d_k // 2, d_k)
    else:
        raise switch("rope_layout").error(layout, allowed=switch("rope_layout").implemented_by("arb"))
    if precision == "float32":
        x = rn32(x)
        xa, xb = x[..., ia], x[..., ib]
        ya = rn32(rn32(xa * cos) - rn32(xb * sin))
        yb = rn32(rn32(xb * cos) + rn32(xa * sin))
    else:
        xa, xb = x[..., ia], x[..., ib]
        ya = xa * cos - xb * sin
        yb = xb * cos + xa * sin
    y = np.empty(x.shape, dtype=object)
    y[..., ia] = ya
    y[..., ib] = yb
    return y


# ----------------------------------------------------------------------------- density operator, metric learner
def density_operator(q_rot: np.ndarray) -> np.ndarray:
    """A0 = Q~^T Q~ per (batch, head): [B, H, S, d_k] -> [B, H, d_k, d_k] (paper eq. 3.2)."""
    return batched_matmul(np.swapaxes(q_rot, -1, -2), q_rot)


def cumulative_density_operator(q_rot: np.ndarray) -> np.ndarray:
    """A0_i = sum_{s <= i} q~_s q~_s^T: [B, H, S, d_k] -> [B, H, S, d_k, d_k] (paper eq. 4.16)."""
    s = q_rot.shape[-2]
    out = np.empty((*q_rot.shape[:-2], s, q_rot.shape[-1], q_rot.shape[-1]), dtype=object)
    for i in range(s):  # one Gram of the first i+1 rows per query row
        prefix = q_rot[..., : i + 1, :]
        out[..., i, :, :] = batched_matmul(np.swapaxes(prefix, -1, -2), prefix)
    return out


def follow_accuracy(x: np.ndarray) -> None:
    """Lower the working precision to the normwise accuracy of ``x`` plus :data:`GUARD_BITS` (never raise it)."""
    lower_precision_to(accuracy_bits(x) + GUARD_BITS)


def residual_unit(a: np.ndarray, unit: ResUnitParams, eps: float) -> np.ndarray:
    """A <- LN_r(GLU_{r,D}(... GLU_{r,1}(A) ...) + A), rows on the last axis (spec §2.4 step 6)."""
    follow_accuracy(a)
    h = a
    for g in unit.glus:
        h = glu(h, g)
    return layer_norm(h + a, unit.norm.gamma, unit.norm.beta, eps)


def _norm(x: np.ndarray, n: NormParams, eps: float) -> np.ndarray:
    return layer_norm(x, n.gamma, n.beta, eps)


def metric_learner(a0: np.ndarray, lp: LayerParams, kind: str, eps: float) -> np.ndarray:
    """v500: A = Res_R(... Res_1(LN(A0)) ...); v900: LN2(Dense(Res_R(... LN1(Dense(A0)) ...))) (spec §2.4, §2.6)."""
    if kind == "v500":
        a = _norm(a0, lp.a_norm, eps)
    elif kind == "v900":
        a = _norm(linear(a0, *lp.lift), lp.lift_norm, eps)
    else:
        raise ValueError(f"metric_learner kind {kind!r} computes no A (expected 'v500' or 'v900')")
    for unit in lp.res_units:
        a = residual_unit(a, unit, eps)
    if kind == "v900":
        a = _norm(linear(a, *lp.drop), lp.drop_norm, eps)
    return a


# ----------------------------------------------------------------------------- PLGA
def _per_head_left(w: np.ndarray, a: np.ndarray) -> np.ndarray:
    """W_h A for W [H, d, d] (float64) and A [B, H, (S,) d, d] (balls)."""
    out = np.empty(a.shape, dtype=object)
    for h in range(a.shape[1]):
        blocks = a[:, h].reshape(-1, *a.shape[-2:])
        wh = np.asarray(w[h], dtype=np.float64)
        out[:, h] = np.array([matmul(wh, m) for m in blocks], dtype=object).reshape(out[:, h].shape)
    return out


def _per_head_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + balls(b).reshape(b.shape[0], *([1] * (a.ndim - 4)), *b.shape[-2:])


def metric_tensor(a: np.ndarray, W: np.ndarray, b: np.ndarray, eps_adj: float) -> np.ndarray:
    """A_LM = iSwiGLU(W A + b) + eps_adj per head (paper eq. 3.4)."""
    return nonneg(iswiglu(_per_head_add(_per_head_left(W, a), b)) + ball(eps_adj))


def potential_tensor(a_lm: np.ndarray, P: np.ndarray) -> np.ndarray:
    """A_P = A_LM^(o P) = e^{P ln A_LM} elementwise, A_LM > 0 (paper eq. 3.5)."""
    p = balls(P).reshape(P.shape[0], *([1] * (a_lm.ndim - 4)), *P.shape[-2:])
    p = np.broadcast_to(p, a_lm.shape)
    return np.vectorize(lambda x, y: (y * x.log()).exp().nonnegative_part(), otypes=[object])(a_lm, p)


def energy_curvature(a_p: np.ndarray, a: np.ndarray, b_a: np.ndarray) -> np.ndarray:
    """G_LM = a A_P + b_a per head (paper eq. 3.6)."""
    return _per_head_add(_per_head_left(a, a_p), b_a)


# ----------------------------------------------------------------------------- attention
def attention_scores(q_rot: np.ndarray, g_lm: np.ndarray, k_rot: np.ndarray) -> np.ndarray:
    """Sc = (Q~ G) K~^T / sqrt(d_k): [B, H, S, d] x [B, H, (S,) d, d] x [B, H, T, d] -> [B, H, S, T] (eq. 3.7)."""
    inv = ONE / ball(q_rot.shape[-1]).sqrt()
    if g_lm.ndim == 5:  # one operator per query row
        qg = np.empty(q_rot.shape, dtype=object)
        for s in range(q_rot.shape[-2]):
            qg[..., s:s + 1, :] = batched_matmul(q_rot[..., s:s + 1, :], g_lm[:, :, s])
    else:
        qg = batched_matmul(q_rot, g_lm)
    return batched_matmul(qg, np.swapaxes(k_rot, -1, -2)) * inv


def masked_softmax(scores: np.ndarray, mask: np.ndarray | None, mode: str, mask_value: float,
                   finfo_min: float) -> np.ndarray:
    """E = softmax_j(Sc + mask) per row (paper eq. 3.8, spec §7).

    ``mask`` bool, broadcastable to ``scores`` (True = forbidden): ``ideal`` gives the key weight 0
    (an all-masked row is all zeros), ``additive`` adds mask_value, ``finfo_min`` adds finfo.min.
    The row maximum of the midpoints is subtracted first (an exact shift; the value is unchanged).
    A row whose every key is masked gets the same constant added to every logit, so its softmax is the
    softmax of its scores exactly: the constant is left out there (added and then cancelled in ball
    arithmetic, finfo.min ~ 2^1024 would widen every ball of the row by 2^(1024 - prec)).
    """
    switch("mask_mode").check(mode, allowed=switch("mask_mode").implemented_by("arb"))
    m = np.zeros(scores.shape, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool),
                                                                                scores.shape)
    logits = scores
    if mode != "ideal" and m.any():
        shift = ball(mask_value if mode == "additive" else finfo_min)
        shifted = m & ~m.all(axis=-1, keepdims=True)  # fully masked rows: softmax(scores + c) = softmax(scores)
        logits = np.where(shifted, scores + shift, scores)
    allowed = ~m if mode == "ideal" else np.ones(scores.shape, dtype=bool)
    return softmax_rows(logits, allowed)


def softmax_rows(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """E_j = e^{x_j - c} / sum_{k allowed} e^{x_k - c} over the last axis, 0 where not allowed (c exact, per row)."""
    out = np.empty(logits.shape, dtype=object)
    rows = logits.reshape(-1, logits.shape[-1])
    ok = allowed.reshape(rows.shape)
    flat = out.reshape(rows.shape)
    for r in range(rows.shape[0]):  # rows of at most T entries each; the shift differs per row
        idx = np.flatnonzero(ok[r])
        flat[r] = ZERO
        if idx.size == 0:
            continue
        c = max((rows[r, j].mid() for j in idx), key=lambda v: float(v))
        e = exp_pos(rows[r, idx] - c)
        z = e.sum()
        flat[r, idx] = nonneg(e / z)
    return out


def mix_values(e: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Z = E V per head (paper eq. 3.9)."""
    return batched_matmul(e, v)
