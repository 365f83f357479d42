"""Acceptance item 4: A0 is symmetric PSD; A_LM >= eps_adj entrywise; G_LM = a @ A_P + b_a is a matrix
product (a backend using the elementwise product is caught)."""

from __future__ import annotations

import numpy as np
from core_support import config_from_shape, model_params, rel_diff, shapes, token_ids
from hypothesis import given
from hypothesis import strategies as st

from pldr_ref import forward
from pldr_ref.activations import silu
from pldr_ref.constants import EPS_ADJ
from pldr_ref.density import density_operator
from pldr_ref.plga import energy_curvature, metric_tensor, potential_tensor

SCALES = st.sampled_from([1e-3, 1.0, 30.0, 1e3])


def _rand(seed: int, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return scale * np.random.default_rng(seed).standard_normal(shape)


def assert_symmetric_psd(a0: np.ndarray) -> None:
    """Bitwise symmetric, and eigenvalues >= -(d_k * 8 eps) * max|A0|."""
    np.testing.assert_array_equal(a0, np.swapaxes(a0, -1, -2))
    eig = np.linalg.eigvalsh(a0)
    tol = a0.shape[-1] * 8 * np.finfo(np.float64).eps * max(float(np.max(np.abs(a0))), 1e-300)
    assert np.all(eig >= -tol), eig.min()


@given(seq=st.integers(1, 9), d_k=st.sampled_from([2, 4, 8, 64]), heads=st.integers(1, 3), scale=SCALES,
       seed=st.integers(0, 999))
def test_density_operator_is_symmetric_psd(seq: int, d_k: int, heads: int, scale: float, seed: int) -> None:
    q = _rand(seed, (2, heads, seq, d_k), scale)
    a0 = density_operator(q)
    assert a0.shape == (2, heads, d_k, d_k)
    assert_symmetric_psd(a0)
    # it is the sum of outer products (no 1/S, no masking)
    ref = np.einsum("bhsi,bhsj->bhij", q, q)
    assert rel_diff(a0, ref) <= 1e-14


def test_negative_control_non_gram_is_not_symmetric_psd() -> None:
    q, k = _rand(0, (1, 1, 5, 4)), _rand(1, (1, 1, 5, 4))
    cross = np.swapaxes(q, -1, -2) @ k  # Q^T K: what a backend mixing up q and k would build
    try:
        assert_symmetric_psd(cross)
    except AssertionError:
        return
    raise AssertionError("a non-symmetric matrix passed the PSD check")


@given(d_k=st.sampled_from([2, 4, 8]), heads=st.integers(1, 3), scale=st.sampled_from([1e-3, 1.0, 50.0, 1e4]),
       seed=st.integers(0, 999))
def test_metric_tensor_is_at_least_eps_adj(d_k: int, heads: int, scale: float, seed: int) -> None:
    """A_LM = iSwiGLU(W A + b) + eps_adj >= eps_adj even where W A + b -> -inf (iSwiGLU -> +0)."""
    a = _rand(seed, (2, heads, d_k, d_k), scale)
    w, b = _rand(seed + 1, (heads, d_k, d_k)), _rand(seed + 2, (heads, d_k, d_k), scale)
    a_lm = metric_tensor(a, w, b, EPS_ADJ)
    assert np.all(a_lm >= EPS_ADJ)
    assert np.all(np.isfinite(a_lm))


def test_metric_tensor_saturates_at_eps_adj() -> None:
    a = np.full((1, 1, 2, 2), -1e4)
    a_lm = metric_tensor(a, np.eye(2)[None], np.zeros((1, 2, 2)), EPS_ADJ)
    assert np.all(a_lm == EPS_ADJ)


def test_negative_control_silu_instead_of_iswiglu_goes_below_eps_adj() -> None:
    a = _rand(0, (1, 1, 4, 4), 3.0)
    broken = silu(a) + EPS_ADJ  # SwiGLU gate without the extra factor z: negative for z < 0
    assert np.any(broken < EPS_ADJ)


def assert_matrix_product_g(a_p: np.ndarray, a: np.ndarray, b_a: np.ndarray, g: np.ndarray) -> None:
    """G[b,h] == a[h] @ A_P[b,h] + b_a[h] (einsum, independent of the code under test)."""
    ref = np.einsum("hij,bhjk->bhik", a, a_p) + b_a[None]
    assert rel_diff(g, ref) <= 1e-13, rel_diff(g, ref)


@given(d_k=st.sampled_from([2, 4, 8]), heads=st.integers(1, 3), seed=st.integers(0, 999))
def test_energy_curvature_is_a_matrix_product(d_k: int, heads: int, seed: int) -> None:
    a_p = np.abs(_rand(seed, (2, heads, d_k, d_k))) + 0.1
    a, b_a = _rand(seed + 1, (heads, d_k, d_k)), _rand(seed + 2, (heads, d_k, d_k))
    assert_matrix_product_g(a_p, a, b_a, energy_curvature(a_p, a, b_a))


def test_negative_control_elementwise_energy_curvature_is_caught() -> None:
    a_p = np.abs(_rand(0, (1, 2, 4, 4))) + 0.1
    a, b_a = _rand(1, (2, 4, 4)), _rand(2, (2, 4, 4))
    elementwise = a[None] * a_p + b_a[None]  # the bug to catch
    try:
        assert_matrix_product_g(a_p, a, b_a, elementwise)
    except AssertionError:
        return
    raise AssertionError("the elementwise product was not detected")


@given(shape=shapes(), seed=st.integers(0, 2**16))
def test_model_trace_plga_chain(shape: dict, seed: int) -> None:
    """In a full forward: A0 symmetric PSD, A_LM >= eps_adj, A_P = A_LM^P, G = a @ A_P + b_a (every layer)."""
    cfg = config_from_shape(shape)
    params = model_params(cfg, seed)
    out = forward(params, token_ids(cfg, shape["batch"], shape["seq"], seed))
    for layer, t in enumerate(out.layers):
        lp = params.layer(layer).plga
        assert_symmetric_psd(t.A0)
        assert np.all(cfg.eps_adj <= t.A_LM)
        np.testing.assert_array_equal(t.A_P, potential_tensor(t.A_LM, lp.P))
        assert rel_diff(t.A_P, t.A_LM ** lp.P[None]) <= 1e-15
        assert_matrix_product_g(t.A_P, lp.a, lp.b_a, t.G_LM)
        w_a = np.einsum("hij,bhjk->bhik", lp.W, t.A) + lp.b[None]
        assert rel_diff(t.A_LM, w_a * w_a / (1 + np.exp(-w_a)) + cfg.eps_adj) <= 1e-13
