"""Exact-tier density operator, metric learner and PLGA tensors, per head (spec §2.4 steps 4-7).

Per head h with d_k x d_k matrices (lists of rows): A0 = Q~^T Q~; A = metric learner(A0) acting
row by row; A_LM = iSwiGLU(W A + b) + eps_adj; A_P = A_LM^(o P); G_LM = a A_P + b_a.
Parameters arrive as exact ``mpf`` nested lists (see :func:`pldr_ref.exact.params.exact_layer`).
"""

from __future__ import annotations

from typing import Any

import mpmath
from mpmath import mpf

from pldr_ref.exact.ops import Matrix, affine, glu, hadamard_power, iswiglu, layer_norm, matmul_add


def density_operator(q_rot: Matrix) -> Matrix:
    """A0 = Q~^T Q~ = sum_s q~_s q~_s^T for Q~ [S, d_k] (paper eq. 3.2); symmetric by construction."""
    cols = [list(c) for c in zip(*q_rot, strict=True)]
    n = len(cols)
    a0 = [[mpf(0)] * n for _ in range(n)]
    for i in range(n):
        for j in range(i, n):
            a0[i][j] = a0[j][i] = mpmath.fdot(cols[i], cols[j])
    return a0


def cumulative_density_operator(q_rot: Matrix) -> list[Matrix]:
    """A0_i = sum_{s <= i} q~_s q~_s^T for each row i (paper eq. 4.16): [S][d_k][d_k]."""
    return [density_operator(q_rot[: i + 1]) for i in range(len(q_rot))]


def glu_params(g: Any) -> tuple:
    """(w1, b1, w2, b2, w3, b3) of an exact GLU parameter tuple."""
    return (g.w1, g.b1, g.w2, g.b2, g.w3, g.b3)


def residual_unit(a: Matrix, unit: Any, eps: mpf) -> Matrix:
    """A <- LN_r(GLU_{r,D}(... GLU_{r,1}(A) ...) + A), row by row (spec §2.4 step 6)."""
    out = []
    for row in a:
        h = row
        for g in unit.glus:
            h = glu(h, *glu_params(g))
        out.append(layer_norm([u + v for u, v in zip(h, row, strict=True)], unit.norm.gamma, unit.norm.beta, eps))
    return out


def metric_learner_v500(a0: Matrix, lp: Any, eps: mpf) -> Matrix:
    """A = Res_R(... Res_1(LN_A0(A0)) ...) (spec §2.4 steps 5-6)."""
    a = [layer_norm(row, lp.a_norm.gamma, lp.a_norm.beta, eps) for row in a0]
    for unit in lp.res_units:
        a = residual_unit(a, unit, eps)
    return a


def metric_learner_v900(a0: Matrix, lp: Any, eps: mpf) -> Matrix:
    """A = LN2(Dense_{Dd->dk}(Res_R(... LN1(Dense_{dk->Dd}(A0)) ...))) (spec §2.6)."""
    a = [layer_norm(affine(row, *lp.lift), lp.lift_norm.gamma, lp.lift_norm.beta, eps) for row in a0]
    for unit in lp.res_units:
        a = residual_unit(a, unit, eps)
    return [layer_norm(affine(row, *lp.drop), lp.drop_norm.gamma, lp.drop_norm.beta, eps) for row in a]


def metric_learner(a0: Matrix, lp: Any, kind: str, eps: mpf) -> Matrix:
    """Dispatch on ``kind`` in {"v500", "v900"}."""
    if kind == "v500":
        return metric_learner_v500(a0, lp, eps)
    if kind == "v900":
        return metric_learner_v900(a0, lp, eps)
    raise ValueError(f"metric_learner kind {kind!r} computes no A (expected 'v500' or 'v900')")


def metric_tensor(a: Matrix, w: Matrix, b: Matrix, eps_adj: mpf) -> Matrix:
    """A_LM = iSwiGLU(W A + b) + eps_adj (paper eq. 3.4), W A a matrix product."""
    return [[iswiglu(z) + eps_adj for z in row] for row in matmul_add(w, a, b)]


def potential_tensor(a_lm: Matrix, p: Matrix) -> Matrix:
    """A_P = A_LM^(o P), elementwise real power (paper eq. 3.5)."""
    return [[hadamard_power(x, y) for x, y in zip(xr, pr, strict=True)] for xr, pr in zip(a_lm, p, strict=True)]


def energy_curvature(a_p: Matrix, a: Matrix, b_a: Matrix) -> Matrix:
    """G_LM = a A_P + b_a (paper eq. 3.6), a A_P a matrix product."""
    return matmul_add(a, a_p, b_a)
