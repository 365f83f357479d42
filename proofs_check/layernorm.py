"""LayerNorm.lean: row mean/variance laws, exact shift invariance of LN_eps, scale invariance at eps = 0 and the
norm identity sum u_i^2 = d v / (v + eps) (paper Lem. 5.11), on ``pldr_ref.norms.layer_norm``.

rowMean / rowVar are the reductions ``layer_norm`` evaluates (``np.mean`` over the last axis, variance as the
mean of the squared centred row, ddof = 0); the lemmas about them are checked on those reductions and, through
their consequences, on ``layer_norm`` itself.
"""

from __future__ import annotations

import mpmath
import numpy as np
from hypothesis import strategies as st

from pldr_ref.constants import EPS_LN
from pldr_ref.norms import layer_norm
from proofs_check.profiles import expect_counterexample, expect_violation, run_property
from proofs_check.registry import HYPOTHESIS, MPMATH, THEOREM, Check
from proofs_check.rounding import SUBNORMAL_FLOOR, UNIT_ROUNDOFF, gamma
from proofs_check.strategies import reals, seeds, vectors


def row_mean(r: np.ndarray) -> float:
    """rowMean as layer_norm evaluates it (``x.mean(axis=-1)``)."""
    return float(np.asarray(r, dtype=np.float64).mean(axis=-1))


def row_var(r: np.ndarray) -> float:
    """rowVar as layer_norm evaluates it: mean of the squared centred row (biased, ddof = 0)."""
    r = np.asarray(r, dtype=np.float64)
    xc = r - r.mean(axis=-1, keepdims=True)
    return float(np.mean(xc * xc, axis=-1))


def ln(r: np.ndarray, eps: float, g: np.ndarray | None = None, b: np.ndarray | None = None) -> np.ndarray:
    """LN_eps(r) with gain g (default 1) and shift b (default 0) through the real ``layer_norm``."""
    n = np.asarray(r).shape[-1]
    return layer_norm(r, np.ones(n) if g is None else g, np.zeros(n) if b is None else b, eps)


def var_nonneg_run(profile: str) -> str:
    """rowVar(r) >= 0 exactly (a mean of squares), also for nearly constant rows with a huge offset."""

    def prop(r: np.ndarray, offset: float) -> None:
        assert row_var(r) >= 0.0 and row_var(r + offset) >= 0.0

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-1e12, 1e12))


def var_nonneg_control(profile: str) -> str:
    """The one-pass formula E[r^2] - E[r]^2 (centred evaluation dropped) goes negative by cancellation."""

    def prop(r: np.ndarray, offset: float) -> None:
        x = r * 1e-3 + offset
        assert np.mean(x * x) - np.mean(x) ** 2 >= 0.0, "one-pass variance < 0"

    return expect_counterexample(profile, prop, vectors(2, 16, -1.0, 1.0), reals(1e6, 1e9))


def mean_shift_run(profile: str) -> str:
    """[d>=1] mean(r + c 1) = mean(r) + c within 2 gamma(d+1)(|c| + ||r||_inf)."""

    def prop(r: np.ndarray, c: float) -> None:
        tol = 2 * gamma(r.size + 1) * (abs(c) + np.abs(r).max()) + SUBNORMAL_FLOOR * (r.size + 2)
        assert abs(row_mean(r + c) - (row_mean(r) + c)) <= tol

    return run_property(profile, prop, vectors(1, 16, -1e3, 1e3), reals(-1e6, 1e6))


def empty_row_control(profile: str) -> str:
    """Dropping d >= 1: the mean of an empty row is NaN."""
    with np.errstate(invalid="ignore", divide="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = np.mean(np.zeros(0))
    return expect_violation(bool(np.isnan(m)), "mean of an empty row is NaN")


def var_shift_tol(r: np.ndarray, c: float) -> float:
    """fl(r_i + c) moves each centred entry by <= 4u(|r_i| + |c|); the variance moves by about twice that times
    the centred magnitude, plus gamma(2d+2) of the variance."""
    big = np.abs(r).max() + abs(c)
    spread = np.abs(r - r.mean()).max()
    return 8 * UNIT_ROUNDOFF * big * (spread + 8 * UNIT_ROUNDOFF * big) * 2 + 2 * gamma(2 * r.size + 2) * row_var(r)


def var_shift_run(profile: str) -> str:
    """[d>=1] var(r + c 1) = var(r) within :func:`var_shift_tol`."""

    def prop(r: np.ndarray, c: float) -> None:
        assert abs(row_var(r + c) - row_var(r)) <= var_shift_tol(r, c)

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-1e4, 1e4))


def var_shift_control(profile: str) -> str:
    """A non-constant shift changes the variance."""

    def prop(r: np.ndarray) -> None:
        v = np.arange(r.size, dtype=np.float64)
        assert abs(row_var(r + v) - row_var(r)) <= var_shift_tol(r, 0.0) + 1e-12, "variance changed"

    return expect_counterexample(profile, prop, vectors(3, 16, -10.0, 10.0))


