"""RankOne.lean: the learned singularity condition A = 1 alpha^T (paper Prop. 3.9 (i)-(iii)).

The row clone is produced by the real row map: ``pldr_ref.metric_learner.metric_learner`` applied to a
density operator with identical rows returns identical rows (Prop. 3.11), whose common row is alpha.
"""

from __future__ import annotations

import functools

import numpy as np
import sympy
from hypothesis import strategies as st

from pldr_ref.metric_learner import metric_learner
from pldr_ref.norms import layer_norm
from proofs_check.models import tiny_params
from proofs_check.profiles import expect_counterexample, expect_violation, run_property
from proofs_check.real_data import real_g_lm
from proofs_check.registry import HYPOTHESIS, REAL_G_LM, SYMPY, THEOREM, Check
from proofs_check.rounding import UNIT_ROUNDOFF, gamma
from proofs_check.strategies import reals, vectors


@functools.lru_cache(maxsize=1)
def _layer():
    params = tiny_params(0)
    return params.layer(0), params.config


def learned_row_clone(r: np.ndarray) -> np.ndarray:
    """A = metric_learner(1 r^T) for the tiny model's layer 0 (d_k = 8): every row is phi(r)."""
    lp, c = _layer()
    a0 = np.broadcast_to(np.asarray(r, dtype=np.float64), (c.d_k, c.d_k))[None, None]
    return metric_learner(a0, lp, c.metric_learner, c.eps_ln)[0, 0]


def row_clone(alpha: np.ndarray) -> np.ndarray:
    """1 alpha^T (d = len(alpha))."""
    alpha = np.asarray(alpha, dtype=np.float64)
    return np.ones((alpha.size, 1)) * alpha[None, :]


def apply_run(profile: str) -> str:
    """(1 alpha^T)_ij = alpha_j: the metric learner maps identical rows to identical rows phi(r) (rel 8u)."""

    def prop(r: np.ndarray) -> None:
        a = learned_row_clone(r)
        alpha = a[0]
        assert np.all(np.abs(a - alpha[None, :]) <= 8 * UNIT_ROUNDOFF * np.abs(alpha).max())
        assert np.array_equal(row_clone(alpha), np.broadcast_to(alpha, a.shape))

    return run_property(profile, prop, vectors(8, 8, -10.0, 10.0))


def apply_control(profile: str) -> str:
    """A map that is not row-wise (LayerNorm over columns) breaks the identical-row structure."""

    def prop(r: np.ndarray) -> None:
        a0 = np.broadcast_to(r, (8, 8)) + np.arange(8.0)[:, None]
        out = layer_norm(a0.T, np.ones(8), np.zeros(8)).T
        assert np.allclose(out, out[0][None, :]), "rows differ"

    return expect_counterexample(profile, prop, vectors(8, 8, -10.0, 10.0))


def rank_le_one_run(profile: str) -> str:
    """rank(1 alpha^T) <= 1: sympy exactly (rational alpha) and numpy on learned row clones."""

    def prop(r: np.ndarray, ints: list[int]) -> None:
        assert np.linalg.matrix_rank(learned_row_clone(r)) <= 1
        m = sympy.ones(len(ints), 1) * sympy.Matrix([[sympy.Rational(i, 7) for i in ints]])
        assert m.rank() <= 1

    return run_property(profile, prop, vectors(8, 8, -10.0, 10.0), st.lists(st.integers(-9, 9), min_size=1, max_size=6))


def perturbed_control(profile: str) -> str:
    """1 alpha^T + Delta (row-clone structure dropped) has full rank."""
    rng = np.random.default_rng(1)
    m = row_clone(rng.normal(size=6)) + 1e-3 * rng.normal(size=(6, 6))
    return expect_violation(np.linalg.matrix_rank(m) > 1, f"rank {np.linalg.matrix_rank(m)}")


def eq_zero_iff_run(profile: str) -> str:
    """1 alpha^T = 0 <=> alpha = 0 (exact float: the entries are copies of alpha)."""

    def prop(alpha: np.ndarray, zero: bool) -> None:
        if zero:
            alpha = np.zeros_like(alpha)
        assert (not np.any(row_clone(alpha))) == (not np.any(alpha))

    return run_property(profile, prop, vectors(1, 8, -10.0, 10.0), st.booleans())


def eq_zero_iff_control(profile: str) -> str:
    """Replacing the all-ones factor by a vector u with u = 0 gives u alpha^T = 0 with alpha != 0."""
    alpha = np.array([1.0, 2.0])
    return expect_violation(not np.any(np.zeros((2, 1)) * alpha), "0 alpha^T = 0 although alpha != 0")


