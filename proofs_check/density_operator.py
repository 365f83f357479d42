"""DensityOperator.lean: D = Q^T Q is symmetric PSD with rank(D) = rank(Q) <= min(S, d_k) (paper Prop. 3.6),
on ``pldr_ref.density.density_operator`` (also with rows of the real G_LM tensors)."""

from __future__ import annotations

import numpy as np
import sympy
from hypothesis import strategies as st

from pldr_ref.density import density_operator
from pldr_ref.plga import metric_tensor
from proofs_check.profiles import expect_counterexample, expect_violation, record_margin, record_ratio, run_property
from proofs_check.real_data import real_g_lm
from proofs_check.registry import HYPOTHESIS, IDENTITY, REAL_G_LM, SYMPY, THEOREM, Check
from proofs_check.rounding import SUBNORMAL_FLOOR, gamma
from proofs_check.strategies import matrices, seeds


def gram(q: np.ndarray) -> np.ndarray:
    """D = Q^T Q of one head through the real operator: q [S, d_k] -> [d_k, d_k]."""
    return density_operator(np.asarray(q, dtype=np.float64)[None, None])[0, 0]


def psd_slack(q: np.ndarray) -> float:
    """Rounding slack on eigenvalues of fl(Q^T Q): (gamma(S) + 4 gamma(d_k)) ||Q||_2^2."""
    s, dk = q.shape
    return (gamma(s) + 4 * gamma(dk)) * np.linalg.norm(q, 2) ** 2


def is_symm_run(profile: str) -> str:
    """D == D^T bitwise, and D == Q^T Q exactly for small-integer Q (every partial sum is exact)."""

    def prop(q: np.ndarray) -> None:
        d = gram(q)
        assert np.array_equal(d, d.T)
        qi = np.round(q)
        assert np.array_equal(gram(qi), qi.T @ qi)

    return run_property(profile, prop, matrices(1, 8, 1, 8, -20.0, 20.0))


def is_symm_control(profile: str) -> str:
    """Two different factors (Q^T K, the 'same query' hypothesis dropped) give a non-symmetric matrix."""

    def prop(q: np.ndarray, seed: int) -> None:
        k = np.random.default_rng(seed).normal(size=q.shape)
        m = q.T @ k
        assert np.array_equal(m, m.T), "Q^T K not symmetric"

    return expect_counterexample(profile, prop, matrices(2, 6, 2, 6, -5.0, 5.0), seeds())


def psd_run(profile: str) -> str:
    """min eig(D) >= -(gamma(S) + 4 gamma(d_k)) ||Q||_2^2.  Sharpness: min eig(D) / ||Q||_2^2 (natural scale: the
    largest eigenvalue; ~0, or a rounding-level negative within the slack, when S < d_k makes D singular)."""

    def prop(q: np.ndarray) -> None:
        lam = np.linalg.eigvalsh(gram(q)).min()
        assert lam >= -psd_slack(q)
        scale = np.linalg.norm(q, 2) ** 2
        if scale > 0:
            record_margin(lam, scale)

    return run_property(profile, prop, matrices(1, 10, 1, 8, -10.0, 10.0))


def psd_control(profile: str) -> str:
    """Symmetrized Q^T K (same-factor hypothesis dropped) has a clearly negative eigenvalue."""

    def prop(q: np.ndarray, seed: int) -> None:
        k = np.random.default_rng(seed).normal(size=q.shape)
        m = 0.5 * (q.T @ k + k.T @ q)
        assert np.linalg.eigvalsh(m).min() >= -psd_slack(q) * (1 + np.linalg.norm(k, 2)), "negative eigenvalue"

    return expect_counterexample(profile, prop, matrices(2, 6, 2, 6, -5.0, 5.0), seeds())


def quadratic_run(profile: str) -> str:
    """v^T D v = ||Q v||^2 >= 0 within 2 gamma(S + d_k) ||Q||_F^2 ||v||^2.  Sharpness: min v^T D v /
    (||Q||_F^2 ||v||^2) (natural scale: the Cauchy-Schwarz bound of the form)."""

    def prop(q: np.ndarray, seed: int) -> None:
        v = np.random.default_rng(seed).normal(size=q.shape[1])
        lhs = v @ gram(q) @ v
        rhs = np.sum((q @ v) ** 2)
        # + a subnormal floor: tiny Q squares into the subnormal range, where only absolute bounds hold
        tol = 2 * gamma(sum(q.shape)) * np.sum(q**2) * np.sum(v**2) + SUBNORMAL_FLOOR * q.size * (1 + np.sum(v**2))
        assert abs(lhs - rhs) <= tol and lhs >= -tol
        scale = np.sum(q**2) * np.sum(v**2)
        if scale > 0:
            record_margin(lhs, scale)

    return run_property(profile, prop, matrices(1, 10, 1, 8, -10.0, 10.0), seeds())


def quadratic_control(profile: str) -> str:
    """v^T (Q^T K) v takes negative values once the factors differ."""

    def prop(q: np.ndarray, seed: int) -> None:
        rng = np.random.default_rng(seed)
        k, v = rng.normal(size=q.shape), rng.normal(size=q.shape[1])
        assert v @ (q.T @ k) @ v >= 0.0, "negative quadratic form"

    return expect_counterexample(profile, prop, matrices(2, 6, 2, 6, -5.0, 5.0), seeds())


