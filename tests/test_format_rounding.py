"""pldr_ref.format_rounding against a bit-level reference built here, independently of the module and of ml_dtypes:
every bfloat16 / float16 pattern, every midpoint between neighbours, the overflow threshold, the double-rounding
witness of issue 19; random values against NumPy / ml_dtypes only where ml_dtypes rounds once in every version.
Negative controls: a truncating and a double-rounding variant fail the same checks."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

from pldr_ref.format_rounding import BFLOAT16, FLOAT16, FLOAT32, FloatFormat, float_format, round_to_format

Rounder = Callable[[np.ndarray, FloatFormat], np.ndarray]


def bf16_from_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 patterns -> float64: a bfloat16 is the high 16 bits of a float32."""
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def f16_from_bits(bits: np.ndarray) -> np.ndarray:
    """IEEE binary16 patterns -> float64, decoded by hand: sign 1 | exponent 5 (bias 15) | fraction 10."""
    b = bits.astype(np.int64)
    sign = np.where(b >> 15, -1.0, 1.0)
    exp = (b >> 10) & 0x1F
    frac = (b & 0x3FF).astype(np.float64)
    normal = sign * (1024.0 + frac) * np.exp2((exp - 25).astype(np.float64))
    sub = sign * frac * 2.0**-24
    special = np.where(frac == 0, sign * np.inf, np.nan)
    return np.where(exp == 0, sub, np.where(exp == 31, special, normal))


ALL_BITS = np.arange(1 << 16, dtype=np.uint16)
TABLES = {"bfloat16": (BFLOAT16, bf16_from_bits(ALL_BITS)), "float16": (FLOAT16, f16_from_bits(ALL_BITS))}


