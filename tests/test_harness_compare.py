"""Comparator self-tests: exact ULP shifts (0, 1, 5, 50) in every dtype, subnormals, +-max, inf, NaN.

Shifts are produced independently of the code under test: ``np.nextafter`` for the IEEE
binary formats, and for bfloat16 the sorted table of all its finite values.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from pldr_ref.harness.verdict.compare import compare_tensor, numpy_dtype, ordered_int, ulp_distance

SHIFTS = (0, 1, 5, 50)
IEEE = ("float64", "float32", "float16")


def _bf16_table() -> np.ndarray:
    """Every finite bfloat16 value, ascending, with +0 and -0 merged (one float per ULP step)."""
    with np.errstate(invalid="ignore"):  # the NaN bit patterns
        allbits = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    return np.unique(allbits[np.isfinite(allbits)])


BF16 = _bf16_table()


def shift(x: np.ndarray, k: int, dtype: str) -> np.ndarray:
    """x moved k representable steps towards +inf (k < 0: towards -inf), zeros counted once."""
    if dtype == "bfloat16":
        idx = np.searchsorted(BF16, x.astype(np.float64))
        assert np.all(BF16[idx] == x.astype(np.float64))
        return BF16[idx + k].astype(ml_dtypes.bfloat16)
    out = x.astype(numpy_dtype(dtype))
    target = np.array(np.inf if k > 0 else -np.inf, dtype=out.dtype)
    for _ in range(abs(k)):
        out = np.nextafter(out, target)
        out = np.where(out == 0, np.zeros_like(out), out)  # -0 and +0 are one float here
    return out


def probe_values(dtype: str) -> np.ndarray:
    """Normal values, both signs, the smallest subnormals, values near zero and near +-max."""
    fi = ml_dtypes.finfo(numpy_dtype(dtype))
    tiny_sub = float(fi.smallest_subnormal)
    big = float(fi.max)
    vals = [1.0, -1.0, 0.1, -3.5, 1e-3, 0.0, tiny_sub, -tiny_sub, 7 * tiny_sub, float(fi.smallest_normal)]
    arr = np.array(vals, dtype=np.float64).astype(numpy_dtype(dtype))
    # +-max moved 60 steps inwards so that shifting by up to 50 in either direction stays finite
    near_max = shift(np.array([big, -big]).astype(numpy_dtype(dtype)), 0, dtype)
    near_max = np.concatenate([shift(near_max[:1], -60, dtype), shift(near_max[1:], 60, dtype)])
    return np.concatenate([arr, near_max.astype(arr.dtype)])


@pytest.mark.parametrize("dtype", [*IEEE, "bfloat16"])
@pytest.mark.parametrize("k", SHIFTS)
@pytest.mark.parametrize("direction", [1, -1])
def test_shift_by_exact_ulps(dtype, k, direction):
    x = probe_values(dtype)
    y = shift(x, direction * k, dtype)
    d = ulp_distance(x.astype(np.float64), y, dtype)
    assert np.all(d == k), (dtype, k, d)
    c = compare_tensor("t", x.astype(np.float64), y.astype(np.float64), dtype)
    assert c.max_ulp == k
    assert c.class_mismatches == 0


@pytest.mark.parametrize("dtype", [*IEEE, "bfloat16"])
def test_zero_crossing_counts_signed_zeros_once(dtype):
    fi = ml_dtypes.finfo(numpy_dtype(dtype))
    sub = float(fi.smallest_subnormal)
    assert ulp_distance(np.array([-sub]), np.array([sub]), dtype)[0] == 2
    assert ulp_distance(np.array([-0.0]), np.array([0.0]), dtype)[0] == 0
    assert ulp_distance(np.array([0.0]), np.array([sub]), dtype)[0] == 1


def test_ulp_of_max_to_inf_is_a_class_mismatch_not_a_distance():
    big = float(np.finfo(np.float32).max)
    c = compare_tensor("t", np.array([big, 1.0]), np.array([np.inf, 1.0]), "float32")
    assert c.posinf_mismatches == 1 and c.neginf_mismatches == 0 and c.nan_mismatches == 0
    assert c.max_ulp == 0  # ULPs are measured where both values are finite
    assert c.mismatches == 1 and c.worst_index == (0,)


def test_float64_extreme_ulp_distance_does_not_overflow():
    big = float(np.finfo(np.float64).max)
    d = ulp_distance(np.array([-big]), np.array([big]), "float64")[0]
    # 2 * (number of positive finite floats) = 2 * (0x7FEFFFFFFFFFFFFF)
    assert d == float(2 * 0x7FEFFFFFFFFFFFFF)


def test_negative_control_raw_bit_difference_is_wrong_across_zero():
    """A comparator that subtracts raw bit patterns (no sign handling) would report a huge
    distance for -sub vs +sub; the ordered mapping reports 2.  Shows the zero-crossing test can fail."""
    sub = np.array([-5e-324, 5e-324])
    raw = abs(int(sub[0:1].view(np.uint64)[0]) - int(sub[1:2].view(np.uint64)[0]))
    assert raw > 2**62
    assert ulp_distance(sub[:1], sub[1:], "float64")[0] == 2
    assert np.all(np.diff(ordered_int(np.array([-1.0, -sub[1], 0.0, sub[1], 1.0]), "float64")) > 0)


def test_non_finite_classes_are_counted_separately():
    e = np.array([np.nan, np.inf, -np.inf, 1.0, np.nan, np.inf, 2.0, 3.0])
    a = np.array([np.nan, np.inf, -np.inf, np.nan, 0.0, -np.inf, np.inf, 3.0])
    c = compare_tensor("t", e, a, "float64")
    assert c.nan_mismatches == 2  # positions 3 and 4
    assert c.posinf_mismatches == 2  # positions 5 and 6
    assert c.neginf_mismatches == 1  # position 5
    assert c.mismatches == 4  # positions 3, 4, 5, 6 (matching NaN / inf classes are equal)
    assert c.max_abs == 0.0  # only position 7 has both finite, and it agrees


def test_statistics_and_worst_index_on_a_hand_made_array():
    e = np.array([[1.0, 2.0, 4.0], [0.0, -8.0, 10.0]])
    a = np.array([[1.0, 2.5, 4.0], [0.0, -8.0, 9.0]])
    c = compare_tensor("t", e, a, "float64", atol=0.6)
    assert c.max_abs == 1.0 and c.worst_index == (1, 2)
    assert c.worst_expected == 10.0 and c.worst_actual == 9.0
    assert c.median_abs == 0.0
    assert c.max_rel == 0.25 and c.median_rel == 0.0
    assert c.mismatches == 1  # only |9 - 10| > 0.6
    relative = compare_tensor("t", e, a, "float64", atol=0.0, rtol=0.11)
    assert relative.mismatches == 1  # |2.5 - 2| = 0.5 > 0.22; |9 - 10| = 1 <= 1.1
    assert c.ref_max_abs == 10.0 and c.max_rel_normwise == 0.1
    exact = compare_tensor("t", e, a, "float64")
    assert exact.mismatches == 2


def test_relative_error_against_exact_zero_is_infinite():
    c = compare_tensor("t", np.array([0.0, 1.0]), np.array([1e-300, 1.0]), "float64")
    assert c.max_rel == math.inf
    assert c.to_dict()["max_rel"] == "inf"


def test_shape_mismatch_is_reported_not_raised():
    c = compare_tensor("t", np.zeros((2, 3)), np.zeros((3, 2)), "float32")
    assert c.error is not None and "shape" in c.error and c.mismatches == 6


def test_identical_arrays_compare_equal_in_every_dtype():
    rng = np.random.default_rng(0)
    for dtype in (*IEEE, "bfloat16"):
        x = rng.standard_normal(100).astype(numpy_dtype(dtype)).astype(np.float64)
        c = compare_tensor("t", x, x, dtype, atol=0.0)
        assert c.max_abs == 0.0 and c.max_ulp == 0 and c.mismatches == 0


# ----------------------------------------------------------------------------- properties
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

WIDTHS = {"float64": 64, "float32": 32, "float16": 16}


@given(dtype=st.sampled_from(sorted(WIDTHS)), data=st.data(), k=st.integers(0, 60))
def test_property_nextafter_shift_is_k_ulps(dtype, data, k):
    fi = ml_dtypes.finfo(numpy_dtype(dtype))
    big = float(fi.max)
    x = data.draw(st.floats(-big, big, width=WIDTHS[dtype], allow_nan=False, allow_infinity=False))
    arr = np.array([x]).astype(numpy_dtype(dtype))
    direction = 1 if x < 0 else -1  # move towards zero: never overflows
    y = shift(arr, direction * k, dtype)
    assert ulp_distance(arr.astype(np.float64), y.astype(np.float64), dtype)[0] == k


@given(i=st.integers(60, len(BF16) - 61), k=st.integers(-60, 60))
def test_property_bfloat16_table_shift_is_k_ulps(i, k):
    assert ulp_distance(BF16[i : i + 1], BF16[i + k : i + k + 1], "bfloat16")[0] == abs(k)