def rank_run(profile: str) -> str:
    """rank(D) = rank(Q): exact with sympy on integer Q; float on Q = A B with inner dimension r."""

    def prop(q: np.ndarray, seed: int, r: int) -> None:
        qi = np.round(q).astype(int)
        mq = sympy.Matrix(qi.tolist())
        assert (mq.T * mq).rank() == mq.rank()
        rng = np.random.default_rng(seed)
        s, dk = q.shape
        r = min(r, s, dk)
        # well-conditioned factors (singular values in [1, 2]) so that rank r is numerically unambiguous
        left = np.linalg.qr(rng.normal(size=(s, r)))[0] * rng.uniform(1.0, 2.0, size=r)
        qf = left @ np.linalg.qr(rng.normal(size=(dk, r)))[0].T
        d = gram(qf)
        # zero singular values come out at ~u sigma_1 (Q) and ~u sigma_1^2 (D): relative threshold 1e-8 for both
        assert np.linalg.matrix_rank(qf, tol=1e-8 * np.linalg.norm(qf, 2)) == r
        assert np.linalg.matrix_rank(d, tol=1e-8 * np.linalg.norm(d, 2)) == r

    return run_property(profile, prop, matrices(1, 6, 1, 6, -3.0, 3.0), seeds(), st.integers(1, 6))


def rank_control(profile: str) -> str:
    """rank(Q^T K) can differ from rank(Q) (K = 0 gives 0): the identity needs the same factor."""
    q = np.eye(4)
    return expect_violation(np.linalg.matrix_rank(q.T @ np.zeros((4, 4))) != np.linalg.matrix_rank(q), "rank 0 vs 4")


def rank_le_run(profile: str) -> str:
    """rank(D) <= min(S, d_k), with Q = the first S rows of every real G_LM head (S in 1, 8, 32; d_k = 64).
    Sharpness: max numerical rank / min(S, d_k)."""
    g = real_g_lm()
    counts = []
    for s in (1, 8, 32):
        q = g[:, :, :s, :]  # [5, 14, S, 64]
        d = density_operator(q)
        sv = np.linalg.svd(d, compute_uv=False)
        tol = 64 * gamma(s + 64) * sv[..., :1]
        ranks = np.sum(sv > tol, axis=-1)
        assert np.all(ranks <= min(s, 64)), (s, ranks.max())
        record_ratio(ranks.max(), min(s, 64))
        counts.append(int(ranks.max()))
    return f"70 real heads; max numerical rank for S = 1, 8, 32: {counts}"


def rank_le_control(profile: str) -> str:
    """The rank bound does not survive the entrywise nonlinearity: A_LM = iSwiGLU(W D + b) + eps is full rank."""
    rng = np.random.default_rng(0)
    q = real_g_lm()[0, 0, :8, :]
    d = gram(q)
    d = d / np.abs(d).max()
    a_lm = metric_tensor(d[None, None], rng.normal(size=(1, 64, 64)), rng.normal(size=(1, 64, 64)))[0, 0]
    rank = int(np.linalg.matrix_rank(a_lm))
    return expect_violation(rank > 8, f"rank(A_LM) = {rank} > S = 8")


_EX = ("pldr_ref.density.density_operator",)
CHECKS = (
    Check(
        name="density_isSymm",
        statement=IDENTITY,
        lean=("density_isSymm",),
        paper="Prop. 3.6",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=is_symm_run,
        negative_control=is_symm_control,
        slack="none (bitwise)",
        dropped="both factors are the same Q",
        note="density_operator symmetrizes (X + X^T)/2, so float symmetry is bitwise",
    ),
    Check(
        name="density_posSemidef",
        lean=("density_posSemidef",),
        paper="Prop. 3.6",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=psd_run,
        negative_control=psd_control,
        slack="(gamma(S) + 4 gamma(d_k)) ||Q||_2^2 on eigenvalues",
        dropped="same factor",
    ),
    Check(
        name="density_quadratic_nonneg",
        lean=("density_quadratic_nonneg",),
        paper="Prop. 3.6",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=quadratic_run,
        negative_control=quadratic_control,
        slack="2 gamma(S+d_k) ||Q||_F^2 ||v||^2 + S d_k (1 + ||v||^2) subnormal",
        dropped="same factor",
        note="entries below 1e-154 square into the subnormal range: absolute floor",
    ),
    Check(
        name="density_rank",
        statement=IDENTITY,
        lean=("density_rank",),
        paper="Prop. 3.6",
        label=THEOREM,
        method=(SYMPY, HYPOTHESIS),
        exercises=_EX,
        run=rank_run,
        negative_control=rank_control,
        slack="exact (sympy); float relative threshold 1e-8 sigma_1 for Q and D",
        dropped="same factor",
    ),
    Check(
        name="density_rank_le",
        lean=("density_rank_le",),
        paper="Prop. 3.6",
        label=THEOREM,
        method=(REAL_G_LM,),
        exercises=_EX,
        run=rank_le_run,
        negative_control=rank_le_control,
        slack="numerical rank threshold 64 gamma(S+64) sigma_1",
        dropped="D is a Gram of S rows (entrywise map)",
    ),
)