def _positive_finite(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positive finite values (patterns 0x0001 .. largest finite, ascending) and their patterns."""
    codes = np.arange(1, 1 << 15)
    v = values[codes]
    keep = np.isfinite(v)
    return v[keep], codes[keep]


def check_patterns(rnd: Rounder, fmt: FloatFormat, values: np.ndarray) -> None:
    got = rnd(values, fmt)
    nan = np.isnan(values)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan], values[~nan])
    assert np.array_equal(np.signbit(got[~nan]), np.signbit(values[~nan]))  # -0.0 stays -0.0


def check_midpoints(rnd: Rounder, fmt: FloatFormat, values: np.ndarray) -> None:
    v, codes = _positive_finite(values)
    v = np.concatenate([[0.0], v])
    codes = np.concatenate([[0], codes])
    lo, hi = v[:-1], v[1:]
    mid = (lo + hi) / 2  # exact: both have <= 11 significand bits
    even = np.where(codes[:-1] % 2 == 0, lo, hi)
    for sign in (1.0, -1.0):
        assert np.array_equal(rnd(sign * mid, fmt), sign * even)
        assert np.array_equal(rnd(sign * np.nextafter(mid, np.inf), fmt), sign * hi)
        assert np.array_equal(rnd(sign * np.nextafter(mid, -np.inf), fmt), sign * lo)


def check_overflow(rnd: Rounder, fmt: FloatFormat, values: np.ndarray) -> None:
    v, _ = _positive_finite(values)
    top = v[-1]
    assert top == fmt.max
    half_ulp = (top - v[-2]) / 2
    for sign in (1.0, -1.0):
        edge = sign * (top + half_ulp)
        assert rnd(np.array([edge]), fmt)[0] == sign * np.inf
        assert rnd(np.array([np.nextafter(edge, 0.0)]), fmt)[0] == sign * top
        assert rnd(np.array([sign * 1e300]), fmt)[0] == sign * np.inf


def check_witness(rnd: Rounder) -> None:
    """1 + 2^-8 + 2^-30 is just above the bfloat16 midpoint 1 + 2^-8; via float32 it lands on the midpoint."""
    assert rnd(np.array([1 + 2**-8 + 2**-30]), BFLOAT16)[0] == 1.0078125


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_pattern_rounds_to_itself(name):
    fmt, values = TABLES[name]
    check_patterns(round_to_format, fmt, values)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_midpoints_round_to_even_and_neighbours_to_nearest(name):
    fmt, values = TABLES[name]
    check_midpoints(round_to_format, fmt, values)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_overflow_threshold(name):
    fmt, values = TABLES[name]
    check_overflow(round_to_format, fmt, values)


def test_double_rounding_witness():
    check_witness(round_to_format)


def test_format_constants_match_the_bit_tables():
    for fmt, values in TABLES.values():
        v, _ = _positive_finite(values)
        assert (v[0], fmt.smallest_normal, fmt.max) == (fmt.smallest_subnormal, v[v >= 2.0**fmt.emin][0], v[-1])
        assert fmt.eps == v[v > 1][0] - 1
    f32 = np.finfo(np.float32)
    assert (FLOAT32.max, FLOAT32.smallest_normal, FLOAT32.eps) == (float(f32.max), float(f32.smallest_normal),
                                                                   float(f32.eps))


def test_special_values_and_shapes():
    x = np.array([[np.inf, -np.inf, np.nan], [0.0, -0.0, 5e-324]])
    for fmt in (BFLOAT16, FLOAT16, FLOAT32):
        y = round_to_format(x, fmt)
        assert y.shape == x.shape and y.dtype == np.float64
        assert y[0, 0] == np.inf and y[0, 1] == -np.inf and np.isnan(y[0, 2])
        assert y[1, 2] == 0 and not np.signbit(y[1, 0]) and np.signbit(y[1, 1])
        assert np.signbit(round_to_format(-5e-324, fmt))
    assert np.array_equal(round_to_format(x[1], "float64"), x[1])
    assert float_format(ml_dtypes.bfloat16) is BFLOAT16 and float_format(np.float16) is FLOAT16
    with pytest.raises(ValueError, match="int8"):
        float_format(np.int8)


def _random_float32_values(n: int, seed: int) -> np.ndarray:
    """float64 values exactly representable in float32 (all exponents, subnormals included), finite."""
    bits = np.random.default_rng(seed).integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    v = bits.view(np.float32)
    return v[np.isfinite(v)].astype(np.float64)


def test_random_values_match_single_rounding_libraries():
    """float32 -> bfloat16 / float16 is one rounding in every ml_dtypes / NumPy version; float64 -> float32 is
    NumPy's IEEE cast."""
    x32 = _random_float32_values(200_000, 19)
    x32 = np.concatenate([x32, x32 * 2.0**-100, x32 * 2.0**100])  # many values near the 16-bit ranges' ends
    x32 = x32[np.abs(x32) <= np.finfo(np.float32).max]
    x32 = x32.astype(np.float32).astype(np.float64)  # scaled values rounded back into float32
    with np.errstate(over="ignore"):
        want_bf = x32.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
        want_f16 = x32.astype(np.float32).astype(np.float16).astype(np.float64)
    assert np.array_equal(round_to_format(x32, BFLOAT16), want_bf)
    assert np.array_equal(round_to_format(x32, FLOAT16), want_f16)
    rng = np.random.default_rng(7)
    x64 = rng.standard_normal(100_000) * np.exp2(rng.integers(-160, 140, 100_000))
    with np.errstate(over="ignore"):
        want32 = x64.astype(np.float32).astype(np.float64)
    assert np.array_equal(round_to_format(x64, FLOAT32), want32)


# -- negative controls: broken variants fail the checks above ------------------------------------------------


def truncating(x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Round toward zero (drops the bits below the quantum)."""
    a = np.asarray(x, dtype=np.float64)
    _, e2 = np.frexp(a)
    shift = np.maximum(e2 - 1, fmt.emin) - fmt.precision + 1
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.ldexp(np.trunc(np.ldexp(a, -shift)), shift)
        return np.where(np.abs(y) > fmt.max, np.copysign(np.inf, a), y)


def through_float32(x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Two roundings: float64 -> float32 -> fmt (ml_dtypes 0.6.0's float64 -> bfloat16)."""
    with np.errstate(over="ignore"):
        return round_to_format(np.asarray(x, dtype=np.float64).astype(np.float32), fmt)


def test_negative_controls_fail():
    fmt, values = TABLES["bfloat16"]
    with pytest.raises(AssertionError):
        check_midpoints(truncating, fmt, values)
    with pytest.raises(AssertionError):
        check_overflow(truncating, fmt, values)
    with pytest.raises(AssertionError):
        check_witness(through_float32)
    with pytest.raises(AssertionError):
        check_midpoints(through_float32, fmt, values)
    check_patterns(truncating, fmt, values)  # representable values are fixed points of both: no false alarm
    check_patterns(through_float32, *TABLES["float16"])
