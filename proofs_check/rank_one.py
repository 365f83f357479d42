"""RankOne.lean: the learned singularity condition A = 1 alpha^T (paper Prop. 3.9 (i)-(iii)).

Every row clone here is produced by the real row map: ``pldr_ref.metric_learner.metric_learner`` applied to a
density operator with identical rows returns identical rows (Prop. 3.11), whose common row is alpha.  The
last residual unit's LayerNorm gain and shift are set by the property, so alpha = gain o u + shift covers the
cases the lemmas need: alpha = 0 (gain = shift = 0), sum alpha = 0 (gain = 1, shift = 0: u is centred) and
generic alpha.

Beyond Lean: the singular-value perturbation bound of 1 alpha^T + Delta (Prop. 3.9(iv)); exact sympy
identities: characteristic polynomial lambda^(d-1)(lambda - s) and A^k = s^(k-1) A for every d <= MAX_D.
"""

from __future__ import annotations

import functools

import numpy as np
import sympy
import sympy as sp
from hypothesis import strategies as st

from pldr_ref.metric_learner import metric_learner
from pldr_ref.params import NormParams
from proofs_check.models import tiny_params
from proofs_check.profiles import expect_counterexample, expect_violation, record_ratio, run_property
from proofs_check.real_data import REAL_D_K, real_g_lm
from proofs_check.registry import HYPOTHESIS, IDENTITY, REAL_G_LM, SYMPY, THEOREM, Check
from proofs_check.rounding import UNIT_ROUNDOFF, gamma
from proofs_check.strategies import MAX_D, seeds, vectors

D_K = 8  # d_k of the tiny model


@functools.lru_cache(maxsize=1)
def _layer():
    params = tiny_params(0)
    return params.layer(0), params.config


def learned_row_clone(r: np.ndarray, gain: np.ndarray | None = None, shift: np.ndarray | None = None) -> np.ndarray:
    """A = metric_learner(1 r^T) for the tiny model's layer 0 (d_k = 8), optionally with the last residual unit's
    LayerNorm gain / shift replaced: every row is alpha = phi(r)."""
    lp, c = _layer()
    if gain is not None or shift is not None:
        last = lp.res_units[-1]
        norm = NormParams(last.norm.gamma if gain is None else np.asarray(gain, dtype=np.float64),
                          last.norm.beta if shift is None else np.asarray(shift, dtype=np.float64))
        lp = lp._replace(res_units=(*lp.res_units[:-1], last._replace(norm=norm)))
    a0 = np.broadcast_to(np.asarray(r, dtype=np.float64), (c.d_k, c.d_k))[None, None]
    return metric_learner(a0, lp, c.metric_learner, c)[0, 0]


def row_clone(alpha: np.ndarray) -> np.ndarray:
    """1 alpha^T (d = len(alpha)); the oracle form of the Lean definition."""
    alpha = np.asarray(alpha, dtype=np.float64)
    return np.ones((alpha.size, 1)) * alpha[None, :]


def clone_spread(a: np.ndarray) -> float:
    """max_ij |A_ij - A_0j|: how far the rows of A are from being identical."""
    return float(np.abs(a - a[0][None, :]).max())


ROWS = vectors(D_K, D_K, -10.0, 10.0)
GAINS = vectors(D_K, D_K, -2.0, 2.0)


def apply_run(profile: str) -> str:
    """(1 alpha^T)_ij = alpha_j: the metric learner maps identical rows to identical rows phi(r) (rel 8u), with
    random final LayerNorm gain and shift; the oracle row_clone(alpha) reproduces A."""

    def prop(r: np.ndarray, gain: np.ndarray, shift: np.ndarray) -> None:
        a = learned_row_clone(r, gain, shift)
        alpha = a[0]
        tol = 8 * UNIT_ROUNDOFF * max(np.abs(alpha).max(), 1e-300)
        record_ratio(clone_spread(a), tol)
        assert clone_spread(a) <= tol
        assert np.abs(row_clone(alpha) - a).max() <= tol

    return run_property(profile, prop, ROWS, GAINS, GAINS)


