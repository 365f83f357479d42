"""Certified mode: interval enclosures (mpmath ``iv``) of the elementwise ops.

For exact binary64 inputs, mpmath's interval arithmetic rounds every endpoint outward, so the
returned :class:`Enclosure` provably contains the exact real value of

* iSwiGLU(z) = z^2 / (1 + e^{-z}),
* the power law x^p = e^{p ln x} (x > 0),
* one softmax row E_j = 1 / sum_k e^{z_k - z_j},
* one LayerNorm row (x - mu) / sqrt(var + eps) * gamma + beta.

If both endpoints round to the same binary64 value, that value is certified to be the
correctly rounded result (:meth:`Enclosure.certified_float64`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import mpmath
from mpmath import iv

from pldr_ref.constants import EPS_LN
from pldr_ref.exact.numbers import mpf_exact, round_mpf


class Enclosure(NamedTuple):
    """A closed interval [lo, hi] of reals (exact ``mpf`` endpoints) containing the true value."""

    lo: mpmath.mpf
    hi: mpmath.mpf

    @property
    def width(self) -> mpmath.mpf:
        """hi - lo, exact."""
        with mpmath.workprec(max(mpmath.mp.prec, 64 + max(self.hi.man.bit_length(), self.lo.man.bit_length()))):
            return mpmath.fsub(self.hi, self.lo, exact=True)

    def contains(self, value: float | mpmath.mpf) -> bool:
        """True if ``value`` (a float is taken exactly) lies in [lo, hi]."""
        v = mpf_exact(value) if isinstance(value, float) else value
        return bool(self.lo <= v <= self.hi)

    def float64_bounds(self) -> tuple[float, float]:
        """[RD(lo), RU(hi)]: the smallest float64 interval containing the enclosure."""
        return round_mpf(self.lo, mode="down"), round_mpf(self.hi, mode="up")

    def certified_float64(self) -> float | None:
        """The correctly rounded float64 of the enclosed value if the enclosure decides it, else None."""
        lo, hi = round_mpf(self.lo), round_mpf(self.hi)
        return lo if lo == hi else None


@contextlib.contextmanager
def _iv_dps(dps: int) -> Iterator[None]:
    """Temporarily set the interval context to ``dps`` digits (``iv`` has no ``workdps``)."""
    if not isinstance(dps, int) or dps < 1:
        raise ValueError(f"dps must be a positive int, got {dps!r}")
    saved = iv.prec
    iv.dps = dps
    try:
        yield
    finally:
        iv.prec = saved


def _point(x: float) -> iv.mpf:
    return iv.mpf(mpf_exact(x))


def _widen(x: mpmath.mpf, direction: int, prec: int) -> mpmath.mpf:
    """x moved outward by one unit at ``prec`` bits (exactly, no rounding)."""
    if not x:
        return x
    return mpmath.fadd(x, direction * mpmath.ldexp(1, int(mpmath.mag(x)) - prec), exact=True)


def _enclosure(v: iv.mpf) -> Enclosure:
    """The interval widened outward by one unit at the interval precision.

    mpmath's interval functions are not always outward-rounded at the last bit: at 50 digits
    ``iv.exp(5.9e-56)`` returns [1, 1], which excludes the true value 1 + 5.9e-56.  One unit of outward
    widening restores containment for such last-bit lapses and costs nothing measurable in width.
    """
    lo, hi = v._mpi_
    return Enclosure(_widen(mpmath.mp.make_mpf(lo), -1, iv.prec), _widen(mpmath.mp.make_mpf(hi), 1, iv.prec))


def iswiglu(z: float, *, dps: int = 50) -> Enclosure:
    """Enclosure of iSwiGLU(z) = z^2 / (1 + e^{-z})."""
    with _iv_dps(dps):
        x = _point(z)
        return _enclosure(x * x / (1 + iv.exp(-x)))


def power_law(base: float, power: float, *, dps: int = 50) -> Enclosure:
    """Enclosure of base^power = e^{power ln base}, base > 0 (paper eq. 3.5)."""
    if not base > 0:
        raise ValueError(f"power law needs base > 0, got {base}")
    with _iv_dps(dps):
        return _enclosure(iv.exp(_point(power) * iv.log(_point(base))))


def softmax_row(logits: Sequence[float], *, dps: int = 50) -> list[Enclosure]:
    """Enclosures of E_j = 1 / sum_k e^{z_k - z_j} for a finite row (each z_j appears once per term)."""
    zs = [float(z) for z in logits]
    if not zs or not all(mpmath.isfinite(z) for z in zs):
        raise ValueError("certified softmax needs a non-empty finite row")
    with _iv_dps(dps):
        pts = [_point(z) for z in zs]
        out = []
        for zj in pts:
            total = iv.mpf(0)
            for zk in pts:
                total += iv.exp(zk - zj)
            out.append(_enclosure(1 / total))
        return out


def layer_norm_row(x: Sequence[float], gamma: Sequence[float], beta: Sequence[float], eps: float = EPS_LN,
                   *, dps: int = 50) -> list[Enclosure]:
    """Enclosures of LN(x)_i = (x_i - mu) / sqrt(var + eps) * gamma_i + beta_i (biased variance)."""
    n = len(x)
    if n == 0 or len(gamma) != n or len(beta) != n:
        raise ValueError("layer_norm_row needs x, gamma, beta of the same non-zero length")
    with _iv_dps(dps):
        xs = [_point(float(v)) for v in x]
        total = iv.mpf(0)
        for v in xs:
            total += v
        mu = total / n
        xc = [v - mu for v in xs]
        ss = iv.mpf(0)
        for c in xc:
            ss += c * c
        inv = 1 / iv.sqrt(ss / n + _point(float(eps)))
        return [_enclosure(c * inv * _point(float(g)) + _point(float(b))) for c, g, b in zip(xc, gamma, beta,
                                                                                              strict=True)]
