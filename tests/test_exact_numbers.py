"""Exact conversion float64 <-> mpf and correct rounding (issue 4: conversions, ties, subnormals, overflow).

Oracle: CPython's ``Fraction.__float__`` (integer true division, correctly rounded, ties to even,
subnormals included) and NumPy's float64 -> float32 cast (one IEEE rounding).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pldr_ref.exact.numbers import BINARY32, mpf_exact, round_mpf, ulp_distance

TINY = 5e-324  # 2^-1074, the smallest subnormal


def mp_of(man: int, exp: int) -> mpmath.mpf:
    """The exact real man * 2^exp as an mpf (no rounding)."""
    return mpmath.mp.make_mpf(mpmath.libmp.from_man_exp(man, exp))


def fraction_oracle(man: int, exp: int) -> float:
    frac = Fraction(man) * Fraction(2) ** exp
    try:
        return float(frac)
    except OverflowError:
        return math.copysign(math.inf, man)


@given(st.integers(min_value=-(1 << 120), max_value=1 << 120), st.integers(min_value=-1250, max_value=1000))
def test_round_nearest_matches_fraction_oracle(man: int, exp: int) -> None:
    assert round_mpf(mp_of(man, exp)) == fraction_oracle(man, exp)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_mpf_exact_is_exact_even_at_low_precision(x: float) -> None:
    with mpmath.workdps(3):
        v = mpf_exact(x)
    sign, man, exp, _ = v._mpf_
    assert (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp) == Fraction(x)
    assert round_mpf(v) == x


@pytest.mark.parametrize(
    ("man", "exp", "expected"),
    [
        (1, -1075, 0.0),  # exactly half the smallest subnormal: tie to even (0)
        (3, -1075, 2 * TINY),  # 1.5 ulp: tie to even (2)
        (5, -1076, TINY),  # 1.25 ulp: nearest
        ((1 << 53) + 1, -53, 1.0),  # 1 + 2^-53: tie, even is 1.0
        ((1 << 53) + 3, -53, 1.0 + 2 * 2.0**-52),  # tie, even is upward
        ((1 << 54) - 1, 970, math.inf),  # just above max + half ulp region: rounds to 2^1024 -> inf
        ((1 << 53) - 1, 971, np.finfo(np.float64).max),
    ],
)
def test_ties_subnormals_and_overflow(man: int, exp: int, expected: float) -> None:
    assert round_mpf(mp_of(man, exp)) == expected
    assert round_mpf(mp_of(-man, exp)) == -expected


def test_negative_control_mpmath_float_double_rounds_subnormals() -> None:
    # 2^-1075 (1 + 2^-60): just above a tie, so the correct result is the smallest subnormal.
    x = mp_of((1 << 60) + 1, -1135)
    assert round_mpf(x) == TINY
    with mpmath.workdps(50):
        naive = float(x)  # mpmath rounds to 53 bits first, then ldexp rounds again
    assert naive == 0.0, "mpmath no longer double-rounds; this control should then use another naive rounding"


@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_binary32_rounding_matches_numpy_cast(x: float) -> None:
    with np.errstate(over="ignore"):
        expected = float(np.float32(x))
    assert round_mpf(mpf_exact(x), BINARY32) == expected


@given(st.integers(min_value=-(1 << 80), max_value=1 << 80).filter(bool), st.integers(min_value=-1200, max_value=900))
def test_directed_rounding_brackets_the_value(man: int, exp: int) -> None:
    x = mp_of(man, exp)
    lo, hi = round_mpf(x, mode="down"), round_mpf(x, mode="up")
    exact = Fraction(man) * Fraction(2) ** exp
    assert (lo == -math.inf or Fraction(lo) <= exact) and (hi == math.inf or exact <= Fraction(hi))
    assert lo == hi or math.nextafter(lo, math.inf) == hi
    toward_zero = round_mpf(x, mode="zero")
    assert toward_zero == (lo if man > 0 else hi)
    assert round_mpf(x) in (lo, hi)


def test_directed_overflow_and_specials() -> None:
    big = mp_of(1, 1100)
    assert round_mpf(big, mode="down") == np.finfo(np.float64).max
    assert round_mpf(big, mode="up") == math.inf
    assert round_mpf(-big, mode="zero") == -np.finfo(np.float64).max
    assert round_mpf(mpmath.mpf(0)) == 0.0
    assert math.isnan(round_mpf(mpmath.mp.nan))
    assert round_mpf(mpmath.mp.ninf) == -math.inf
    assert math.copysign(1.0, round_mpf(mp_of(-1, -1200))) == -1.0  # underflow keeps the sign
    with pytest.raises(ValueError, match="rounding mode"):
        round_mpf(big, mode="odd")
    with pytest.raises(TypeError, match="mpf"):
        round_mpf(1.0)  # type: ignore[arg-type]


def test_huge_exponent_gaps_are_fast() -> None:
    # e^-1e9 and e^-1.8e308 are real values of masked softmax entries; rounding must not build 2^1e9 integers.
    with mpmath.workdps(30):
        assert round_mpf(mpmath.exp(mpmath.mpf(-1e9))) == 0.0
        assert round_mpf(mpmath.exp(mpmath.mpf(-1.7976931348623157e308))) == 0.0


def test_ulp_distance() -> None:
    a = np.array([1.0, 0.0, -0.0, TINY, -TINY, 1.0, np.finfo(np.float64).max])
    b = np.array([np.nextafter(1.0, 2.0), -0.0, 0.0, -TINY, TINY, 1.0, -np.finfo(np.float64).max])
    d = ulp_distance(a, b)
    assert d.tolist()[:6] == [1.0, 0.0, 0.0, 2.0, 2.0, 0.0]
    assert d[6] > 1e19
    # negative control: a 1-ulp change is seen in large magnitudes, where a float cast of the bits would not
    big = np.array([1e300])
    assert ulp_distance(big, np.nextafter(big, np.inf))[0] == 1.0
