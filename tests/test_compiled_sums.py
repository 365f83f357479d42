"""The compiled summation loops of the calibration (``pldr_ref.harness.policy.compiled_sums``, the [fast] extra) are the
NumPy definition of the emulated arithmetic bit for bit: every member's products (float32 accumulators with float64
or float32 products, 16-bit accumulators with the range-aware rounding), tiles, orders, zero padding, broadcast
batches, weights passed transposed, and the values that take the slow paths (zeros of both signs, subnormal
products, values outside a 16-bit format's range, infinities, NaN).  Negative controls: the same comparison catches
a loop summing in the other order or in float64.  Needs the [fast] extra (skips without it, fails under
PLDR_REF_REQUIRE_ENGINES=1).
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import require
from hypothesis import given
from hypothesis import strategies as st

require("fast")

from pldr_ref.env_vars import EnvVarError  # noqa: E402
from pldr_ref.fixtures.baselines import storage_round_bits  # noqa: E402
from pldr_ref.format_rounding import float_format  # noqa: E402
from pldr_ref.harness.policy import compiled_sums  # noqa: E402
from pldr_ref.harness.policy.arithmetic import Arithmetic, EmulatedOps, round_to_dtype  # noqa: E402
from pldr_ref.harness.policy.ensemble import members  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")
#: One member of each summation path: float32 accumulator (float64 or float32 products by dtype), 16-bit
#: accumulator, reverse order with tiles, TF32 products (float32 only), one pass.
PATHS = (Arithmetic("t16", tile=16), Arithmetic("storage-t16", accumulate="storage", tile=16),
         Arithmetic("reverse-t5", order="reverse", tile=5), Arithmetic("storage-reverse", accumulate="storage",
                                                                          order="reverse"),
         Arithmetic("tf32-t4", tf32=True, tile=4), Arithmetic("seq"))


def same_values(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal element by element, zeros with their sign, NaN where NaN (a NaN's payload is no value)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
        return False
    finite = ~np.isnan(x)
    return bool(np.array_equal(np.signbit(x[finite]), np.signbit(y[finite])))


def both_ways(run):
    """(the compiled result, the NumPy definition's result) of ``run()``."""
    with np.errstate(all="ignore"):
        compiled = run()
        with compiled_sums.numpy_only():
            numpy = run()
    return compiled, numpy


def read_only(x: np.ndarray) -> np.ndarray:
    """A read-only owner of a copy of ``x`` (what a parameter set's weights are)."""
    w = np.array(x, dtype=np.float64)
    w.flags.writeable = False
    return w


def special(draw, shape, rng: np.random.Generator) -> np.ndarray:
    """Normals at a drawn scale with some entries replaced by the values that take the slow paths."""
    x = rng.standard_normal(shape) * 10.0 ** draw(st.integers(-8, 8))
    if x.size and draw(st.booleans()):
        picks = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -3e-42, 7e4, 3e38, 1e300])
        idx = rng.integers(0, x.size, max(1, x.size // 7))
        x.reshape(-1)[idx] = rng.choice(picks, idx.size)
    return x


@st.composite
def products(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch = draw(st.sampled_from([(), (1,), (2,), (2, 3), (1, 3)]))
    b_batch = draw(st.sampled_from([(), batch, (1,) * len(batch)] + ([(2, 1)] if batch == (2, 3) else [])))
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 40)), draw(st.integers(1, 6))
    x = special(draw, (*batch, m, k), rng)
    y = special(draw, (*b_batch, k, n), rng)
    return x, y


@given(case=products(), dtype=st.sampled_from(DTYPES), path=st.sampled_from(PATHS))
def test_every_summation_path_is_the_numpy_definition_bit_for_bit(case, dtype, path):
    x, y = case
    ops = EmulatedOps(path, dtype)
    compiled, numpy = both_ways(lambda: ops.matmul(x, y))
    assert same_values(compiled, numpy)


@given(case=products(), dtype=st.sampled_from(DTYPES), path=st.sampled_from(PATHS))
def test_a_weight_passed_transposed_is_summed_the_same(case, dtype, path):
    """``linear`` passes a read-only weight transposed: the compiled loops read a copy made once (or sum the
    transposed problem); the values are the definition's."""
    x, y = case
    w = read_only(np.swapaxes(y.reshape(-1, *y.shape[-2:])[0], -1, -2))  # [n, k]
    ops = EmulatedOps(path, dtype)
    compiled, numpy = both_ways(lambda: ops.linear(x, w))
    assert same_values(compiled, numpy)
    again, _ = both_ways(lambda: ops.linear(x, w))  # the kept copy gives the same values
    assert same_values(again, compiled)


def test_a_transposed_writeable_operand_with_many_rows_is_summed_as_the_transposed_problem():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, compiled_sums.SWAP_ROWS + 3, 70))
    y = np.swapaxes(rng.standard_normal((2, 9, 70)), -1, -2)  # contiguous along K, writeable: no kept copy
    for dtype in DTYPES:
        for path in PATHS:
            compiled, numpy = both_ways(lambda path=path, dtype=dtype: EmulatedOps(path, dtype).matmul(x, y))
            assert same_values(compiled, numpy), (dtype, path.name)