def apply_control(profile: str) -> str:
    """Mutation control (the lemma has no hypothesis): the same property on an input whose rows differ (the
    identical-row input of Prop. 3.11 dropped) fails: the row map keeps the rows apart."""
    lp, c = _layer()

    def prop(r: np.ndarray) -> None:
        a0 = (np.broadcast_to(r, (D_K, D_K)) + np.arange(float(D_K))[:, None])[None, None]
        a = metric_learner(a0, lp, c.metric_learner, c)[0, 0]
        assert clone_spread(a) <= 8 * UNIT_ROUNDOFF * np.abs(a[0]).max(), "rows differ"

    return expect_counterexample(profile, prop, ROWS)


def rank_le_one_run(profile: str) -> str:
    """rank(1 alpha^T) <= 1: sympy exactly (rational alpha) and numpy on learned row clones.
    Sharpness: max rank / 1."""

    def prop(r: np.ndarray, gain: np.ndarray, ints: list[int]) -> None:
        rank = np.linalg.matrix_rank(learned_row_clone(r, gain))
        assert rank <= 1
        m = sympy.ones(len(ints), 1) * sympy.Matrix([[sympy.Rational(i, 7) for i in ints]])
        assert m.rank() <= 1
        record_ratio(max(rank, m.rank()), 1)

    return run_property(profile, prop, ROWS, GAINS, st.lists(st.integers(-9, 9), min_size=1, max_size=6))


def perturbed_control(profile: str) -> str:
    """Mutation control: a learned clone plus a small perturbation Delta (row-clone structure dropped) has full
    rank."""
    rng = np.random.default_rng(1)
    m = learned_row_clone(rng.normal(size=D_K)) + 1e-3 * rng.normal(size=(D_K, D_K))
    return expect_violation(np.linalg.matrix_rank(m) > 1, f"rank {np.linalg.matrix_rank(m)}")


def eq_zero_iff_run(profile: str) -> str:
    """1 alpha^T = 0 <=> alpha = 0 on learned clones: final gain = shift = 0 gives A == 0 exactly (and alpha = 0);
    any other draw gives alpha != 0 and A != 0 (exact comparisons: the rows are the same numbers up to 8u)."""

    def prop(r: np.ndarray, gain: np.ndarray, shift: np.ndarray, zero: bool) -> None:
        if zero:
            gain, shift = np.zeros(D_K), np.zeros(D_K)
        a = learned_row_clone(r, gain, shift)
        alpha = a[0]
        assert (not np.any(a)) == (not np.any(alpha))
        if zero:
            assert not np.any(a)

    return run_property(profile, prop, ROWS, GAINS, GAINS, st.booleans())


def eq_zero_iff_control(profile: str) -> str:
    """Mutation control (no hypothesis): alpha read off the wrong axis (the first column A e_0 = alpha_0 1 instead
    of the common row) breaks the iff: a learned clone with alpha_0 = 0 (gain_0 = shift_0 = 0) has a zero first
    column but A != 0."""
    gain, shift = np.ones(D_K), np.full(D_K, 0.5)
    gain[0] = shift[0] = 0.0
    a = learned_row_clone(np.arange(float(D_K)), gain, shift)
    column = a[:, 0]
    return expect_violation(not np.any(column) and bool(np.any(a)), "A e_0 = 0 although A != 0")