def rank_eq_one_run(profile: str) -> str:
    """alpha != 0 => rank 1: sympy exact on rationals; numpy default tolerance for ||alpha||_inf >= 1e-3."""

    def prop(alpha: np.ndarray, ints: list[int]) -> None:
        if np.abs(alpha).max() >= 1e-3:
            assert np.linalg.matrix_rank(row_clone(alpha)) == 1
        if any(ints):
            m = sympy.ones(len(ints), 1) * sympy.Matrix([[sympy.Rational(i, 3) for i in ints]])
            assert m.rank() == 1

    detail = run_property(profile, prop, vectors(1, 8, -10.0, 10.0),
                          st.lists(st.integers(-9, 9), min_size=1, max_size=6))
    # alpha = the mean row of every real G_LM head (d_k = 64)
    alphas = real_g_lm().mean(axis=-2).reshape(-1, 64)
    ranks = [int(np.linalg.matrix_rank(row_clone(a))) for a in alphas]
    assert ranks == [1] * len(alphas)
    return detail + "; 70 real G_LM mean rows give rank 1"


def rank_eq_one_control(profile: str) -> str:
    """Dropping alpha != 0: rank(1 0^T) = 0."""
    return expect_violation(np.linalg.matrix_rank(row_clone(np.zeros(4))) == 0, "rank 0 at alpha = 0")


def det_run(profile: str) -> str:
    """d >= 2 => det(1 alpha^T) = 0: sympy exactly; numpy |det| <= d u ||alpha||_2^d (not always 0.0)."""

    def prop(alpha: np.ndarray, ints: list[int]) -> None:
        d = alpha.size
        assert abs(np.linalg.det(row_clone(alpha))) <= d * UNIT_ROUNDOFF * np.linalg.norm(alpha) ** d
        m = sympy.ones(len(ints), 1) * sympy.Matrix([[sympy.Rational(i, 5) for i in ints]])
        assert m.det() == 0

    return run_property(profile, prop, vectors(2, 8, -10.0, 10.0),
                        st.lists(st.integers(-9, 9), min_size=2, max_size=6))


def det_control(profile: str) -> str:
    """Dropping d >= 2: det(1 alpha^T) = alpha_0 for d = 1."""
    return expect_violation(np.linalg.det(row_clone(np.array([3.0]))) != 0.0, "det = 3 at d = 1")


def mulvec_one_run(profile: str) -> str:
    """(1 alpha^T) 1 = s 1, s = sum alpha, within gamma(d) ||alpha||_1 (learned row clones and random alpha)."""

    def prop(r: np.ndarray, alpha: np.ndarray) -> None:
        for a in (learned_row_clone(r), row_clone(alpha)):
            s = a[0].sum()
            assert np.all(np.abs(a @ np.ones(a.shape[0]) - s) <= 2 * gamma(a.shape[0]) * np.abs(a[0]).sum())

    return run_property(profile, prop, vectors(8, 8, -10.0, 10.0), vectors(1, 8, -10.0, 10.0))


def mulvec_one_control(profile: str) -> str:
    """A vector other than 1 is not an eigenvector: (1 alpha^T) e_0 = alpha_0 1 != s e_0."""
    alpha = np.array([1.0, 2.0, 3.0])
    e0 = np.array([1.0, 0.0, 0.0])
    return expect_violation(not np.allclose(row_clone(alpha) @ e0, alpha.sum() * e0), "e_0 not an eigenvector")


def _pow_tol(alpha: np.ndarray, k: int) -> float:
    """(k+1) gamma(d) ||alpha||_1^k ||alpha||_inf, with a floor for the rounding of s itself."""
    a1 = np.abs(alpha).sum()
    return 4 * (k + 1) * gamma(alpha.size + 1) * a1**k * np.abs(alpha).max()


def mul_self_run(profile: str) -> str:
    """(1 alpha^T)^2 = s (1 alpha^T) within 4 * 2 gamma(d+1) ||alpha||_1 ||alpha||_inf."""

    def prop(r: np.ndarray) -> None:
        a = learned_row_clone(r)
        assert np.all(np.abs(a @ a - a[0].sum() * a) <= _pow_tol(a[0], 1))

    return run_property(profile, prop, vectors(8, 8, -10.0, 10.0))


def pow_run(profile: str) -> str:
    """(1 alpha^T)^(k+1) = s^k (1 alpha^T), k = 0..6, within 4 (k+1) gamma(d+1) ||alpha||_1^k ||alpha||_inf."""

    def prop(alpha: np.ndarray, k: int) -> None:
        a = row_clone(alpha)
        assert np.all(np.abs(np.linalg.matrix_power(a, k + 1) - alpha.sum() ** k * a) <= _pow_tol(alpha, k))

    return run_property(profile, prop, vectors(1, 8, -3.0, 3.0), st.integers(0, 6))


