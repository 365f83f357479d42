"""Exact-tier RoPE (spec §2.4 step 3, §12; paper Definition 4.3), both pairings and both precisions.

``precision="exact"``: omega_i = base^(-2i/d_k) and the angle p omega_i are real numbers evaluated
at the working precision; the rotation is exact arithmetic rounded per output.

``precision="float32"`` reproduces the float32 quirk of torchtune / keras-nlp / HF as the
IEEE 754 binary32 computation it is, with every elementary step correctly rounded (RN32):

* table: e_i = RN32(2i / d_k) (``arange(0, d_k, 2, f32) / f32(d_k)``), pw_i = RN32(base^{e_i}),
  omega_i = RN32(1 / pw_i), phi = RN32(p omega_i), c = RN32(cos phi), s = RN32(sin phi);
* inputs: x32 = RN32(x) for q and k (the exact q/k, rounded once to binary32);
* rotation in binary32: y_a = RN32(RN32(x_a c) - RN32(x_b s)), y_b = RN32(RN32(x_b c) + RN32(x_a s))
  (NumPy and torch evaluate it this way, without fused multiply-add).

The float32 table values are then exact binary inputs.  IEEE fixes +, -, *, / and the casts,
so these steps match any float32 implementation bit for bit; pow, cos and sin are not fixed
by IEEE, and libm/SIMD float32 kernels may differ from the correctly rounded value by an ulp
of binary32 (about 6e-8 relative).  That, and only that, separates this tier from NumPy's
float32 table; ``docs/accuracy.md`` reports it.
"""

from __future__ import annotations

from typing import Any

import mpmath
from mpmath import mpf

from pldr_ref.exact.numbers import mpf_exact, round_mpf, round_to_float32
from pldr_ref.exact.ops import Vector
from pldr_ref.switches import AUTO, switch

LAYOUTS = switch("rope_layout").implemented_by("mpmath")
PRECISIONS = switch("rope_precision").implemented_by("mpmath")
#: Table sources of the exact tier (``PLDRConfig.rope_table``; ``explicit`` reads a given table).
TABLE_SOURCES = tuple(v for v in switch("rope_table").implemented_by("mpmath") if v != AUTO)
#: Rotation arithmetic: real (``exact`` / ``float64``: exact arithmetic, one rounding per output),
#: ``float32`` (RN32 per step), ``float64_qk_f32`` (x = RN32(x), then real arithmetic).
ARITHMETICS = ("exact", "float64", "float32", "float64_qk_f32")


def round_to_float64(x: mpf) -> mpf:
    """RN64(x): ``x`` rounded to the nearest binary64 value, returned as an exact ``mpf``."""
    return mpf_exact(round_mpf(x))


def rope_table(position: int, d_k: int, base: float, precision: str) -> tuple[Vector, Vector]:
    """(cos phi_{p,i}, sin phi_{p,i}) for i = 0..d_k/2-1 at absolute position ``position``.

    ``"keras-0.6.4"``: keras-nlp 0.6.4's formula in float64, every step correctly rounded to binary64:
    e_i = RN64(2i / d_k), omega_i = RN64(1 / RN64(base^{e_i})), phi = RN64(p omega_i); cos, sin of that
    binary64 angle are real numbers.
    """
    if precision not in TABLE_SOURCES or precision == "explicit":
        raise switch("rope_table").error(precision, allowed=tuple(v for v in TABLE_SOURCES if v != "explicit"))
    if d_k % 2:
        raise ValueError(f"RoPE needs an even d_k, got {d_k}")
    b = mpf_exact(base)
    p = mpf(int(position))
    cos: Vector = []
    sin: Vector = []
    for i in range(d_k // 2):
        if precision == "exact":
            phi = p * mpmath.exp(-mpf(2 * i) / d_k * mpmath.log(b))
            cos.append(mpmath.cos(phi))
            sin.append(mpmath.sin(phi))
        elif precision == "keras-0.6.4":
            r64 = round_to_float64
            e = r64(mpf(2 * i) / d_k)
            omega = r64(1 / r64(mpmath.power(b, e)))
            phi = r64(p * omega)
            cos.append(mpmath.cos(phi))
            sin.append(mpmath.sin(phi))
        else:
            r32 = round_to_float32
            e = r32(mpf(2 * i) / d_k)
            omega = r32(1 / r32(mpmath.power(r32(b), e)))
            phi = r32(r32(p) * omega)
            cos.append(r32(mpmath.cos(phi)))
            sin.append(r32(mpmath.sin(phi)))
    return cos, sin


def pair_indices(d_k: int, layout: str) -> list[tuple[int, int]]:
    """Index pairs (a, b) rotated together: (2i, 2i+1) interleaved, (i, i + d_k/2) half-split."""
    half = d_k // 2
    if layout == "interleaved":
        return [(2 * i, 2 * i + 1) for i in range(half)]
    if layout == "half":
        return [(i, i + half) for i in range(half)]
    raise switch("rope_layout").error(layout, allowed=LAYOUTS)


def rotate(x: Vector, cos: Vector, sin: Vector, layout: str, precision: str) -> Vector:
    """y_a = x_a cos - x_b sin, y_b = x_b cos + x_a sin for each pair (a, b) of ``layout``."""
    y: Vector = [mpf(0)] * len(x)
    if precision not in ARITHMETICS:
        raise ValueError(f"rope arithmetic must be one of {ARITHMETICS}, got {precision!r}")
    if precision == "float64_qk_f32":
        x = [round_to_float32(v) for v in x]
    if precision == "float32":
        r32 = round_to_float32
        x = [r32(v) for v in x]
        for (a, b), c, s in zip(pair_indices(len(x), layout), cos, sin, strict=True):
            y[a] = r32(r32(x[a] * c) - r32(x[b] * s))
            y[b] = r32(r32(x[b] * c) + r32(x[a] * s))
        return y
    for (a, b), c, s in zip(pair_indices(len(x), layout), cos, sin, strict=True):
        y[a] = mpmath.fdot([x[a], x[b]], [c, -s])
        y[b] = mpmath.fdot([x[b], x[a]], [c, s])
    return y


class RopeTables:
    """Memo of :func:`rope_table` per position for one (d_k, base, precision) at one working precision.

    ``precision="explicit"`` reads ``explicit`` (a :class:`pldr_ref.rope.RopeTable`; its float64 values are
    exact binary inputs).
    """

    def __init__(self, d_k: int, base: float, precision: str, explicit: Any = None) -> None:
        if precision == "explicit" and explicit is None:
            raise ValueError("rope_table='explicit' needs a RopeTable")
        self.d_k, self.base, self.precision, self.explicit = d_k, base, precision, explicit
        self._cache: dict[int, tuple[Vector, Vector]] = {}

    def __call__(self, position: int) -> tuple[Vector, Vector]:
        if position not in self._cache:
            if self.precision == "explicit":
                cos, sin = self.explicit.lookup(position, self.d_k)
                self._cache[position] = ([mpf_exact(float(v)) for v in cos], [mpf_exact(float(v)) for v in sin])
            else:
                self._cache[position] = rope_table(position, self.d_k, self.base, self.precision)
        return self._cache[position]


def apply_rope_row(x: Vector, position: int, layout: str, precision: str, base: float) -> Vector:
    """RoPE of one head row ``x`` [d_k] at ``position``."""
    cos, sin = rope_table(position, len(x), base, precision)
    return rotate(x, cos, sin, layout, precision)