def mean_smul_run(profile: str) -> str:
    """[d>=1] mean(c r) = c mean(r) within 2 gamma(d+2) |c| ||r||_inf."""

    def prop(r: np.ndarray, c: float) -> None:
        tol = 2 * gamma(r.size + 2) * abs(c) * np.abs(r).max() + SUBNORMAL_FLOOR * (r.size + 2)
        assert abs(row_mean(c * r) - c * row_mean(r)) <= tol

    return run_property(profile, prop, vectors(1, 16, -1e3, 1e3), reals(-1e3, 1e3))


def var_smul_run(profile: str) -> str:
    """[d>=1] var(c r) = c^2 var(r) within c^2 (4 gamma(2d+4) s^2 + 4 delta s + 2 delta^2), s = ||r - mean||_inf,
    delta = 2 gamma(d+2) ||r||_inf the rounding of the mean (it survives in nearly constant rows)."""

    def prop(r: np.ndarray, c: float) -> None:
        s = np.abs(r - r.mean()).max()
        delta = 2 * gamma(r.size + 2) * np.abs(r).max()
        tol = c**2 * (4 * gamma(2 * r.size + 4) * s**2 + 4 * delta * s + 2 * delta**2)
        assert abs(row_var(c * r) - c**2 * row_var(r)) <= tol + 1e-300

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-1e3, 1e3))


def var_smul_control(profile: str) -> str:
    """var(c r) = c var(r) (square dropped) fails for c not in {0, 1}."""

    def prop(r: np.ndarray, c: float) -> None:
        assert abs(row_var(c * r) - c * row_var(r)) <= 1e-9 * (1 + c**2 * row_var(r)), "var(c r) != c var(r)"

    return expect_counterexample(profile, prop, vectors(2, 16, -10.0, 10.0), reals(2.0, 10.0))


def ln_shift_tol(r: np.ndarray, c: float, g: np.ndarray, b: np.ndarray, eps: float) -> float:
    """||gamma||_inf (16u(|c| + ||r||_inf) sqrt(d) / sqrt(v + eps) + 4 gamma(2d+6) sqrt(d)) + 2u ||beta||_inf."""
    d = r.size
    v = row_var(r)
    core = 16 * UNIT_ROUNDOFF * (abs(c) + np.abs(r).max()) * np.sqrt(d) / np.sqrt(v + eps)
    return np.abs(g).max() * (core + 4 * gamma(2 * d + 6) * np.sqrt(d)) + 2 * UNIT_ROUNDOFF * np.abs(b).max()


def ln_shift_run(profile: str) -> str:
    """[d>=1] LN_eps(r + c 1) = LN_eps(r) for eps in {0 (non-constant rows), 1e-6, 1}, random gamma, beta."""

    def prop(r: np.ndarray, c: float, seed: int, eps: float) -> None:
        if eps == 0.0 and row_var(r) < 1e-6:
            return
        rng = np.random.default_rng(seed)
        g, b = rng.normal(size=r.size), rng.normal(size=r.size)
        assert np.all(np.abs(ln(r + c, eps, g, b) - ln(r, eps, g, b)) <= ln_shift_tol(r, c, g, b, eps))

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-1e3, 1e3), seeds(),
                        st.sampled_from([0.0, EPS_LN, 1.0]))


def ln_shift_control(profile: str) -> str:
    """A non-constant shift changes LN_eps."""

    def prop(r: np.ndarray) -> None:
        v = np.linspace(0.0, 1.0, r.size)
        ones, zeros = np.ones(r.size), np.zeros(r.size)
        assert np.all(np.abs(ln(r + v, EPS_LN) - ln(r, EPS_LN)) <= ln_shift_tol(r, 1.0, ones, zeros, EPS_LN)), "moved"

    return expect_counterexample(profile, prop, vectors(3, 16, -1.0, 1.0))


def ln_scale_run(profile: str) -> str:
    """c > 0, var(r) > 0 => LN_0(c r) = LN_0(r) within 8 gamma(2d+6) sqrt(d) (eps = 0 idealization)."""

    def prop(r: np.ndarray, c: float) -> None:
        if row_var(r) < 1e-6:
            return
        assert np.all(np.abs(ln(c * r, 0.0) - ln(r, 0.0)) <= 8 * gamma(2 * r.size + 6) * np.sqrt(r.size))

    return run_property(profile, prop, vectors(2, 16, -10.0, 10.0), reals(1e-3, 1e3))


def ln_scale_control(profile: str) -> str:
    """eps = 1e-6 (eps = 0 dropped): the measured gap ||LN(D) - LN(D/S)|| / ||LN(D/S)|| matches the first-order
    proxy eps / (2 var(D/S)) within 10% for a Gaussian row with S = 40 (Lemma 5.11(ii))."""
    rng = np.random.default_rng(40)
    row = 0.4 * rng.normal(size=64)
    s = 40.0
    gap = np.linalg.norm(ln(row, EPS_LN) - ln(row / s, EPS_LN)) / np.linalg.norm(ln(row / s, EPS_LN))
    proxy = EPS_LN / (2 * row_var(row / s))
    ok = gap > 0 and abs(gap / proxy - 1) < 0.1
    return expect_violation(ok, f"gap {gap:.4e} vs proxy eps/(2 var) {proxy:.4e}")