def rank_eq_one_run(profile: str) -> str:
    """alpha != 0 => rank 1: learned clones (alpha = gain o u + shift with the shift pushed >= 0.1 away from 0,
    so alpha != 0) have numerical rank 1 (numpy default tolerance); sympy exact on rationals; the mean rows of the
    real G_LM heads."""

    def prop(r: np.ndarray, gain: np.ndarray, shift: np.ndarray, ints: list[int]) -> None:
        a = learned_row_clone(r, gain, shift + np.sign(shift + 0.5) * 0.1)
        assert np.any(a[0])
        assert np.linalg.matrix_rank(a) == 1
        if any(ints):
            m = sympy.ones(len(ints), 1) * sympy.Matrix([[sympy.Rational(i, 3) for i in ints]])
            assert m.rank() == 1

    detail = run_property(profile, prop, ROWS, GAINS, GAINS, st.lists(st.integers(-9, 9), min_size=1, max_size=6))
    # alpha = the mean row of every real G_LM head (d_k = 64)
    alphas = real_g_lm().mean(axis=-2).reshape(-1, 64)
    ranks = [int(np.linalg.matrix_rank(row_clone(a))) for a in alphas]
    assert ranks == [1] * len(alphas)
    return detail + "; 70 real G_LM mean rows give rank 1"


def rank_eq_one_control(profile: str) -> str:
    """Dropping alpha != 0: the learned clone with final gain = shift = 0 has rank 0."""
    a = learned_row_clone(np.arange(float(D_K)), np.zeros(D_K), np.zeros(D_K))
    return expect_violation(np.linalg.matrix_rank(a) == 0, "rank 0 at alpha = 0")


def det_run(profile: str) -> str:
    """d >= 2 => det(1 alpha^T) = 0: sympy exactly; numpy |det| <= d u ||alpha||_2^d (not always 0.0)."""

    def prop(r: np.ndarray, gain: np.ndarray, shift: np.ndarray, ints: list[int]) -> None:
        a = learned_row_clone(r, gain, shift)
        # the rows agree to 8u (not bitwise): det is bounded by the clone's spread times sigma_1^(d-1) as well
        tol = D_K * UNIT_ROUNDOFF * np.linalg.norm(a[0]) ** D_K + \
            np.sqrt(D_K) * clone_spread(a) * (np.sqrt(D_K) * np.linalg.norm(a, 2)) ** (D_K - 1)
        record_ratio(abs(np.linalg.det(a)), tol)
        assert abs(np.linalg.det(a)) <= tol
        m = sympy.ones(len(ints), 1) * sympy.Matrix([[sympy.Rational(i, 5) for i in ints]])
        assert m.det() == 0

    return run_property(profile, prop, ROWS, GAINS, GAINS, st.lists(st.integers(-9, 9), min_size=2, max_size=6))


def det_control(profile: str) -> str:
    """Dropping d >= 2: the 1 x 1 leading block of a learned clone is 1 alpha_0^T with det = alpha_0 != 0."""
    a = learned_row_clone(np.arange(float(D_K)), np.ones(D_K), np.full(D_K, 0.5))
    det = float(np.linalg.det(a[:1, :1]))
    return expect_violation(det != 0.0, f"det = {det} at d = 1")


def mulvec_one_run(profile: str) -> str:
    """(1 alpha^T) 1 = s 1, s = sum alpha, within gamma(d) ||alpha||_1 (learned row clones and random alpha)."""

    def prop(r: np.ndarray, gain: np.ndarray, shift: np.ndarray) -> None:
        for a in (learned_row_clone(r, gain, shift),):
            s = a[0].sum()
            assert np.all(np.abs(a @ np.ones(a.shape[0]) - s) <= 2 * gamma(a.shape[0]) * np.abs(a[0]).sum())

    return run_property(profile, prop, ROWS, GAINS, GAINS)


def mulvec_one_control(profile: str) -> str:
    """Mutation control: a vector other than 1 is not an eigenvector: (1 alpha^T) e_0 = alpha_0 1 != s e_0 on a
    learned clone."""
    a = learned_row_clone(np.arange(float(D_K)), np.ones(D_K), np.full(D_K, 0.5))
    e0 = np.eye(D_K)[0]
    return expect_violation(not np.allclose(a @ e0, a[0].sum() * e0), "e_0 not an eigenvector")


