"""Per-op oracles: exact tier vs an independent Decimal oracle (bitwise) and vs the float64 tier (a few ULPs),
with the hard edges of issue 4 and a negative control for each property."""

from __future__ import annotations

import decimal
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pldr_ref.activations import iswiglu, sigmoid, silu
from pldr_ref.attention import apply_mask, attention_scores, masked_softmax, mix_values
from pldr_ref.config import PLDRConfig
from pldr_ref.density import cumulative_density_operator, density_operator
from pldr_ref.exact import exact_op, ulp_distance
from pldr_ref.glu import glu
from pldr_ref.linear_map import linear
from pldr_ref.metric_learner import metric_learner_v500, metric_learner_v900, residual_unit
from pldr_ref.norms import layer_norm
from pldr_ref.params import init_params, perturb_params
from pldr_ref.plga import energy_curvature, metric_tensor, potential_tensor
from pldr_ref.rope import apply_rope

CTX = decimal.Context(prec=80, Emin=-999999, Emax=999999)


def dec(x: float) -> Decimal:
    return Decimal(float(x))  # exact


def dec_float(v: Decimal) -> float:
    return float(v)  # Decimal -> shortest-correct string -> correctly rounded float


def oracle_iswiglu(z: float) -> float:
    d = dec(z)
    return dec_float(CTX.divide(CTX.multiply(d, d), CTX.add(1, CTX.exp(-d))))


def oracle_power(a: float, p: float) -> float:
    return dec_float(CTX.exp(CTX.multiply(dec(p), CTX.ln(dec(a)))))


def oracle_softmax(row: list[float]) -> list[float]:
    with decimal.localcontext(CTX):
        return _oracle_softmax(row)


def _oracle_softmax(row: list[float]) -> list[float]:
    finite = [dec(x) for x in row if np.isfinite(x)]
    m = max(finite)
    e = [CTX.exp(CTX.subtract(dec(x), m)) if np.isfinite(x) else Decimal(0) for x in row]
    z = sum(e, Decimal(0))
    return [dec_float(CTX.divide(v, z)) for v in e]


def oracle_layer_norm(x: list[float], g: list[float], b: list[float], eps: float) -> list[float]:
    with decimal.localcontext(CTX):  # every +, -, sum at 80 digits
        return _oracle_layer_norm(x, g, b, eps)


def _oracle_layer_norm(x: list[float], g: list[float], b: list[float], eps: float) -> list[float]:
    d = [dec(v) for v in x]
    n = Decimal(len(d))
    mu = CTX.divide(sum(d, Decimal(0)), n)
    var = CTX.divide(sum((CTX.multiply(v - mu, v - mu) for v in d), Decimal(0)), n)
    inv = CTX.divide(1, CTX.sqrt(CTX.add(var, dec(eps))))
    return [dec_float(CTX.add(CTX.multiply(CTX.multiply(v - mu, inv), dec(gg)), dec(bb)))
            for v, gg, bb in zip(d, g, b, strict=True)]


def assert_ulps(a: np.ndarray, b: np.ndarray, n: float) -> None:
    d = ulp_distance(np.asarray(a), np.asarray(b))
    assert d.max() <= n, f"max ULP distance {d.max()} > {n}"


RNG = np.random.Generator(np.random.PCG64(12345))


# ------------------------------------------------------------------ iSwiGLU / sigmoid / silu
def test_iswiglu_matches_decimal_oracle_including_sigmoid_tail() -> None:
    z = np.concatenate([RNG.uniform(-5, 5, 20), -np.array([30.0, 100.0, 500.0, 700.0, 740.0, 745.5, 750.0, 760.0])])
    got = exact_op("iswiglu", z)
    want = np.array([oracle_iswiglu(v) for v in z])
    assert np.array_equal(got, want)
    # the true value at z = -750 is a positive subnormal; the float64 tier underflows to 0 there
    assert got[-2] > 0 and iswiglu(np.array([-750.0]))[0] == 0.0


def test_iswiglu_negative_control_silu_is_not_iswiglu() -> None:
    z = np.array([-30.0, -2.5, 3.0])
    assert not np.array_equal(exact_op("silu", z), np.array([oracle_iswiglu(v) for v in z]))


