"""Exact-tier building blocks over mpmath numbers at the caller's working precision.

Data are plain Python lists: a vector is ``list[mpf]``, a matrix ``list[list[mpf]]`` (row-major).
Inputs are exact binary values; every dot product is formed with :func:`mpmath.fdot`, which
multiplies exactly and sums exactly before a single rounding to the working precision.
Nothing here calls the float64 tier.  Spec references are to ``equations.md``.
"""

from __future__ import annotations

import mpmath
from mpmath import mpf

from pldr_ref.switches import switch

Vector = list[mpf]
Matrix = list[list[mpf]]

ONE = mpf(1)


# ----------------------------------------------------------------------------- activations
def _logistic_denominator_prec(z: mpf) -> int:
    """Working bits for 1 + e^{-z}: for tiny |z| the value is 2 - z + ..., so resolving its deviation from 2
    (which decides float64 rounding near a tie such as silu(2^-1074) = 2^-1075 (1 + 2^-1076 + ...)) needs
    about -log2|z| bits beyond the working precision."""
    return mpmath.mp.prec + (2 * max(0, -int(mpmath.mag(z))) if z else 0)


def sigmoid(z: mpf) -> mpf:
    """sigma(z) = 1 / (1 + e^{-z}) (spec §1)."""
    with mpmath.workprec(_logistic_denominator_prec(z)):
        return ONE / (ONE + mpmath.exp(-z))


def silu(z: mpf) -> mpf:
    """silu(z) = z sigma(z) (spec §1)."""
    with mpmath.workprec(_logistic_denominator_prec(z)):
        return z / (ONE + mpmath.exp(-z))


def iswiglu(z: mpf) -> mpf:
    """iSwiGLU(z) = z^2 sigma(z) >= 0 (paper Definition 3.1); exact also in the z -> -inf tail."""
    with mpmath.workprec(_logistic_denominator_prec(z)):
        return z * z / (ONE + mpmath.exp(-z))


def hadamard_power(base: mpf, power: mpf) -> mpf:
    """base^power for base > 0 (paper eq. 3.5), e^{power ln base} at the working precision."""
    if base <= 0:
        raise ValueError(f"A_LM entry {base} must be > 0 for the real power A_LM^P")
    return mpmath.power(base, power)


# ----------------------------------------------------------------------------- linear maps
def affine(x: Vector, weight: Matrix, bias: Vector | None) -> Vector:
    """y_o = sum_i W[o][i] x_i + b_o (torch layout [out, in]); each y_o rounded once."""
    if bias is None:
        return [mpmath.fdot(row, x) for row in weight]
    return [mpmath.fdot([*row, b], [*x, ONE]) for row, b in zip(weight, bias, strict=True)]


def glu(x: Vector, w1: Matrix, b1: Vector | None, w2: Matrix, b2: Vector | None,
        w3: Matrix, b3: Vector | None) -> Vector:
    """GLU(z) = W3 (silu(W1 z + b1) * (W2 z + b2)) + b3 (spec §2.3)."""
    gate = [silu(u) for u in affine(x, w1, b1)]
    hidden = [g * u for g, u in zip(gate, affine(x, w2, b2), strict=True)]
    return affine(hidden, w3, b3)


def matmul(a: Matrix, b: Matrix) -> Matrix:
    """(A B)_{ij} = sum_k A_ik B_kj, each entry rounded once."""
    cols = [list(col) for col in zip(*b, strict=True)]
    return [[mpmath.fdot(row, col) for col in cols] for row in a]


def matmul_add(a: Matrix, b: Matrix, c: Matrix) -> Matrix:
    """(A B + C)_{ij}, each entry rounded once (bias folded into the exact sum)."""
    cols = [list(col) for col in zip(*b, strict=True)]
    return [[mpmath.fdot([*row, cij], [*col, ONE]) for col, cij in zip(cols, crow, strict=True)]
            for row, crow in zip(a, c, strict=True)]


def vecmat(x: Vector, m: Matrix) -> Vector:
    """Row vector times matrix: (x M)_j = sum_i x_i M_ij."""
    return [mpmath.fdot(x, list(col)) for col in zip(*m, strict=True)]


def transpose(m: Matrix) -> Matrix:
    """M^T."""
    return [list(col) for col in zip(*m, strict=True)]


# ----------------------------------------------------------------------------- LayerNorm
def layer_norm(x: Vector, gamma: Vector, beta: Vector, eps: mpf) -> Vector:
    """LN(x) = (x - mu) / sqrt(var + eps) * gamma + beta, biased variance (spec §1).

    mu is the exact mean rounded once; var the rounded mean of (x - mu)^2.  For rows whose
    variance is far below eps the result tends to (x - mu) / sqrt(eps) * gamma + beta.
    """
    n = len(x)
    mu = mpmath.fsum(x) / n
    xc = [xi - mu for xi in x]
    var = mpmath.fdot(xc, xc) / n
    inv = ONE / mpmath.sqrt(var + eps)
    return [mpmath.fdot([c * inv, b], [g, ONE]) for c, g, b in zip(xc, gamma, beta, strict=True)]


# ----------------------------------------------------------------------------- softmax, masks
def softmax_row(logits: Vector) -> Vector:
    """E_j = e^{x_j} / sum_k e^{x_k} over one row (paper eq. 3.8).

    -inf entries get exactly 0; an all -inf row is all zeros (the float64 tier's convention).
    Max subtraction is kept only to make e^{x - m} well scaled; it does not change the value.
    x - m is formed exactly (no rounding): a row of masked logits score + finfo.min (exact, see
    :func:`masked_logit`) differs from its maximum by the scores alone, and a rounded difference would
    cancel to 0 at every working precision below ~330 digits, a uniform row the dps / 2 dps guard cannot see.
    """
    finite = [x for x in logits if mpmath.isfinite(x)]
    if not finite:
        return [mpf(0)] * len(logits)
    m = max(finite)
    e = [mpmath.exp(mpmath.fsub(x, m, exact=True)) if mpmath.isfinite(x) else mpf(0) for x in logits]
    z = mpmath.fsum(e)
    return [ei / z for ei in e]


def masked_logit(score: mpf, masked: bool, mode: str, mask_value: mpf, finfo_min: mpf) -> mpf:
    """Masked logit (spec §7): ideal -> -inf; additive -> score + mask_value; finfo_min -> score + finfo.min.

    The sums are exact (an ``mpf`` of as many bits as they need), not rounded to the working precision:
    rounded, score + finfo.min (|finfo.min| ~ 2^1024) keeps nothing of the score below ~330 digits, and a
    fully masked row, whose softmax is the softmax of its scores, would come out uniform at dps and 2 dps alike.
    """
    if not masked:
        return score
    if mode == "ideal":
        return mpmath.mp.ninf
    if mode == "additive":
        return mpmath.fadd(score, mask_value, exact=True)
    if mode == "finfo_min":
        return mpmath.fadd(score, finfo_min, exact=True)
    raise switch("mask_mode").error(mode, allowed=switch("mask_mode").implemented_by("mpmath"))


def causal_padding_mask(query_positions: list[int], key_positions: list[int],
                        key_padding: list[bool] | None) -> list[list[bool]]:
    """M[i][j] = (key position > query position) or pad(j), True = forbidden (spec §7.1)."""
    return [[kp > qp or bool(key_padding and key_padding[j]) for j, kp in enumerate(key_positions)]
            for qp in query_positions]