def _pow_tol(alpha: np.ndarray, k: int) -> float:
    """(k+1) gamma(d) ||alpha||_1^k ||alpha||_inf, with a floor for the rounding of s itself."""
    a1 = np.abs(alpha).sum()
    return 4 * (k + 1) * gamma(alpha.size + 1) * a1**k * np.abs(alpha).max()


def mul_self_run(profile: str) -> str:
    """(1 alpha^T)^2 = s (1 alpha^T) within 4 * 2 gamma(d+1) ||alpha||_1 ||alpha||_inf."""

    def prop(r: np.ndarray, gain: np.ndarray, shift: np.ndarray) -> None:
        a = learned_row_clone(r, gain, shift)
        tol = _pow_tol(a[0], 1) + 2 * D_K * clone_spread(a) * np.abs(a).max()
        gap = np.abs(a @ a - a[0].sum() * a).max()
        record_ratio(gap, tol)
        assert gap <= tol

    return run_property(profile, prop, ROWS, GAINS, GAINS)


def pow_run(profile: str) -> str:
    """(1 alpha^T)^(k+1) = s^k (1 alpha^T), k = 0..6, within 4 (k+1) gamma(d+1) ||alpha||_1^k ||alpha||_inf."""

    def prop(r: np.ndarray, gain: np.ndarray, shift: np.ndarray, k: int) -> None:
        a = learned_row_clone(r, gain * 0.25, shift * 0.25)
        alpha = a[0]
        spread = clone_spread(a)
        tol = _pow_tol(alpha, k) + (k + 1) * D_K * spread * (D_K * np.abs(a).max() + 1) ** k
        gap = np.abs(np.linalg.matrix_power(a, k + 1) - alpha.sum() ** k * a).max()
        record_ratio(gap, tol)
        assert gap <= tol

    return run_property(profile, prop, ROWS, GAINS, GAINS, st.integers(0, 6))


def perturbed_pow_control(profile: str) -> str:
    """Mutation control: a learned clone plus Delta (row-clone structure dropped) violates A^2 = s A."""
    rng = np.random.default_rng(2)
    a = learned_row_clone(rng.normal(size=D_K))
    m = a + 0.1 * rng.normal(size=(D_K, D_K))
    return expect_violation(np.abs(m @ m - a[0].sum() * m).max() > _pow_tol(a[0], 1), "A^2 != s A")


def _sq_zero_prop(shift_level: float):
    def prop(r: np.ndarray, seed: int) -> None:
        # final gain 1, shift 0: alpha = u is the centred LayerNorm output, sum alpha = 0 up to rounding
        a = learned_row_clone(r, np.ones(D_K), np.full(D_K, shift_level))
        alpha = a[0]
        # |fl(s)| <= S_BOUND: the centred row sums to 0 up to the mean's rounding (a rounding bound, not the
        # measured s: with the measured s the tolerance would restate A^2 = s A)
        s_bound = 64 * gamma(D_K) * np.abs(alpha).sum()
        tol = 2 * gamma(D_K) * np.abs(alpha).sum() * np.abs(alpha).max() + \
            s_bound * np.abs(alpha).max() + 2 * D_K * clone_spread(a) * np.abs(a).max()
        if shift_level == 0.0:
            assert abs(alpha.sum()) <= s_bound
            record_ratio(np.abs(a @ a).max(), tol)
        assert np.abs(a @ a).max() <= tol, "A^2 != 0"

    return prop


