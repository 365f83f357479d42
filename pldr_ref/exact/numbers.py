"""Exact conversions between IEEE binary floats and mpmath numbers, and correct rounding.

Every float64 is a dyadic rational, so it converts to an ``mpf`` exactly, whatever the
working precision.  The way back rounds the ``mpf`` (sign, mantissa, exponent) with integer
arithmetic to the nearest binary64 (or binary32) value, ties to even, with gradual
underflow to subnormals and overflow to infinity as IEEE 754 specifies.  ``float(mpf)``
is not used: mpmath rounds to 53 bits first and then lets ``math.ldexp`` round again,
which double-rounds subnormal results.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import mpmath
import numpy as np
from mpmath.libmp import from_float

ROUNDING_MODES = ("nearest", "down", "up", "zero")


class BinaryFormat(NamedTuple):
    """An IEEE 754 binary format: ``precision`` significand bits (hidden bit included), ``emin``, ``emax``."""

    name: str
    precision: int
    emin: int
    emax: int

    @property
    def max_finite(self) -> float:
        """Largest finite value (2 - 2^(1-p)) 2^emax."""
        return math.ldexp((1 << self.precision) - 1, self.emax - self.precision + 1)


BINARY64 = BinaryFormat("binary64", 53, -1022, 1023)
BINARY32 = BinaryFormat("binary32", 24, -126, 127)


def mpf_exact(x: float) -> mpmath.mpf:
    """The exact value of the binary64 number ``x`` as an ``mpf`` (no rounding at any precision).

    Non-finite values map to mpmath's +-inf / nan.
    """
    x = float(x)
    if math.isnan(x):
        return mpmath.mp.nan
    if math.isinf(x):
        return mpmath.mp.inf if x > 0 else mpmath.mp.ninf
    # from_float is exact for every binary64 (normal or subnormal) when asked for 53 bits;
    # make_mpf wraps the tuple without re-rounding to the (possibly lower) working precision.
    return mpmath.mp.make_mpf(from_float(x, 53, "n"))


def round_mpf(x: mpmath.mpf, fmt: BinaryFormat = BINARY64, mode: str = "nearest") -> float:
    """Round the real number ``x`` to ``fmt`` (result returned as a Python float, which holds it exactly).

    ``mode``: ``"nearest"`` (ties to even), ``"down"`` (toward -inf), ``"up"`` (toward +inf),
    ``"zero"`` (toward 0).  Overflow gives +-inf or +-max_finite as IEEE 754 prescribes for the mode;
    underflow is gradual (subnormals), and a result that rounds to zero is +0.0 or -0.0 by sign.
    """
    if mode not in ROUNDING_MODES:
        raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, got {mode!r}")
    if not isinstance(x, mpmath.mpf):
        raise TypeError(f"round_mpf needs an mpmath.mpf, got {type(x).__name__}")
    sign, man, exp, bc = x._mpf_
    if not man:
        if x == 0:
            return 0.0
        if mpmath.isnan(x):
            return math.nan
        return -math.inf if sign else math.inf
    p = fmt.precision
    top = exp + bc - 1  # exponent of the leading bit
    lsb = max(top - (p - 1), fmt.emin - (p - 1))  # exponent of the last kept bit (subnormal floor)
    if exp >= lsb:
        q = man << (exp - lsb)
        inexact = False
    else:
        shift = lsb - exp
        inexact = True
        if shift > bc + 1:
            # |x| < 2^(lsb-1)/2: below half a unit of the last place (no giant shifts for tiny x like e^-1e9)
            q = 0
        else:
            q = man >> shift
            rem = man - (q << shift)
            inexact = rem != 0
            if mode == "nearest":
                half = 1 << (shift - 1)
                if rem > half or (rem == half and q & 1):
                    q += 1
        if mode != "nearest" and inexact and ((mode == "up" and not sign) or (mode == "down" and sign)):
            q += 1
    if q.bit_length() + lsb > fmt.emax + 1:  # |result| >= 2^(emax+1): overflow
        to_inf = mode == "nearest" or (mode == "up" and not sign) or (mode == "down" and sign)
        mag = math.inf if to_inf else fmt.max_finite
        return -mag if sign else mag
    value = math.ldexp(float(q), lsb)  # q < 2^(p+1) and the result is representable: exact
    return -value if sign else value


def round_to_float32(x: mpmath.mpf) -> mpmath.mpf:
    """RN32(x): ``x`` rounded to the nearest binary32 value, returned as an exact ``mpf``."""
    return mpf_exact(round_mpf(x, BINARY32))


def map_nested(fn: Callable[[Any], Any], data: Any) -> Any:
    """Apply ``fn`` to every leaf of a nested list structure, keeping the nesting."""
    if isinstance(data, list):
        return [map_nested(fn, item) for item in data]
    return fn(data)


def to_mp(array: Any) -> Any:
    """A float64 array (any shape) as nested lists of exact ``mpf`` values (scalars give an ``mpf``)."""
    arr = np.asarray(array, dtype=np.float64)
    return map_nested(mpf_exact, arr.tolist())


def to_float64(data: Any) -> np.ndarray:
    """Nested lists of ``mpf`` -> float64 ndarray, each value correctly rounded (nearest, ties to even)."""
    return np.array(map_nested(round_mpf, data), dtype=np.float64)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of binary64 values between ``a`` and ``b`` (0 when equal; +0.0 and -0.0 are equal).

    Works on the ordered integer image of the bit patterns; returned as float64.
    """
    ia = np.ascontiguousarray(a, dtype=np.float64).view(np.int64)
    ib = np.ascontiguousarray(b, dtype=np.float64).view(np.int64)
    mask = np.int64(0x7FFFFFFFFFFFFFFF)
    oa = np.where(ia < 0, -(ia & mask), ia)
    ob = np.where(ib < 0, -(ib & mask), ib)
    same_side = (oa >= 0) == (ob >= 0)
    # same sign: the int64 difference cannot overflow; opposite signs: add the magnitudes in float
    near = np.abs(np.where(same_side, oa - ob, 0)).astype(np.float64)
    far = np.abs(oa).astype(np.float64) + np.abs(ob).astype(np.float64)
    return np.where(same_side, near, far)