def test_every_ensemble_member_runs_a_linear_map_the_same():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 3, 6, 50))
    w = read_only(rng.standard_normal((21, 50)))
    for dtype in DTYPES:
        for m in members(dtype):
            if not m.internal:
                continue
            ops = EmulatedOps(m, dtype)
            for run in (lambda ops=ops: ops.linear(x, w), lambda ops=ops: ops.row_sum(x),
                        lambda ops=ops: ops.density_operator(x)):
                compiled, numpy = both_ways(run)
                assert same_values(compiled, numpy), (dtype, m.name)


def _traps(precision: int) -> np.ndarray:
    """Ties, values just off ties, both ends of the normal ranges of the 16-bit formats and of float32, zeros,
    infinities, NaN, and normals over the whole float64 range."""
    rng = np.random.default_rng(precision)
    parts = [rng.standard_normal(2000) * 10.0 ** rng.integers(-320, 308, 2000), [0.0, -0.0, np.inf, -np.inf, np.nan]]
    for name in ("bfloat16", "float16", "float32"):
        f = float_format(name)
        m = rng.integers(2 ** (f.precision - 1), 2**f.precision, 300).astype(np.float64)
        tie = (m + 0.5) * 2.0 ** (rng.integers(f.emin, f.emax, 300) - f.precision + 1)
        edge = np.concatenate([f.smallest_normal * (1 + 2.0 ** -np.arange(1, 53)), f.max * (1 + 2.0 ** -np.arange(1,
                                                                                                                53))])
        parts += [tie, tie * (1 + 2.0**-40), tie * (1 - 2.0**-40), edge, edge * (1 - 2.0**-52)]
    x = np.concatenate(parts)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_compiled_16_bit_rounding_is_storage_round_bits(dtype):
    fmt = float_format(dtype)
    x = np.ascontiguousarray(_traps(fmt.precision))
    want = storage_round_bits(x, fmt, np.empty_like(x))
    got = np.empty_like(x)
    kernels = compiled_sums._kernels()
    kernels._round16_into(x, x.view(np.uint64), got.view(np.uint64), compiled_sums._format_constants(fmt))
    assert np.array_equal(got.view(np.uint64)[~np.isnan(x)], want.view(np.uint64)[~np.isnan(x)])
    assert np.isnan(got[np.isnan(x)]).all()
    # negative control: float32's rounding constants give other values on the same inputs
    other = np.empty_like(x)
    kernels._round16_into(x, x.view(np.uint64), other.view(np.uint64),
                                compiled_sums._format_constants(float_format("bfloat16" if dtype == "float16"
                                                                             else "float16")))
    assert not same_values(other, want)


def test_the_comparison_catches_a_loop_in_another_order_or_in_float64():
    """Negative controls: the order-sensitive sums below differ from the definition when summed in reverse
    order or exactly in float64, so the bit-for-bit comparisons above can fail."""
    rng = np.random.default_rng(11)
    x = round_to_dtype(rng.standard_normal((4, 64)) * np.logspace(0, 6, 64), "float32")
    y = round_to_dtype(rng.standard_normal((64, 8)), "float32")
    for dtype, path in (("float32", Arithmetic("seq")), ("bfloat16", Arithmetic("storage", accumulate="storage"))):
        ops = EmulatedOps(path, dtype)
        compiled, numpy = both_ways(lambda ops=ops: ops.matmul(x, y))
        assert same_values(compiled, numpy)
        fmt = None if path.accumulate == "float32" else float_format(dtype)
        wrong_order = compiled_sums.product_sums(x, y, (), 64, True, path.accumulate == "float32", fmt, None)
        assert not same_values(wrong_order, numpy)
        float64 = x @ y
        assert not same_values(float64, numpy)


def test_the_switch_turns_the_compiled_loops_off(monkeypatch):
    x, y = np.ones((2, 3)), np.ones((3, 2))
    assert compiled_sums.enabled()
    with compiled_sums.numpy_only():
        assert not compiled_sums.enabled()
        assert compiled_sums.product_sums(x, y, (), 3, False, True, None, None) is None
    assert compiled_sums.enabled()
    monkeypatch.setenv(compiled_sums.ENV, "0")
    assert not compiled_sums.enabled()
    assert compiled_sums.product_sums(x, y, (), 3, False, True, None, None) is None
    monkeypatch.setenv(compiled_sums.ENV, "yes")
    with pytest.raises(EnvVarError, match=compiled_sums.ENV):
        compiled_sums.enabled()
