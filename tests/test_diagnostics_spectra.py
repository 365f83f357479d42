"""Numerical-rank rule, cross-head and row identity, and the random-init rank behaviour of A0 and A."""

from __future__ import annotations

import numpy as np
import pytest

from pldr_ref import PLDRConfig, forward, init_params, perturb_params
from pldr_ref.diagnostics.spectra import (
    EPS_FLOAT32,
    RANK_FACTOR,
    cross_head_identity,
    numerical_rank,
    row_identity_ratio,
    singular_values,
)


def test_rank_rule_threshold_is_64_eps_float32_sigma_1() -> None:
    tol = RANK_FACTOR * EPS_FLOAT32
    assert tol == 64 * 2.0**-23
    s = np.array([[2.0, 2.0 * tol * 1.01, 2.0 * tol * 0.99, 0.0]])
    assert numerical_rank(s).tolist() == [2]
    # negative control: a looser factor counts the third value too
    assert numerical_rank(s, factor=32).tolist() == [3]


def _ids(config: PLDRConfig, n: int, length: int) -> np.ndarray:
    return np.random.Generator(np.random.PCG64(5)).integers(1, config.vocab_size, (n, length))


@pytest.mark.parametrize("length", [3, 5])
def test_density_operator_rank_is_min_of_rows_and_d_k(length: int) -> None:
    """A0 = Q~^T Q~ of S < d_k rows has rank S; with S >= d_k it is full (negative control)."""
    c = PLDRConfig.preset("tiny")
    p = init_params(c, seed=0)
    a0 = np.stack([t.A0 for t in forward(p, _ids(c, 2, length)).layers])
    assert np.all(numerical_rank(singular_values(a0)) == length)
    a0_full = np.stack([t.A0 for t in forward(p, _ids(c, 2, 12)).layers])
    assert np.all(numerical_rank(singular_values(a0_full)) == c.d_k)


def test_random_init_A_has_rank_d_k_minus_one() -> None:
    """At init every LayerNorm has beta = 0, so the last residual unit's LayerNorm makes each row of A
    mean-zero: A 1 = 0 and rank A = d_k - 1 exactly (numerically: one singular value at round-off).
    Negative control: with perturbed LayerNorm shifts (beta != 0) A is full rank."""
    c = PLDRConfig.preset("tiny")
    p = init_params(c, seed=0)
    a = np.stack([t.A for t in forward(p, _ids(c, 3, 12)).layers])
    assert np.max(np.abs(a.sum(axis=-1))) <= 1e-12 * np.max(np.abs(a))
    assert np.all(numerical_rank(singular_values(a)) == c.d_k - 1)
    a_pert = np.stack([t.A for t in forward(perturb_params(p, seed=1), _ids(c, 3, 12)).layers])
    assert np.all(numerical_rank(singular_values(a_pert)) == c.d_k)


def test_cross_head_and_row_identity() -> None:
    rng = np.random.Generator(np.random.PCG64(6))
    one = rng.standard_normal((8, 8))
    same = np.broadcast_to(one, (2, 3, 8, 8))
    assert np.all(cross_head_identity(same) == 0.0)
    assert np.all(cross_head_identity(rng.standard_normal((2, 3, 8, 8))) > 0.5)  # negative control
    rows = np.broadcast_to(rng.standard_normal(8), (8, 8))
    assert row_identity_ratio(rows) <= 1e-30
    r = row_identity_ratio(rng.standard_normal((100, 8, 8)))
    assert np.all((r > 0.5) & (r <= 1.0))  # negative control: independent rows


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        singular_values(np.full((2, 2), np.inf))
