"""Commutant projection, residual and fraction, the RoPE eigenbasis, and ``g_lm_report`` on the bundled G_LM:
structural facts (residual in [0, 1], residual^2 + fraction = 1, 0 on the commutant, exactly 1 on
diag(1, -1, ...)), each with a negative control; the eigenbasis and commutant are checked against rotations
built from ``pldr_ref.rope.apply_rope``."""

from __future__ import annotations

import numpy as np
import pytest

from pldr_ref.diagnostics.commutant import (
    commutant_fraction,
    commutant_projection,
    commutant_residual,
    plane_indices,
    rope_eigenbasis,
)
from pldr_ref.diagnostics.g_lm import check_g_lm, g_lm_report, load_g_lm, perron_frobenius
from pldr_ref.resources import trained_g_lm
from pldr_ref.rope import apply_rope

LAYOUTS = ("interleaved", "half")


def rotation(p: float, d_k: int, base: float, layout: str) -> np.ndarray:
    """R_p with R_p x = apply_rope(x, p): column i is the rotated unit vector e_i."""
    return apply_rope(np.eye(d_k), np.full(d_k, p), layout=layout, base=base).T


def commutant_element(d_k: int, layout: str, rng: np.random.Generator) -> np.ndarray:
    c, s = rng.standard_normal(d_k // 2), rng.standard_normal(d_k // 2)
    p1, p2 = plane_indices(d_k, layout)
    g = np.zeros((d_k, d_k))
    g[p1, p1] = c
    g[p2, p2] = c
    g[p2, p1] = s
    g[p1, p2] = -s
    return g


@pytest.mark.parametrize("layout", LAYOUTS)
def test_commutant_elements_commute_with_every_rotation_and_have_residual_zero(layout: str) -> None:
    rng = np.random.Generator(np.random.PCG64(1))
    g = commutant_element(16, layout, rng)
    for p in (1.0, 7.0, 123.0):
        r = rotation(p, 16, 10000.0, layout)
        assert np.max(np.abs(r @ g - g @ r)) <= 1e-13 * np.max(np.abs(g))
    assert commutant_residual(g, layout) == 0.0
    assert commutant_fraction(g, layout) == 1.0
    # negative control: the other layout's commutant is a different subspace
    other = "half" if layout == "interleaved" else "interleaved"
    assert commutant_residual(g, other) > 0.1


def test_residual_is_exactly_one_on_alternating_diagonal() -> None:
    g = np.diag(np.tile([1.0, -1.0], 32))
    assert commutant_residual(g) == 1.0
    assert commutant_fraction(g) == 0.0
    # negative control: diag(1, 1, ...) = I is in the commutant
    assert commutant_residual(np.eye(64)) == 0.0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_residual_range_pythagoras_and_orthogonal_projection(layout: str) -> None:
    rng = np.random.Generator(np.random.PCG64(2))
    g = rng.standard_normal((50, 8, 8)) * rng.uniform(1e-3, 1e3, (50, 1, 1))
    res, frac = commutant_residual(g, layout), commutant_fraction(g, layout)
    assert np.all((res >= 0) & (res <= 1)) and np.all((frac >= 0) & (frac <= 1))
    assert np.max(np.abs(res**2 + frac - 1.0)) <= 1e-14
    pg = commutant_projection(g, layout)
    assert np.max(np.abs(commutant_projection(pg, layout) - pg)) <= 1e-15 * np.max(np.abs(g))  # idempotent
    h = rng.standard_normal((50, 8, 8))
    inner = np.sum((g - pg) * commutant_projection(h, layout), axis=(-2, -1))
    assert np.max(np.abs(inner)) <= 1e-12 * np.max(np.abs(g)) * np.max(np.abs(h)) * 64  # G - Pi G is orthogonal
    # negative control: a projection that keeps only the diagonal is not orthogonal to the rotation part
    diag_only = np.zeros_like(g)
    idx = np.arange(8)
    diag_only[:, idx, idx] = g[:, idx, idx]
    assert np.max(np.abs(np.sum((g - diag_only) * commutant_projection(h, layout), axis=(-2, -1)))) > 1e-3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_eigenbasis_diagonalises_the_real_rotations(layout: str) -> None:
    u, omega = rope_eigenbasis(16, 10000.0, layout)
    assert np.max(np.abs(u.conj().T @ u - np.eye(16))) <= 1e-15
    for p in (1.0, 5.0, 300.0):
        r = rotation(p, 16, 10000.0, layout)
        assert np.max(np.abs(r @ u - u * np.exp(1j * omega * p))) <= 1e-12
    # negative control: the conjugate frequencies do not diagonalise it
    r = rotation(5.0, 16, 10000.0, layout)
    assert np.max(np.abs(r @ u - u * np.exp(-1j * omega * 5.0))) > 0.1


def test_trained_g_lm_residual_matches_the_eigenbasis_definition() -> None:
    """Independent route: off-frequency energy of U^* G U (unitary U) over the total, on the bundled G_LM."""
    g = trained_g_lm()
    rep = g_lm_report(g)
    u, omega = rope_eigenbasis(64, 10000.0)
    gc = u.conj().T @ g @ u
    off = np.where(omega[:, None] == omega[None, :], 0.0, gc)
    want = np.linalg.norm(off, axis=(-2, -1)) / np.linalg.norm(gc, axis=(-2, -1))
    got = np.array(rep["commutant_residual"])
    assert got.shape == (5, 14)
    assert np.max(np.abs(got - want)) <= 1e-13
    assert np.allclose(rep["commutant_residual_median_by_layer"], np.median(want, axis=1), rtol=1e-12, atol=0)
    # negative control: the residual of the transposed-plane (half) layout is a different number
    assert np.max(np.abs(np.array(g_lm_report(g, layout="half")["commutant_residual"]) - want)) > 1e-3


def test_perron_frobenius_applicability() -> None:
    rng = np.random.Generator(np.random.PCG64(4))
    pos = rng.uniform(0.1, 1.0, (1, 2, 6, 6))
    rep = perron_frobenius(pos)
    assert rep["n_positive"] == 2 and rep["dominant_real_positive_where_applicable"]
    root = np.max(np.abs(np.linalg.eigvals(pos)), axis=-1)
    assert np.allclose(rep["perron_root"], root, rtol=1e-12)
    neg = pos.copy()
    neg[0, 1, 2, 3] = -0.5  # negative control: one negative entry removes applicability
    rep = perron_frobenius(neg)
    assert rep["applicable"] == [[True, False]] and np.isnan(rep["perron_root"][0][1])


def test_g_lm_inputs(tmp_path) -> None:
    g, source = load_g_lm(None)
    assert g.shape == (5, 14, 64, 64) and "bundled" in source
    np.savez(tmp_path / "g.npz", G_LM=g[:2, :3])
    g2, _ = load_g_lm(tmp_path / "g.npz")
    assert g2.shape == (2, 3, 64, 64)
    np.savez(tmp_path / "bad.npz", other=g[:1])
    with pytest.raises(ValueError, match="no array 'G_LM'"):
        load_g_lm(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError):
        load_g_lm(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match=r"\[L, H, d_k, d_k\]"):
        check_g_lm(np.zeros((2, 3, 5, 5)))
    with pytest.raises(ValueError, match="finite"):
        check_g_lm(np.full((1, 1, 2, 2), np.nan))