def sq_zero_run(profile: str) -> str:
    """sum alpha = 0 => (1 alpha^T)^2 = 0: learned clones whose final LayerNorm has gain 1 and shift 0 (alpha is
    the centred output, sum alpha = 0 in floating point up to rounding) within 2 gamma(d) ||alpha||_1
    ||alpha||_inf + |fl(s)| ||alpha||_inf; integer alpha with zero sum (oracle form) exactly."""
    detail = run_property(profile, _sq_zero_prop(0.0), ROWS, seeds())
    for ints in ([1, -1], [3, -5, 2], [7, 0, -3, -4]):
        a = row_clone(np.array(ints, dtype=np.float64))
        assert not np.any(a @ a)
    return detail


def sq_zero_control(profile: str) -> str:
    """Dropping sum alpha = 0 (final shift 0.5: s = d/2): (1 alpha^T)^2 = s A != 0."""
    return expect_counterexample(profile, _sq_zero_prop(0.5), ROWS, seeds())


def sv_bound_holds(m: np.ndarray, alpha: np.ndarray, delta: float) -> tuple[bool, bool]:
    """(sigma_j(M) <= delta for j >= 2, log|det M| <= log(sqrt(d) ||alpha|| + delta) + (d-1) log delta), both with
    the float slack 4 gamma(d) sigma_1 (singular values are backward stable to ~u ||M||_2)."""
    d = m.shape[0]
    sv = np.linalg.svd(m, compute_uv=False)
    slack = 4 * gamma(d) * sv[0]
    sv_ok = bool(np.all(sv[1:] <= delta + slack))
    sign, logdet = np.linalg.slogdet(m)
    bound = np.log(np.sqrt(d) * np.linalg.norm(alpha) + delta + slack) + (d - 1) * np.log(delta + slack)
    det_ok = bool(sign == 0 or logdet <= bound + 1e-12 * abs(bound))
    return sv_ok, det_ok


def sv_perturbation_run(profile: str) -> str:
    """A' = 1 alpha^T + Delta, ||Delta||_2 <= delta => sigma_j(A') <= delta (j >= 2) and |det A'| <=
    (sqrt(d) ||alpha||_2 + delta) delta^(d-1): random alpha, Delta, and all 70 real G_LM heads with alpha = the
    mean row (any alpha is allowed) and delta = ||G - 1 alpha^T||_2.  Sharpness: max sigma_2(A') / delta."""

    def prop(seed: int, d: int, scale: float) -> None:
        rng = np.random.default_rng(seed)
        alpha = rng.normal(size=d)
        delta_m = scale * rng.normal(size=(d, d))
        m = np.ones((d, 1)) * alpha + delta_m
        delta = float(np.linalg.norm(delta_m, 2))
        assert all(sv_bound_holds(m, alpha, delta))
        if d >= 2:
            record_ratio(float(np.linalg.svd(m, compute_uv=False)[1]), delta)

    detail = run_property(profile, prop, seeds(), st.integers(1, 10), st.sampled_from([1e-8, 1e-3, 0.1, 10.0]))
    worst = 0.0
    for g in real_g_lm().reshape(-1, REAL_D_K, REAL_D_K):
        alpha = g.mean(axis=0)
        delta = float(np.linalg.norm(g - np.ones((REAL_D_K, 1)) * alpha, 2))
        assert all(sv_bound_holds(g, alpha, delta))
        worst = max(worst, float(np.linalg.svd(g, compute_uv=False)[1] / delta))
    record_ratio(worst)
    return detail + f"; real G_LM: max sigma_2 / delta = {worst:.3f}"


def sv_perturbation_control(profile: str) -> str:
    """Dropping ||Delta||_2 <= delta (delta taken as half the norm): sigma_2 exceeds delta."""
    rng = np.random.default_rng(3)
    alpha, delta_m = rng.normal(size=6), rng.normal(size=(6, 6))
    m = np.ones((6, 1)) * alpha + delta_m
    sv_ok, _ = sv_bound_holds(m, alpha, 0.5 * float(np.linalg.norm(delta_m, 2)))
    return expect_violation(not sv_ok, "sigma_2 > ||Delta||_2 / 2")


