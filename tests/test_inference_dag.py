"""DAG regulariser and training loss (issue 3 item 6; spec §9; paper §4.3, Remark 4.5)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given
from hypothesis import strategies as st
from inference_models import model, tokens

from pldr_ref import forward
from pldr_ref.dag import (
    PT_SAMPLE_DAG_COEFFS,
    TF_DAG_COEFFS,
    dag_loss,
    dag_terms,
    log_trace_expm,
    notears_h,
    training_loss,
)
from pldr_ref.inference.scoring import blockwise_cross_entropy

dims = st.integers(2, 8)
scales = st.sampled_from([1e-9, 1e-3, 0.3, 1.0, 10.0, 1e3])


def _upper(d: int, scale: float, seed: int) -> np.ndarray:
    return np.triu(np.random.default_rng(seed).standard_normal((d, d)) * scale, 1)


@given(d=dims, scale=scales, seed=st.integers(0, 10_000))
def test_h_is_exactly_zero_for_strictly_upper_triangular(d, scale, seed):
    m = _upper(d, scale, seed)
    assert notears_h(m) == 0.0 and dag_loss(m) == 0.0
    # negative control: one back edge closes a cycle and h becomes positive
    m2 = m.copy()
    m2[d - 1, 0] = scale
    m2[0, d - 1] = m2[0, d - 1] if m2[0, d - 1] != 0 else scale
    assert notears_h(m2) > 0.0


@given(d=dims, eps=st.floats(1e-9, 2.0), seed=st.integers(0, 10_000))
def test_positivity_obstructs_acyclicity(d, eps, seed):
    """Entrywise M >= eps gives h(M) >= tr(M o M) >= d eps^2 > 0 (Remark 4.5; Lean trace_exp_ge_of_diag_bound)."""
    m = eps + np.random.default_rng(seed).uniform(0, 2 * eps, (d, d))
    h = float(notears_h(m))
    assert h > 0.0
    assert h >= d * eps * eps * (1 - 1e-12)
    assert h >= float(np.trace(m * m)) * (1 - 1e-12)


def test_h_at_the_architectural_floor_matches_mpmath():
    """At eps = 1e-9, tr(expm(N)) - d rounds to 0 in float64; the series keeps it (mpmath oracle)."""
    m = np.full((3, 3), 1e-9)
    m[0, 1] = 2e-9
    mpmath.mp.dps = 60
    n = mpmath.matrix([[mpmath.mpf(float(x)) ** 2 for x in row] for row in m])
    exact = float(sum(mpmath.expm(n)[i, i] for i in range(3)) - 3)
    assert abs(float(notears_h(m)) - exact) <= 1e-14 * exact
    assert abs(float(dag_loss(m)) - math.log1p(exact / 3)) <= 1e-14 * math.log1p(exact / 3)
    # negative control: the naive formula underflows to 0
    assert float(np.trace(scipy.linalg.expm(m * m))) - 3 == 0.0


@given(d=dims, scale=st.sampled_from([0.05, 0.3, 0.7, 1.5, 3.0]), seed=st.integers(0, 10_000))
def test_loss_equals_log1p_h_over_d_and_the_naive_formula(d, scale, seed):
    m = np.random.default_rng(seed).standard_normal((d, d)) * scale
    loss = float(dag_loss(m))
    h = float(notears_h(m))
    naive = abs(math.log(float(np.trace(scipy.linalg.expm(m * m))) / d))
    assert abs(loss - math.log1p(h / d)) <= 1e-12 * max(loss, 1e-300)
    assert abs(loss - naive) <= 1e-10 * max(naive, 1e-300) + 1e-15


def test_known_values():
    assert float(dag_loss(np.eye(4))) == pytest.approx(1.0, rel=1e-15)  # tr e^I / 4 = e
    assert float(dag_loss(40 * np.ones((4, 4)))) == pytest.approx(4 * 1600 - math.log(4), rel=1e-15)


@pytest.mark.parametrize("c", [1e3, 3e3])
def test_no_overflow_for_entries_of_order_1e3(c):
    d = 5
    rng = np.random.default_rng(0)
    m = c * np.ones((d, d))
    # rank one: eigenvalues of M o M are d c^2 and 0, so D = d c^2 + log1p((d-1) e^{-d c^2}) - log d
    assert float(dag_loss(m)) == pytest.approx(d * c * c - math.log(d), rel=1e-13)
    noisy = m * rng.uniform(0.5, 1.5, (d, d))
    assert np.isfinite(dag_loss(noisy)) and np.isfinite(log_trace_expm(noisy))
    assert float(notears_h(noisy)) == math.inf  # h itself truly exceeds float64
    # negative control: the direct formula overflows
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite(np.log(np.trace(scipy.linalg.expm(noisy * noisy)) / d))


def test_batched_blocks_mix_regimes():
    blocks = np.stack([0.1 * np.ones((3, 3)), 50 * np.ones((3, 3)), np.triu(np.ones((3, 3)), 1)])
    out = dag_loss(blocks)
    for i in range(3):
        assert out[i] == dag_loss(blocks[i])
    assert out[2] == 0.0


def test_bad_input():
    with pytest.raises(ValueError, match="square"):
        dag_loss(np.ones((2, 3)))
    with pytest.raises(ValueError, match="finite"):
        notears_h(np.array([[np.nan, 0], [0, 0]]))


# ------------------------------------------------------------------ training loss
def test_training_loss_is_ce_plus_weighted_dag_terms():
    p = model("tiny")
    ids = tokens(2, 8, 64)
    out = forward(p, ids[:, :-1])
    ce = blockwise_cross_entropy(p, ids).mean
    tf = training_loss(p, ids)
    expect = {
        "A_LM": float(np.mean(dag_loss(np.stack([t.A_LM for t in out.layers])))),
        "A_P": float(np.mean(dag_loss(np.stack([t.A_P for t in out.layers])))),
        "G_LM": float(np.mean(dag_loss(np.stack([t.G_LM for t in out.layers])))),
    }
    assert tf.cross_entropy == ce and tf.dag == expect
    want = ce + sum(c * expect[k] for k, c in zip(("A_LM", "A_P", "G_LM"), TF_DAG_COEFFS, strict=True))
    assert tf.total == pytest.approx(want, rel=1e-15)
    assert all(v > 0 for v in tf.dag.values())  # positive tensors are never acyclic
    pt = training_loss(p, ids, convention="pt", coefficients=PT_SAMPLE_DAG_COEFFS)
    assert pt.dag["A_P"] != tf.dag["A_P"]  # A_P rounded to float32, as PT-v510_dag does
    assert pt.dag == {**dag_terms(out, a_p_float32=True)}
    only_g = training_loss(p, ids, convention="pt", coefficients=(0.0, 0.0, 0.1))
    assert set(only_g.coefficients) == {"G_LM"}
    assert only_g.total == pytest.approx(ce + 0.1 * expect["G_LM"], rel=1e-15)
    # negative control: a different coefficient changes the total
    assert training_loss(p, ids, coefficients=(1e-3, 5e-3, 6e-3)).total != tf.total


def test_training_loss_errors():
    p = model("tiny")
    ids = tokens(1, 5, 64)
    with pytest.raises(ValueError, match="UnboundLocalError"):
        training_loss(p, ids, convention="pt", coefficients=(0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="explicit coefficients"):
        training_loss(p, ids, convention="pt")
    with pytest.raises(ValueError, match="convention"):
        training_loss(p, ids, convention="jax")
    with pytest.raises(ValueError, match="not computed"):
        training_loss(model("tiny", g_mode="identity"), ids)