def test_elementwise_ops_within_ulps_of_float64_tier_well_conditioned() -> None:
    z = RNG.uniform(-20, 20, 200)
    assert_ulps(exact_op("sigmoid", z), sigmoid(z), 2)
    far = z[np.abs(z) > 1.5]  # away from the zero of silu / iswiglu (relative error blows up there)
    assert_ulps(exact_op("silu", far), silu(far), 4)
    assert_ulps(exact_op("iswiglu", far), iswiglu(far), 4)
    # negative control: the float64 iSwiGLU tail below -745 is not within a few ULPs
    assert ulp_distance(exact_op("iswiglu", np.array([-750.0])), iswiglu(np.array([-750.0])))[0] > 4


# ------------------------------------------------------------------ power law near eps_adj
def test_power_law_near_eps_adj_with_negative_powers() -> None:
    h, dk = 1, 4
    a_lm = 1e-9 * (1 + RNG.uniform(0, 1e-3, (1, h, dk, dk)))
    p = -RNG.uniform(0.5, 3.0, (h, dk, dk))
    got = exact_op("potential_tensor", a_lm, p)
    want = np.array([oracle_power(a, q) for a, q in zip(a_lm.ravel(), np.broadcast_to(p, a_lm.shape).ravel(),
                                                        strict=True)]).reshape(a_lm.shape)
    assert np.array_equal(got, want)
    assert_ulps(got, potential_tensor(a_lm, p), 4)
    # negative control: P and -P are told apart
    assert not np.array_equal(exact_op("potential_tensor", a_lm, -p), want)


def test_power_law_overflow_rounds_to_inf() -> None:
    a = np.full((1, 1, 2, 2), 1e-9)
    p = np.full((1, 2, 2), -40.0)  # 1e360 > max float64
    assert np.all(np.isinf(exact_op("potential_tensor", a, p)))
    with np.errstate(over="ignore"):
        assert np.all(np.isinf(potential_tensor(a, p)))


# ------------------------------------------------------------------ softmax with huge and tiny scores
ROWS = [
    [1e3, -1e3, 0.0, 700.0],
    [709.0, 710.0, 711.0, -745.0],
    [1e-300, -1e-300, 0.0, 5e-324],
    [3.0, -np.inf, 2.0, -np.inf],
    [-1e9 + 1.0, 0.5, -1.7976931348623157e308, 0.25],
]


@pytest.mark.parametrize("row", ROWS)
def test_softmax_huge_and_tiny_scores(row: list[float]) -> None:
    got = exact_op("masked_softmax", np.array(row))
    assert np.array_equal(got, np.array(oracle_softmax(row)))
    assert_ulps(got, masked_softmax(np.array(row)), 4)


def test_softmax_all_masked_row_and_negative_control() -> None:
    assert np.array_equal(exact_op("masked_softmax", np.full(3, -np.inf)), np.zeros(3))
    # negative control: dropping the max subtraction's effect is invisible, but a reversed row is not
    row = np.array(ROWS[1])
    assert not np.array_equal(exact_op("masked_softmax", row[::-1]), np.array(oracle_softmax(ROWS[1])))


# ------------------------------------------------------------------ LayerNorm, variance far below eps
def test_layer_norm_rows_with_variance_far_below_eps() -> None:
    n = 8
    g, b = RNG.uniform(0.5, 1.5, n), RNG.uniform(-0.1, 0.1, n)
    rows = [0.3 + 1e-9 * RNG.standard_normal(n), 1e-12 * RNG.standard_normal(n), np.full(n, 7.0),
            RNG.standard_normal(n)]
    for x in rows:
        got = exact_op("layer_norm", x, g, b, 1e-6)
        assert np.array_equal(got, np.array(oracle_layer_norm(list(x), list(g), list(b), 1e-6)))
        # forward-error bound of the float64 LN: the mean's rounding, amplified by 1/sqrt(var + eps)
        u = np.finfo(float).eps
        bound = 8 * u * (np.max(np.abs(x)) / np.sqrt(np.var(x) + 1e-6) * np.max(np.abs(g)) + np.max(np.abs(got)))
        assert np.max(np.abs(got - layer_norm(x, g, b, 1e-6))) <= bound
    # negative control: eps matters for these rows (eps = 0 changes the result completely)
    tiny = rows[1]
    assert np.max(np.abs(exact_op("layer_norm", tiny, g, b, 1e-6) - exact_op("layer_norm", tiny, g, b, 0.0))) > 0.1