def _alpha(d: int) -> list[sp.Symbol]:
    return list(sp.symbols(f"a0:{d}", real=True))


def row_clone_matrix(d: int) -> sp.Matrix:
    """1 alpha^T with symbolic alpha_0..alpha_{d-1}."""
    return sp.ones(d, 1) * sp.Matrix([_alpha(d)])


@functools.lru_cache(maxsize=1)
def charpoly_all_d() -> bool:
    lam = sp.Symbol("lam")
    for d in range(1, MAX_D + 1):
        a = row_clone_matrix(d)
        s = sum(_alpha(d))
        if sp.expand(a.charpoly(lam).as_expr() - lam ** (d - 1) * (lam - s)) != 0:
            return False
    return True


def charpoly_run(profile: str) -> str:
    """det(lam I - 1 alpha^T) = lam^(d-1) (lam - s) for d = 1..8, alpha symbolic."""
    assert charpoly_all_d()
    return f"d = 1..{MAX_D}"


def charpoly_control(profile: str) -> str:
    """Dropping the row-clone structure (a diagonal added) changes the characteristic polynomial."""
    lam = sp.Symbol("lam")
    a = row_clone_matrix(3) + sp.diag(1, 0, 0)
    s = sum(_alpha(3))
    return expect_violation(sp.expand(a.charpoly(lam).as_expr() - lam**2 * (lam - s)) != 0, "1 alpha^T + E_00")


def power_run(profile: str) -> str:
    """A^k = s^(k-1) A: A^2 = s A for d = 1..8 (hence every k by induction), and k = 1..5 directly for d <= 4."""
    for d in range(1, MAX_D + 1):
        a = row_clone_matrix(d)
        s = sum(_alpha(d))
        assert (a * a - s * a).expand() == sp.zeros(d, d), d
    for d in range(1, 5):
        a = row_clone_matrix(d)
        s = sum(_alpha(d))
        power = a
        for k in range(1, 6):
            assert (power - s ** (k - 1) * a).expand() == sp.zeros(d, d), (d, k)
            power = power * a
    return f"A^2 = sA for d <= {MAX_D}; A^k for k <= 5, d <= 4"


def power_control(profile: str) -> str:
    """s^k A (exponent off by one) is wrong for k = 2."""
    a = row_clone_matrix(2)
    s = sum(_alpha(2))
    return expect_violation((a * a - s**2 * a).expand() != sp.zeros(2, 2), "A^2 != s^2 A")