def sum_sq_run(profile: str) -> str:
    """eps > 0 => sum u_i^2 = d v / (v + eps) (u = LN with gamma = 1, beta = 0) at rtol 4 gamma(2d+6); the strict
    '< d' in mpmath (40 digits) for v / eps up to 1e24; integer constant rows give exactly 0."""

    def prop(r: np.ndarray, log_scale: float, eps: float) -> None:
        x = r * 10.0**log_scale
        d, v = x.size, row_var(x)
        lhs = float(np.sum(ln(x, eps) ** 2))
        rhs = d * v / (v + eps)
        assert abs(lhs - rhs) <= 4 * gamma(2 * d + 6) * max(lhs, rhs) + 1e-300
        with mpmath.workdps(40):
            xm = [mpmath.mpf(t) for t in x]
            mu = mpmath.fsum(xm) / d
            vm = mpmath.fsum((t - mu) ** 2 for t in xm) / d
            assert d * vm / (vm + mpmath.mpf(eps)) < d
        # integer constant rows: the mean is exact, so the centred row and the sum are exactly 0
        assert np.sum(ln(np.full(d, np.round(x[0])), eps) ** 2) == 0.0

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-6.0, 6.0),
                        st.sampled_from([EPS_LN, 1e-3, 1.0]))


def sum_sq_control(profile: str) -> str:
    """eps = 0 (eps > 0 dropped): the output is on the sphere (sum = d, not < d) and a constant row gives NaN."""
    r = np.array([1.0, 2.0, 4.0])
    with np.errstate(invalid="ignore", divide="ignore"):
        on_sphere = float(np.sum(ln(r, 0.0) ** 2))
        const = ln(np.ones(3), 0.0)
    ok = abs(on_sphere - 3.0) <= 4 * gamma(12) * 3 and bool(np.all(np.isnan(const)))
    return expect_violation(ok, f"sum u^2 = {on_sphere} = d and constant row -> {const}")


_EX = ("pldr_ref.norms.layer_norm",)


def _c(name, paper, method, run, control, slack, dropped, note=""):
    return Check(name, (name,), paper, THEOREM, method, _EX, run, control, slack=slack, dropped=dropped, note=note)


CHECKS = (
    _c("rowVar_nonneg", "Lem. 5.11", (HYPOTHESIS,), var_nonneg_run, var_nonneg_control, "none (exact)",
       "centred (two-pass) evaluation"),
    _c("rowMean_shift", "Lem. 5.11(i)", (HYPOTHESIS,), mean_shift_run, empty_row_control,
       "2 gamma(d+1)(|c| + ||r||_inf) + (d+2) subnormal", "d >= 1"),
    _c("rowVar_shift", "Lem. 5.11(i)", (HYPOTHESIS,), var_shift_run, var_shift_control,
       "16u(|r|+|c|) spread + 2 gamma(2d+2) v", "the shift is constant"),
    _c("rowMean_smul", "Lem. 5.11(ii)", (HYPOTHESIS,), mean_smul_run, empty_row_control,
       "2 gamma(d+2)|c| ||r||_inf + (d+2) subnormal", "d >= 1",
       note="relative rounding bounds fail in the subnormal range: an absolute floor of one subnormal per op"),
    _c("rowVar_smul", "Lem. 5.11(ii)", (HYPOTHESIS,), var_smul_run, var_smul_control,
       "c^2(4 gamma(2d+4) s^2 + 4 delta s + 2 delta^2)", "the square on c"),
    _c("lnEps_shift", "Lem. 5.11(i)", (HYPOTHESIS,), ln_shift_run, ln_shift_control,
       "||g||_inf(16u(|c|+|r|) sqrt(d)/sqrt(v+eps) + 4 gamma(2d+6) sqrt(d)) + 2u||b||_inf", "the shift is constant",
       note="eps < 0 not tested: Lean's sqrt(negative) = 0 differs from NumPy's NaN"),
    _c("lnEps_scale_eps_zero", "Lem. 5.11(ii)", (HYPOTHESIS,), ln_scale_run, ln_scale_control,
       "8 gamma(2d+6) sqrt(d), var(r) >= 1e-6", "eps = 0 (Lemma 5.11(ii) quantifies the eps > 0 gap)"),
    _c("sum_sq_normalized", "Lem. 5.11(iii)", (HYPOTHESIS, MPMATH), sum_sq_run, sum_sq_control,
       "4 gamma(2d+6) relative; strict < d in mpmath", "eps > 0",
       note="in float64 d v/(v+eps) rounds to d once v/eps > ~1e16: the strict '< d' is checked in mpmath"),
)