def test_layer_norm_cancellation_exposes_float64_error() -> None:
    # huge mean, spread of a few ULPs: the exact tier is right (oracle), the float64 tier is not within a few ULPs
    x = 1e8 + np.arange(8) * np.spacing(1e8)
    g, b = np.ones(8), np.zeros(8)
    got = exact_op("layer_norm", x, g, b, 0.0)
    assert np.array_equal(got, np.array(oracle_layer_norm(list(x), list(g), list(b), 0.0)))
    assert np.array_equal(got, -got[::-1])  # exact symmetry of this row
    # negative control: the float64 tier loses most digits to the cancelled mean
    assert ulp_distance(got, layer_norm(x, g, b, 0.0)).max() > 1000


# ------------------------------------------------------------------ RoPE
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_exact_positions_up_to_4095(layout: str) -> None:
    x = RNG.standard_normal((1, 48, 8))
    pos = np.concatenate([np.arange(0, 4096, 128), np.arange(4080, 4096)])
    got = exact_op("apply_rope", x, pos, layout=layout, precision="exact")
    f64 = apply_rope(x, pos, layout=layout, precision="exact")
    # float64 rounds p * omega: an angle error up to ~4095 ulp(1) ~ 1e-12 relative to |x|
    assert np.max(np.abs(got - f64)) <= 1e-12 * np.max(np.abs(x))
    # rotation preserves each pair's norm (independent of the float64 tier)
    pairs = [(0, 1), (2, 3)] if layout == "interleaved" else [(0, 4), (1, 5)]
    for a, bb in pairs:
        norm2, want = got[..., a] ** 2 + got[..., bb] ** 2, x[..., a] ** 2 + x[..., bb] ** 2
        assert np.max(np.abs(norm2 - want)) <= 1e-14 * np.max(want)  # normwise
    # negative controls: the other layout and a shifted position are far away
    other = "half" if layout == "interleaved" else "interleaved"
    assert np.max(np.abs(exact_op("apply_rope", x, pos, layout=other) - got)) > 1e-3
    assert np.max(np.abs(exact_op("apply_rope", x, pos + 1, layout=layout) - got)) > 1e-3


def test_rope_float32_quirk_matches_float32_tier_up_to_4095() -> None:
    x = RNG.standard_normal((1, 4096, 8))
    pos = np.arange(4096)
    got = exact_op("apply_rope", x, pos, layout="interleaved", precision="float32")
    f64 = apply_rope(x, pos, layout="interleaved", precision="float32")
    assert np.array_equal(got, got.astype(np.float32).astype(np.float64))  # binary32 values
    # IEEE fixes everything but float32 cos/sin/pow; libm/SIMD kernels may differ by one float32 ulp
    assert np.max(np.abs(got - f64) / np.maximum(np.abs(got), 1e-30)) <= 2 * 2.0**-23
    assert np.mean(got == f64) >= 0.99
    # negative control: the float32 quirk is not the exact RoPE (the last 64 positions, where they differ most)
    exact = exact_op("apply_rope", x[:, -64:], pos[-64:], layout="interleaved", precision="exact")
    assert np.max(np.abs(exact - got[:, -64:])) > 1e-6


# ------------------------------------------------------------------ linear algebra stages
def tiny_params():
    c = PLDRConfig.preset("tiny", A_dff=6)
    return perturb_params(init_params(c, 3), 4)