def perturbed_pow_control(profile: str) -> str:
    """1 alpha^T + Delta violates A^2 = s A."""
    rng = np.random.default_rng(2)
    alpha = rng.normal(size=5)
    m = row_clone(alpha) + 0.1 * rng.normal(size=(5, 5))
    return expect_violation(np.abs(m @ m - alpha.sum() * m).max() > _pow_tol(alpha, 1), "A^2 != s A")


def sq_zero_run(profile: str) -> str:
    """sum alpha = 0 => (1 alpha^T)^2 = 0: exact for integer alpha; float (alpha - mean) within
    2 gamma(d) ||alpha||_1 ||alpha||_inf + |fl(s)| ||alpha||_inf."""

    def prop(ints: list[int], alpha: np.ndarray) -> None:
        ai = np.array(ints, dtype=np.float64)
        ai = np.append(ai, -ai.sum())
        a = row_clone(ai)
        assert not np.any(a @ a)
        af = alpha - alpha.mean()
        b = row_clone(af)
        tol = 2 * gamma(af.size) * np.abs(af).sum() * np.abs(af).max() + abs(af.sum()) * np.abs(af).max()
        assert np.abs(b @ b).max() <= tol

    return run_property(profile, prop, st.lists(st.integers(-50, 50), min_size=1, max_size=7),
                        vectors(1, 8, -10.0, 10.0))


def sq_zero_control(profile: str) -> str:
    """Dropping s = 0: (1 alpha^T)^2 = s A != 0."""

    def prop(alpha: np.ndarray, c: float) -> None:
        a = row_clone(alpha - alpha.mean() + c / alpha.size)
        assert np.abs(a @ a).max() <= 1e-12 * (1 + np.abs(a).max() ** 2), "A^2 != 0"

    return expect_counterexample(profile, prop, vectors(1, 8, -10.0, 10.0), reals(1.0, 10.0))


_EX = ("pldr_ref.metric_learner.metric_learner",)
CHECKS = (
    Check("rowClone_apply", ("rowClone_apply",), "Prop. 3.9 / Prop. 3.11", THEOREM, (HYPOTHESIS,),
          (*_EX, "pldr_ref.norms.layer_norm"), apply_run, apply_control, slack="8u max|alpha| between rows",
          dropped="the row map acts row-wise"),
    Check("rowClone_rank_le_one", ("rowClone_rank_le_one",), "Prop. 3.9(i)", THEOREM, (HYPOTHESIS, SYMPY), _EX,
          rank_le_one_run, perturbed_control, slack="numpy default rank tolerance; sympy exact",
          dropped="row-clone structure (1 alpha^T + Delta)"),
    Check("rowClone_eq_zero_iff", ("rowClone_eq_zero_iff",), "Prop. 3.9(i)", THEOREM, (HYPOTHESIS,), _EX,
          eq_zero_iff_run, eq_zero_iff_control, slack="none (exact)", dropped="the all-ones left factor"),
    Check("rowClone_rank_eq_one", ("rowClone_rank_eq_one",), "Prop. 3.9(i)", THEOREM, (HYPOTHESIS, SYMPY, REAL_G_LM),
          _EX,
          rank_eq_one_run, rank_eq_one_control, slack="numpy default rank tolerance, ||alpha||_inf >= 1e-3",
          dropped="alpha != 0"),
    Check("rowClone_det_eq_zero", ("rowClone_det_eq_zero",), "Prop. 3.9(i)", THEOREM, (HYPOTHESIS, SYMPY), _EX,
          det_run, det_control, slack="|det| <= d u ||alpha||_2^d", dropped="d >= 2",
          note="np.linalg.det of a rank-one matrix is not always exactly 0.0; sympy gives exact 0"),
    Check("rowClone_mulVec_one", ("rowClone_mulVec_one",), "Prop. 3.9(ii)", THEOREM, (HYPOTHESIS,), _EX,
          mulvec_one_run, mulvec_one_control, slack="2 gamma(d) ||alpha||_1", dropped="the vector is 1"),
    Check("rowClone_mul_self", ("rowClone_mul_self",), "Prop. 3.9(ii)", THEOREM, (HYPOTHESIS,), _EX, mul_self_run,
          perturbed_pow_control, slack="8 gamma(d+1) ||alpha||_1 ||alpha||_inf", dropped="row-clone structure"),
    Check("rowClone_pow", ("rowClone_pow",), "Prop. 3.9(iii)", THEOREM, (HYPOTHESIS,), _EX,
          pow_run, perturbed_pow_control, slack="4(k+1) gamma(d+1) ||alpha||_1^k ||alpha||_inf",
          dropped="row-clone structure"),
    Check("rowClone_sq_eq_zero", ("rowClone_sq_eq_zero",), "Prop. 3.9(ii)", THEOREM, (HYPOTHESIS,), _EX,
          sq_zero_run, sq_zero_control, slack="exact for integers; 2 gamma(d)||a||_1||a||_inf + |fl(s)| ||a||_inf",
          dropped="sum alpha = 0"),
)
