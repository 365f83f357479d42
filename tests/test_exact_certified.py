"""Certified mode: interval enclosures contain the exact value, decide its float64 rounding, and are < 1e-40 wide."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pldr_ref.exact import certified, exact_op, mpf_exact, ops

WIDTH = mpmath.mpf("1e-40")


def check(enc: certified.Enclosure, exact_value: mpmath.mpf, rounded: float, *, relative: bool = False) -> None:
    assert enc.contains(exact_value)
    lo64, hi64 = enc.float64_bounds()
    assert lo64 <= rounded <= hi64  # the float64-rounded exact value lies in the outward-rounded enclosure
    assert enc.certified_float64() in (None, rounded)
    scale = abs(exact_value) if relative and exact_value != 0 else 1
    assert enc.width <= WIDTH * scale


@given(st.floats(min_value=-800.0, max_value=60.0))
def test_iswiglu_enclosure(z: float) -> None:
    enc = certified.iswiglu(z)
    with mpmath.workdps(80):
        exact_value = ops.iswiglu(mpf_exact(z))
    check(enc, exact_value, float(exact_op("iswiglu", np.array([z]))[0]))


@example(3.0, 5.405237027002654e-56)  # mpmath's iv.exp(5.9e-56) is [1, 1]: _enclosure must widen it
@given(st.floats(min_value=1e-9, max_value=4.0), st.floats(min_value=-4.0, max_value=4.0))
def test_power_law_enclosure(base: float, power: float) -> None:
    enc = certified.power_law(base, power)
    with mpmath.workdps(80):
        exact_value = ops.hadamard_power(mpf_exact(base), mpf_exact(power))
    got = exact_op("potential_tensor", np.full((1, 1, 1, 1), base), np.full((1, 1, 1), power))[0, 0, 0, 0]
    check(enc, exact_value, float(got), relative=True)
    if 0.25 <= base <= 4 and abs(power) <= 1:
        assert enc.width < WIDTH  # absolute width for moderate values


@pytest.mark.parametrize("row", [[1e3, -1e3, 0.5, 700.0], [0.1, 0.2, 0.3], [709.0, 710.0, -745.0, 0.0], [5.0]])
def test_softmax_row_enclosure(row: list[float]) -> None:
    encs = certified.softmax_row(row)
    with mpmath.workdps(80):
        exact_values = ops.softmax_row([mpf_exact(v) for v in row])
    got = exact_op("masked_softmax", np.array(row))
    for enc, ev, g in zip(encs, exact_values, got, strict=True):
        check(enc, ev, float(g))
        assert enc.certified_float64() == g


def test_layer_norm_row_enclosure() -> None:
    rng = np.random.Generator(np.random.PCG64(7))
    for x in (rng.standard_normal(8), 0.3 + 1e-10 * rng.standard_normal(8), 1e8 + np.arange(8) * np.spacing(1e8)):
        g, b = rng.uniform(0.5, 2, 8), rng.uniform(-1, 1, 8)
        encs = certified.layer_norm_row(list(x), list(g), list(b), 1e-6)
        with mpmath.workdps(80):
            exact_values = ops.layer_norm([mpf_exact(v) for v in x], [mpf_exact(v) for v in g],
                                          [mpf_exact(v) for v in b], mpf_exact(1e-6))
        got = exact_op("layer_norm", x, g, b, 1e-6)
        for enc, ev, gv in zip(encs, exact_values, got, strict=True):
            check(enc, ev, float(gv))
            assert enc.certified_float64() == gv


def test_negative_controls() -> None:
    enc = certified.iswiglu(-3.0)
    with mpmath.workdps(80):
        exact_value = ops.iswiglu(mpf_exact(-3.0))
        assert not enc.contains(exact_value * (1 + mpmath.mpf("1e-30")))  # a perturbed value is excluded
        assert not enc.contains(ops.silu(mpf_exact(-3.0)))  # the wrong op is excluded
    # a float64 approximation is (almost always) outside an enclosure of width 1e-40
    assert not enc.contains(float(exact_op("iswiglu", np.array([-3.0]))[0]) * (1 + 2**-52))
    # low precision gives wide enclosures, which the width check rejects
    assert certified.iswiglu(-3.0, dps=10).width > WIDTH
    with pytest.raises(ValueError):
        certified.power_law(0.0, 1.0)
    with pytest.raises(ValueError):
        certified.softmax_row([1.0, float("inf")])
    with pytest.raises(ValueError):
        certified.layer_norm_row([1.0], [1.0, 2.0], [0.0])