def test_matrix_stages_within_ulps_of_float64_tier() -> None:
    p = tiny_params()
    lp = p.layer(0)
    q = RNG.standard_normal((1, 2, 5, 8))
    k = RNG.standard_normal((1, 2, 5, 8))
    v = RNG.standard_normal((1, 2, 5, 8))
    a0 = exact_op("density_operator", q)
    assert np.max(np.abs(a0 - density_operator(q))) <= 4 * np.finfo(float).eps * np.max(np.abs(a0))
    assert np.array_equal(a0, np.swapaxes(a0, -1, -2))
    c0 = exact_op("cumulative_density_operator", q)
    assert np.array_equal(c0[:, :, -1], a0)
    np.testing.assert_allclose(c0, cumulative_density_operator(q), rtol=0, atol=1e-14 * np.max(np.abs(c0)))
    a = exact_op("metric_learner_v500", a0, lp, 1e-6)
    np.testing.assert_allclose(a, metric_learner_v500(a0, lp, p.config), rtol=0, atol=1e-13)
    ru = exact_op("residual_unit", a0, lp.res_units[0], 1e-6)
    np.testing.assert_allclose(ru, residual_unit(a0, lp.res_units[0], p.config), rtol=0, atol=1e-13)
    W, b, P, aa, ba = lp.plga
    a_lm = exact_op("metric_tensor", a, W, b, 1e-9)
    # normwise: |A W + b| can sit near 0 after cancellation, where an elementwise relative bound is meaningless
    assert np.max(np.abs(a_lm - metric_tensor(a, W, b, 1e-9))) <= 1e-12 * np.max(np.abs(a_lm))
    a_p = exact_op("potential_tensor", a_lm, P)
    # elementwise relative on purpose: from the same A_LM, x ** P is within ~1 ulp relative at every magnitude
    np.testing.assert_allclose(a_p, potential_tensor(a_lm, P), rtol=1e-12)
    g = exact_op("energy_curvature", a_p, aa, ba)
    np.testing.assert_allclose(g, energy_curvature(a_p, aa, ba), rtol=0, atol=1e-12 * np.max(np.abs(g)))
    sc = exact_op("attention_scores", q, g, k)
    np.testing.assert_allclose(sc, attention_scores(q, g, k), rtol=0, atol=1e-12 * np.max(np.abs(sc)))
    mask = np.triu(np.ones((5, 5), dtype=bool), 1)[None, None]
    for mode in ("ideal", "additive", "finfo_min"):
        assert np.array_equal(exact_op("apply_mask", sc, mask, mode), apply_mask(sc, mask, mode))
    e = exact_op("masked_softmax", exact_op("apply_mask", sc, mask, "ideal"))
    np.testing.assert_allclose(exact_op("mix_values", e, v), mix_values(e, v), rtol=0, atol=1e-14)
    x = RNG.standard_normal((3, 16))
    assert_ulps(exact_op("linear", x, lp.wq, lp.bq)[np.abs(linear(x, lp.wq, lp.bq)) > 0.1],
                linear(x, lp.wq, lp.bq)[np.abs(linear(x, lp.wq, lp.bq)) > 0.1], 16)
    np.testing.assert_allclose(exact_op("glu", x, lp.ffn), glu(x, lp.ffn), rtol=0, atol=1e-13)
    # negative control: a transposed W (A W instead of W A) is detected
    assert not np.allclose(exact_op("metric_tensor", a, np.swapaxes(W, -1, -2), b, 1e-9), a_lm, rtol=1e-6)


def test_metric_learner_v900_op() -> None:
    c = PLDRConfig.preset("tiny", metric_learner="v900", A_dff_depth=6, A_dff=5)
    lp = perturb_params(init_params(c, 1), 2).layer(1)
    a0 = RNG.standard_normal((1, 2, 8, 8))
    got = exact_op("metric_learner_v900", a0, lp, 1e-6)
    np.testing.assert_allclose(got, metric_learner_v900(a0, lp, c), rtol=0, atol=1e-12)
    assert not np.allclose(got, exact_op("metric_learner_v900", a0[..., ::-1], lp, 1e-6), atol=1e-6)


@given(st.integers(1, 3), st.integers(1, 2), st.sampled_from([2, 4]))
def test_edge_shapes(s: int, h: int, dk: int) -> None:
    rng = np.random.Generator(np.random.PCG64(s * 100 + h * 10 + dk))
    q = rng.standard_normal((1, h, s, dk))
    got = exact_op("apply_rope", q, np.arange(s))
    np.testing.assert_allclose(got, apply_rope(q, np.arange(s)), rtol=0, atol=1e-14)
    g = rng.standard_normal((1, h, dk, dk))
    np.testing.assert_allclose(exact_op("attention_scores", got, g, got), attention_scores(got, g, got),
                               rtol=0, atol=1e-13)


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown exact op"):
        exact_op("nope", np.zeros(2))
    with pytest.raises(ValueError, match="positions"):
        exact_op("apply_rope", np.zeros((1, 3, 4)), np.arange(2))
    with pytest.raises(ValueError, match="must be > 0"):
        exact_op("potential_tensor", np.zeros((1, 1, 2, 2)), np.ones((1, 2, 2)))
    with pytest.raises(ValueError, match="rope_layout"):
        exact_op("apply_rope", np.zeros((1, 2, 4)), np.arange(2), layout="diagonal")