_EX = ("pldr_ref.metric_learner.metric_learner",)
CHECKS = (
    Check(
        name="rowClone_apply",
        statement=IDENTITY,
        lean=("rowClone_apply",),
        paper="Prop. 3.9 / Prop. 3.11",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=apply_run,
        negative_control=apply_control,
        slack="8u max|alpha| between rows",
        dropped="identical input rows (Prop. 3.11 input)",
        weak="definitional (simp): the entries of 1 alpha^T are alpha_j; tested as the corollary that the real "
              "metric learner maps identical rows to a row clone",
    ),
    Check(
        name="rowClone_rank_le_one",
        lean=("rowClone_rank_le_one",),
        paper="Prop. 3.9(i)",
        label=THEOREM,
        method=(HYPOTHESIS, SYMPY),
        exercises=_EX,
        run=rank_le_one_run,
        negative_control=perturbed_control,
        slack="numpy default rank tolerance; sympy exact",
        dropped="row-clone structure (1 alpha^T + Delta)",
    ),
    Check(
        name="rowClone_eq_zero_iff",
        statement=IDENTITY,
        lean=("rowClone_eq_zero_iff",),
        paper="Prop. 3.9(i)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=eq_zero_iff_run,
        negative_control=eq_zero_iff_control,
        slack="none (exact)",
        dropped="alpha read as the first column",
        weak="near-definitional: entries of 1 alpha^T are copies of alpha; the corollary tested is that the real "
              "metric learner's clone vanishes exactly when its final LayerNorm gain and shift do",
    ),
    Check(
        name="rowClone_rank_eq_one",
        statement=IDENTITY,
        lean=("rowClone_rank_eq_one",),
        paper="Prop. 3.9(i)",
        label=THEOREM,
        method=(HYPOTHESIS, SYMPY, REAL_G_LM),
        exercises=_EX,
        run=rank_eq_one_run,
        negative_control=rank_eq_one_control,
        slack="numpy default rank tolerance",
        dropped="alpha != 0",
    ),
    Check(
        name="rowClone_det_eq_zero",
        statement=IDENTITY,
        lean=("rowClone_det_eq_zero",),
        paper="Prop. 3.9(i)",
        label=THEOREM,
        method=(HYPOTHESIS, SYMPY),
        exercises=_EX,
        run=det_run,
        negative_control=det_control,
        slack="|det| <= d u ||alpha||_2^d + sqrt(d) spread (sqrt(d) ||A||_2)^(d-1)",
        dropped="d >= 2",
        note="np.linalg.det of a rank-one matrix is not always exactly 0.0; sympy gives exact 0",
    ),
    Check(
        name="rowClone_mulVec_one",
        statement=IDENTITY,
        lean=("rowClone_mulVec_one",),
        paper="Prop. 3.9(ii)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=mulvec_one_run,
        negative_control=mulvec_one_control,
        slack="2 gamma(d) ||alpha||_1",
        dropped="the vector is 1 (e_0)",
    ),
    Check(
        name="rowClone_mul_self",
        statement=IDENTITY,
        lean=("rowClone_mul_self",),
        paper="Prop. 3.9(ii)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=mul_self_run,
        negative_control=perturbed_pow_control,
        slack="8 gamma(d+1) ||alpha||_1 ||alpha||_inf",
        dropped="row-clone structure",
    ),
    Check(
        name="rowClone_pow",
        statement=IDENTITY,
        lean=("rowClone_pow",),
        paper="Prop. 3.9(iii)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=pow_run,
        negative_control=perturbed_pow_control,
        slack="4(k+1) gamma(d+1) ||alpha||_1^k ||alpha||_inf",
        dropped="row-clone structure",
    ),
    Check(
        name="rowClone_sq_eq_zero",
        statement=IDENTITY,
        lean=("rowClone_sq_eq_zero",),
        paper="Prop. 3.9(ii)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=sq_zero_run,
        negative_control=sq_zero_control,
        slack="66 gamma(d)||a||_1||a||_inf + clone spread; "
              "exact for integers",
        dropped="sum alpha = 0",
    ),
    Check(
        name="singular_value_perturbation",
        lean=(),
        paper="Prop. 3.9(iv)",
        label=THEOREM,
        method=(HYPOTHESIS, REAL_G_LM),
        exercises=(),
        run=sv_perturbation_run,
        negative_control=sv_perturbation_control,
        slack="4 gamma(d) sigma_1 on singular values; log-determinant",
        dropped="||Delta||_2 <= delta",
        note="determinant bound compared in logs: at d_k = 64 the products under/overflow",
    ),
    Check(
        name="sympy_rowclone_charpoly",
        statement=IDENTITY,
        lean=(),
        paper="Prop. 3.9(ii)",
        label=THEOREM,
        method=(SYMPY,),
        exercises=(),
        run=charpoly_run,
        negative_control=charpoly_control,
        slack="none (exact)",
        dropped="row-clone structure",
    ),
    Check(
        name="sympy_rowclone_power",
        statement=IDENTITY,
        lean=("rowClone_pow", "rowClone_mul_self"),
        paper="Prop. 3.9(iii)",
        label=THEOREM,
        method=(SYMPY,),
        exercises=(),
        run=power_run,
        negative_control=power_control,
        slack="none (exact)",
        dropped="the exponent k - 1",
    ),
)
