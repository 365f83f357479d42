"""LayerNorm.lean: row mean/variance laws, exact shift invariance of LN_eps, scale invariance at eps = 0 and the
norm identity sum u_i^2 = d v / (v + eps) (paper Lem. 5.11), on ``pldr_ref.norms.layer_norm``.

rowMean / rowVar are the reductions ``layer_norm`` itself evaluates: :func:`ln_reductions` reads ``mu`` and
``var`` out of the operator's frame on return (:func:`proofs_check.tracing.captured_locals`).  Every check
tests the Lean law on those values and, as an independent oracle, that they equal the Lean definitions
(rowMean = sum r / d, rowVar = sum (r - mean)^2 / d, biased) evaluated with ``math.fsum`` within rounding.

Beyond Lean: Lem. 5.11(ii)-(iv) (scale error, compact range, exact Jacobian and Lipschitz constant on
variance-floored rows) and the sympy norm identity for every d <= MAX_D.
"""

from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import sympy as sp
from hypothesis import assume
from hypothesis import strategies as st

from pldr_ref.constants import EPS_LN
from pldr_ref.norms import layer_norm
from proofs_check.profiles import expect_counterexample, expect_violation, record_margin, record_ratio, run_property
from proofs_check.registry import HYPOTHESIS, IDENTITY, MPMATH, SYMPY, THEOREM, Check
from proofs_check.rounding import SUBNORMAL_FLOOR, UNIT_ROUNDOFF, gamma
from proofs_check.strategies import MAX_D, reals, seeds, vectors
from proofs_check.tracing import captured_locals


def ln_reductions(r: np.ndarray, eps: float = EPS_LN) -> tuple[float, float, np.ndarray]:
    """(rowMean, rowVar, LN_eps(r)) as the real ``layer_norm`` evaluated them (gamma = 1, beta = 0)."""
    r = np.asarray(r, dtype=np.float64)
    with captured_locals("pldr_ref.norms.layer_norm") as frames:
        out = layer_norm(r, np.ones(r.shape[-1]), np.zeros(r.shape[-1]), eps)
    if not frames or "mu" not in frames[-1] or "var" not in frames[-1]:
        raise AssertionError("layer_norm no longer exposes its reductions as locals 'mu' and 'var'")
    return float(np.asarray(frames[-1]["mu"]).ravel()[0]), float(np.asarray(frames[-1]["var"]).ravel()[0]), out


def row_mean(r: np.ndarray) -> float:
    """rowMean as layer_norm evaluates it."""
    return ln_reductions(r)[0]


def row_var(r: np.ndarray) -> float:
    """rowVar as layer_norm evaluates it."""
    return ln_reductions(r)[1]


def lean_mean(r: np.ndarray) -> float:
    """Oracle: rowMean r = (sum_i r_i) / d, the sum correctly rounded (math.fsum)."""
    return math.fsum(np.asarray(r, dtype=np.float64).tolist()) / r.size


def lean_var(r: np.ndarray) -> float:
    """Oracle: rowVar r = sum_i (r_i - mean)^2 / d in mpmath (40 digits), rounded once."""
    with mpmath.workdps(40):
        xs = [mpmath.mpf(float(t)) for t in np.asarray(r, dtype=np.float64)]
        mu = mpmath.fsum(xs) / len(xs)
        return float(mpmath.fsum((t - mu) ** 2 for t in xs) / len(xs))


def mean_tol(r: np.ndarray) -> float:
    """|fl(mean r) - mean r| <= gamma(d+1) ||r||_inf + one subnormal (the division in the subnormal range)."""
    return gamma(r.size + 1) * float(np.abs(r).max()) + 2 * SUBNORMAL_FLOOR


def var_tol(r: np.ndarray) -> float:
    """|fl(var r) - var r|: the rounded mean adds delta^2 (delta = mean_tol), the centring and the mean of
    squares add gamma(d+4) (var + delta^2); plus a subnormal floor per term."""
    delta = mean_tol(r)
    v = lean_var(r)
    return 2 * delta**2 + 4 * delta * math.sqrt(v) * gamma(2) + gamma(r.size + 4) * (v + delta**2) + \
        (r.size + 2) * SUBNORMAL_FLOOR


def assert_definitions(r: np.ndarray) -> tuple[float, float]:
    """The operator's reductions equal the Lean definitions within :func:`mean_tol` / :func:`var_tol`."""
    mu, var, _ = ln_reductions(r)
    assert abs(mu - lean_mean(r)) <= mean_tol(r), f"layer_norm mean {mu} vs rowMean {lean_mean(r)}"
    assert abs(var - lean_var(r)) <= var_tol(r), f"layer_norm variance {var} vs rowVar {lean_var(r)}"
    return mu, var


def ln(r: np.ndarray, eps: float, g: np.ndarray | None = None, b: np.ndarray | None = None) -> np.ndarray:
    """LN_eps(r) with gain g (default 1) and shift b (default 0) through the real ``layer_norm``."""
    n = np.asarray(r).shape[-1]
    return layer_norm(r, np.ones(n) if g is None else g, np.zeros(n) if b is None else b, eps)


def lean_ln(r: np.ndarray, eps: float, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Oracle: lnEps eps g b r = g (r - mean) / sqrt(rowVar + eps) + b in mpmath (40 digits)."""
    with mpmath.workdps(40):
        xs = [mpmath.mpf(float(t)) for t in r]
        mu = mpmath.fsum(xs) / len(xs)
        v = mpmath.fsum((t - mu) ** 2 for t in xs) / len(xs)
        s = mpmath.sqrt(v + mpmath.mpf(eps))
        return np.array([float(mpmath.mpf(float(gi)) * (t - mu) / s + mpmath.mpf(float(bi)))
                         for t, gi, bi in zip(xs, g, b, strict=True)])


def _empty_row_reductions() -> tuple[float, float]:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        mu, var, _ = ln_reductions(np.zeros(0))
    return mu, var


def var_nonneg_run(profile: str) -> str:
    """rowVar(r) >= 0 exactly (a mean of squares), also for nearly constant rows with a huge offset.
    Sharpness: min rowVar(x) / mean(x^2) (natural scale: the mean square, which bounds the variance)."""

    def prop(r: np.ndarray, offset: float) -> None:
        assert row_var(r) >= 0.0 and row_var(r + offset) >= 0.0
        for x in (r, r + offset):
            record_margin(row_var(x), float(np.mean(x * x)))
        assert_definitions(r)

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-1e12, 1e12))


def var_nonneg_control(profile: str) -> str:
    """Mutation control (no Lean hypothesis): the one-pass formula E[r^2] - E[r]^2 (centred evaluation dropped)
    goes negative by cancellation."""

    def prop(r: np.ndarray, offset: float) -> None:
        x = r * 1e-3 + offset
        assert np.mean(x * x) - np.mean(x) ** 2 >= 0.0, "one-pass variance < 0"

    return expect_counterexample(profile, prop, vectors(2, 16, -1.0, 1.0), reals(1e6, 1e9))


def mean_shift_run(profile: str) -> str:
    """[d>=1] mean(r + c 1) = mean(r) + c within 2 gamma(d+1)(|c| + ||r||_inf)."""

    def prop(r: np.ndarray, c: float) -> None:
        tol = 2 * gamma(r.size + 1) * (abs(c) + np.abs(r).max()) + SUBNORMAL_FLOOR * (r.size + 2)
        gap = abs(row_mean(r + c) - (row_mean(r) + c))
        record_ratio(gap, tol)
        assert gap <= tol
        assert_definitions(r)

    return run_property(profile, prop, vectors(1, 16, -1e3, 1e3), reals(-1e6, 1e6))


def empty_row_control(profile: str) -> str:
    """Dropping d >= 1: layer_norm's mean of an empty row is NaN (Lean: 0/0 = 0), so mean(r + c) = mean(r) + c
    fails for every c."""
    mu, _ = _empty_row_reductions()
    return expect_violation(bool(np.isnan(mu)), f"layer_norm mean of an empty row = {mu}")


def var_shift_tol(r: np.ndarray, c: float) -> float:
    """fl(r_i + c) moves each centred entry by <= 4u(|r_i| + |c|); the variance moves by about twice that times
    the centred magnitude, plus gamma(2d+2) of the variance."""
    big = np.abs(r).max() + abs(c)
    spread = np.abs(r - r.mean()).max()
    return 8 * UNIT_ROUNDOFF * big * (spread + 8 * UNIT_ROUNDOFF * big) * 2 + 2 * gamma(2 * r.size + 2) * row_var(r)


def var_shift_run(profile: str) -> str:
    """[d>=1] var(r + c 1) = var(r) within :func:`var_shift_tol`."""

    def prop(r: np.ndarray, c: float) -> None:
        gap = abs(row_var(r + c) - row_var(r))
        record_ratio(gap, var_shift_tol(r, c))
        assert gap <= var_shift_tol(r, c)
        assert_definitions(r)

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-1e4, 1e4))


def var_shift_control(profile: str) -> str:
    """Mutation control (d >= 1 is redundant): a non-constant shift changes the variance."""

    def prop(r: np.ndarray) -> None:
        v = np.arange(r.size, dtype=np.float64)
        assert abs(row_var(r + v) - row_var(r)) <= var_shift_tol(r, 0.0) + 1e-12, "variance changed"

    return expect_counterexample(profile, prop, vectors(3, 16, -10.0, 10.0))


def mean_smul_run(profile: str) -> str:
    """[d>=1] mean(c r) = c mean(r) within 2 gamma(d+2) |c| ||r||_inf."""

    def prop(r: np.ndarray, c: float) -> None:
        # the subnormal floor of fl(mean r) is multiplied by |c| in c * mean(r): (1 + |c|) floors, one per side
        tol = 2 * gamma(r.size + 2) * abs(c) * np.abs(r).max() + SUBNORMAL_FLOOR * (r.size + 2) * (1 + abs(c))
        gap = abs(row_mean(c * r) - c * row_mean(r))
        record_ratio(gap, tol)
        assert gap <= tol
        assert_definitions(r)

    return run_property(profile, prop, vectors(1, 16, -1e3, 1e3), reals(-1e3, 1e3))


def mean_smul_control(profile: str) -> str:
    """Mutation control (d >= 1 is redundant: Lean's 0/0 = 0 gives 0 = c 0): |c| in place of c fails for c < 0."""

    def prop(r: np.ndarray, c: float) -> None:
        tol = 2 * gamma(r.size + 2) * abs(c) * np.abs(r).max() + SUBNORMAL_FLOOR * (r.size + 2) * (1 + abs(c))
        assert abs(row_mean(c * r) - abs(c) * row_mean(r)) <= tol, "mean(c r) != |c| mean(r)"

    return expect_counterexample(profile, prop, vectors(1, 16, 1.0, 10.0), reals(-10.0, -1.0))


def var_smul_run(profile: str) -> str:
    """[d>=1] var(c r) = c^2 var(r) within c^2 (4 gamma(2d+4) s^2 + 4 delta s + 2 delta^2), s = ||r - mean||_inf,
    delta = 2 gamma(d+2) ||r||_inf the rounding of the mean (it survives in nearly constant rows)."""

    def prop(r: np.ndarray, c: float) -> None:
        s = np.abs(r - r.mean()).max()
        delta = 2 * gamma(r.size + 2) * np.abs(r).max()
        tol = c**2 * (4 * gamma(2 * r.size + 4) * s**2 + 4 * delta * s + 2 * delta**2) + 1e-300
        gap = abs(row_var(c * r) - c**2 * row_var(r))
        record_ratio(gap, tol)
        assert gap <= tol
        assert_definitions(r)

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-1e3, 1e3))


def var_smul_control(profile: str) -> str:
    """Mutation control (d >= 1 is redundant): var(c r) = c var(r) (square dropped) fails for c not in {0, 1}."""

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
        assume(eps > 0.0 or lean_var(r) >= 1e-6)
        rng = np.random.default_rng(seed)
        g, b = rng.normal(size=r.size), rng.normal(size=r.size)
        out = ln(r, eps, g, b)
        gap = np.abs(ln(r + c, eps, g, b) - out)
        tol = ln_shift_tol(r, c, g, b, eps)
        record_ratio(float(gap.max()), tol)
        assert np.all(gap <= tol)
        # oracle: the operator is lnEps itself (gamma, beta, eps where the definition puts them)
        exact = lean_ln(r, eps, g, b)
        assert np.abs(out - exact).max() <= tol + 8 * UNIT_ROUNDOFF * (np.abs(exact).max() + 1), "LN != lnEps"

    return run_property(profile, prop, vectors(1, 16, -10.0, 10.0), reals(-1e3, 1e3), seeds(),
                        st.sampled_from([0.0, EPS_LN, 1.0]))


def ln_shift_control(profile: str) -> str:
    """Mutation control (d >= 1 is redundant: both sides are the empty vector at d = 0): a non-constant shift
    changes LN_eps."""

    def prop(r: np.ndarray) -> None:
        v = np.linspace(0.0, 1.0, r.size)
        ones, zeros = np.ones(r.size), np.zeros(r.size)
        assert np.all(np.abs(ln(r + v, EPS_LN) - ln(r, EPS_LN)) <= ln_shift_tol(r, 1.0, ones, zeros, EPS_LN)), "moved"

    return expect_counterexample(profile, prop, vectors(3, 16, -1.0, 1.0))


def ln_scale_run(profile: str) -> str:
    """c > 0, var(r) > 0 => LN_0(c r) = LN_0(r) within 8 gamma(2d+6) sqrt(d) (eps = 0 idealization)."""

    def prop(r: np.ndarray, c: float, seed: int) -> None:
        assume(lean_var(r) >= 1e-6)
        g = np.random.default_rng(seed).normal(size=r.size)
        tol = 8 * gamma(2 * r.size + 6) * np.sqrt(r.size) * np.abs(g).max()
        gap = np.abs(ln(c * r, 0.0, g) - ln(r, 0.0, g)).max()
        record_ratio(gap, tol)
        assert gap <= tol
        assert np.abs(ln(r, 0.0, g) - lean_ln(r, 0.0, g, np.zeros(r.size))).max() <= tol, "LN_0 != lnEps 0"

    rows = vectors(2, 16, -10.0, 10.0).map(lambda r: np.concatenate([[r.max() + 1.0], r[1:]]))
    return run_property(profile, prop, rows, reals(1e-3, 1e3), seeds())


def ln_scale_control(profile: str) -> str:
    """Dropping c > 0 (c < 0): LN_0(c r) = -LN_0(r) != LN_0(r); and, beyond Lean, eps = 1e-6 instead of 0: the
    measured gap ||LN(D) - LN(D/S)|| / ||LN(D/S)|| matches the first-order proxy eps / (2 var(D/S)) within 10%
    for a Gaussian row with S = 40 (Lemma 5.11(ii))."""

    def prop(r: np.ndarray, c: float) -> None:
        assume(lean_var(r) >= 1e-6)
        assert np.all(np.abs(ln(c * r, 0.0) - ln(r, 0.0)) <= 8 * gamma(2 * r.size + 6) * np.sqrt(r.size)), \
            "LN_0(c r) != LN_0(r) for c < 0"

    negative = expect_counterexample(profile, prop, vectors(2, 16, -10.0, 10.0), reals(-1e3, -1e-3))
    rng = np.random.default_rng(40)
    row = 0.4 * rng.normal(size=64)
    s = 40.0
    gap = np.linalg.norm(ln(row, EPS_LN) - ln(row / s, EPS_LN)) / np.linalg.norm(ln(row / s, EPS_LN))
    proxy = EPS_LN / (2 * row_var(row / s))
    ok = gap > 0 and abs(gap / proxy - 1) < 0.1
    return negative + "; " + expect_violation(ok, f"eps = 1e-6: gap {gap:.4e} vs proxy eps/(2 var) {proxy:.4e}")


def sum_sq_run(profile: str) -> str:
    """eps > 0 => sum u_i^2 = d v / (v + eps) (u = LN with gamma = 1, beta = 0) at rtol 4 gamma(2d+6); the strict
    '< d' in mpmath (40 digits) for v / eps up to 1e24; integer constant rows give exactly 0."""

    def prop(r: np.ndarray, log_scale: float, eps: float) -> None:
        x = r * 10.0**log_scale
        d, v = x.size, row_var(x)  # the variance the operator divided by
        assert_definitions(x)
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


def _row_var(r: np.ndarray) -> float:
    xc = r - r.mean()
    return float(np.mean(xc * xc))


def scale_error_run(profile: str) -> str:
    """(ii) c > 0, r nonconstant: ||LN(c r) - LN(r)||_2 <= ||gamma||_inf sqrt(d) eps / (2 min(1, c^2) v(r))
    (plus 8 gamma(2d+6) sqrt(d) ||gamma||_inf rounding)."""

    def prop(r: np.ndarray, log_c: float, seed: int, log_scale: float) -> None:
        x = r * 10.0**log_scale
        v = _row_var(x)
        assume(v >= 1e-3 * EPS_LN)
        c = 10.0**log_c
        g = np.random.default_rng(seed).normal(size=x.size)
        b = np.zeros(x.size)
        d = x.size
        gap = np.linalg.norm(layer_norm(c * x, g, b, EPS_LN) - layer_norm(x, g, b, EPS_LN))
        bound = np.abs(g).max() * np.sqrt(d) * EPS_LN / (2 * min(1.0, c * c) * v)
        record_ratio(gap, bound)
        assert gap <= bound + 8 * gamma(2 * d + 6) * np.sqrt(d) * np.abs(g).max()

    # rows with a guaranteed spread (entry 0 pushed 1 above the rest) so that var(x) > 0 by construction
    rows = vectors(2, 16, -1.0, 1.0).map(lambda r: np.concatenate([[r.max() + 1.0], r[1:]]))
    return run_property(profile, prop, rows, reals(-2.0, 2.0), seeds(), reals(-3.0, 1.0))


def scale_error_control(profile: str) -> str:
    """Dropping min(1, c^2) (bound eps/(2v) for every c): fails for c < 1."""

    def prop(r: np.ndarray) -> None:
        x = r * 1e-2
        v = _row_var(x)
        if v < 1e-9:
            return
        ones, zeros = np.ones(x.size), np.zeros(x.size)
        gap = np.linalg.norm(layer_norm(0.1 * x, ones, zeros, EPS_LN) - layer_norm(x, ones, zeros, EPS_LN))
        assert gap <= np.sqrt(x.size) * EPS_LN / (2 * v), "gap exceeds eps/(2v)"

    return expect_counterexample(profile, prop, vectors(4, 16, -1.0, 1.0))


def ln_range_run(profile: str) -> str:
    """(iii) every output row is gamma o u + beta with 1^T u = 0 and ||u||_2 <= sqrt(d); u is layer_norm with
    gamma = 1, beta = 0.  Float slack on 1^T u: the rounding of the mean, d * 2 gamma(d+2) ||x||_inf, survives
    centring and is amplified by 1/sqrt(v + eps) (up to 1e3 for nearly constant rows).  Sharpness: max
    ||u||_2 / sqrt(d) (the mean-zero part is an identity)."""

    def prop(r: np.ndarray, log_scale: float) -> None:
        x = r * 10.0**log_scale
        u = layer_norm(x, np.ones(r.size), np.zeros(r.size), EPS_LN)
        d = r.size
        scale = np.sqrt(_row_var(x) + EPS_LN)
        tol = (2 * d * gamma(d + 2) * np.abs(x).max() + gamma(d) * np.abs(x - x.mean()).sum()
               + (d + 2) * SUBNORMAL_FLOOR) / scale
        assert abs(u.sum()) <= tol + gamma(d) * np.abs(u).sum()
        assert np.linalg.norm(u) <= np.sqrt(d) * (1 + gamma(2 * d + 6))
        record_ratio(float(np.linalg.norm(u)), np.sqrt(d))

    return run_property(profile, prop, vectors(1, 32, -10.0, 10.0), reals(-8.0, 8.0))


def ln_range_control(profile: str) -> str:
    """Dropping the centring (a map that only scales): the output is not mean-zero."""
    r = np.array([1.0, 2.0, 6.0])
    scaled = r / np.sqrt(_row_var(r) + EPS_LN)
    return expect_violation(abs(scaled.sum()) > 1.0, f"1^T u = {scaled.sum():.2f} without centring")


def ln_jacobian(r: np.ndarray, gain: np.ndarray, eps: float = EPS_LN) -> np.ndarray:
    """Exact Jacobian of r -> gain o u(r) + beta: diag(gain) (I - u u^T / d) P / sqrt(v + eps), P = I - 11^T/d."""
    d = r.size
    v = _row_var(r)
    u = (r - r.mean()) / np.sqrt(v + eps)
    p = np.eye(d) - np.ones((d, d)) / d
    return gain[:, None] * ((np.eye(d) - np.outer(u, u) / d) @ p) / np.sqrt(v + eps)


def lipschitz_run(profile: str) -> str:
    """(iv) the exact Jacobian factorization matches central differences of the real layer_norm (rel 1e-5),
    ||J||_2 <= ||gamma||_inf / sqrt(v + eps), and on pairs of rows both with variance >= v0 (a non-convex set):
    ||LN(r1) - LN(r2)|| <= ||gamma||_inf / sqrt(v0 + eps) ||r1 - r2|| (radial argument).  Sharpness: max of
    ||J||_2 / its bound and of ||LN(r1) - LN(r2)|| / (its Lipschitz bound times ||r1 - r2||)."""

    def prop(seed: int, d: int, log_scale: float) -> None:
        rng = np.random.default_rng(seed)
        r = rng.normal(size=d) * 10.0**log_scale
        g, b = rng.normal(size=d), rng.normal(size=d)
        jac = ln_jacobian(r, g)
        h = 1e-6 * max(np.sqrt(_row_var(r) + EPS_LN), 1e-3)
        cols = [(layer_norm(r + h * e, g, b, EPS_LN) - layer_norm(r - h * e, g, b, EPS_LN)) / (2 * h)
                for e in np.eye(d)]
        fd = np.stack(cols, axis=1)
        floor = 1e-7 * np.abs(g).max() / np.sqrt(_row_var(r) + EPS_LN)
        assert np.abs(fd - jac).max() <= 1e-5 * np.abs(jac).max() + floor
        bound = np.abs(g).max() / np.sqrt(_row_var(r) + EPS_LN)
        assert np.linalg.norm(jac, 2) <= bound * (1 + gamma(4 * d))
        record_ratio(float(np.linalg.norm(jac, 2)), bound)
        r2 = rng.normal(size=d) * 10.0 ** (log_scale + rng.uniform(-1, 1))
        v0 = min(_row_var(r), _row_var(r2))
        lip = np.abs(g).max() / np.sqrt(v0 + EPS_LN)
        diff = np.linalg.norm(layer_norm(r, g, b, EPS_LN) - layer_norm(r2, g, b, EPS_LN))
        assert diff <= lip * np.linalg.norm(r - r2) * (1 + gamma(4 * d)) + 8 * UNIT_ROUNDOFF * np.abs(b).max()
        record_ratio(diff, lip * np.linalg.norm(r - r2))

    return run_property(profile, prop, seeds(), st.integers(2, 16), reals(-3.5, 1.0))


def lipschitz_control(profile: str) -> str:
    """Using the larger variance of the pair (v0 = max instead of the floor): the bound fails."""

    def prop(seed: int) -> None:
        rng = np.random.default_rng(seed)
        r1 = rng.normal(size=8) * 1e-3
        r2 = r1 + rng.normal(size=8) * 1.0
        ones, zeros = np.ones(8), np.zeros(8)
        v_max = max(_row_var(r1), _row_var(r2))
        diff = np.linalg.norm(layer_norm(r1, ones, zeros, EPS_LN) - layer_norm(r2, ones, zeros, EPS_LN))
        assert diff <= np.linalg.norm(r1 - r2) / np.sqrt(v_max + EPS_LN), "Lipschitz bound with max variance fails"

    return expect_counterexample(profile, prop, seeds())


_LN = ("pldr_ref.norms.layer_norm",)


def ln_norm_run(profile: str) -> str:
    """sum_i ((r_i - mean) / sqrt(v + eps))^2 = d v / (v + eps) for symbolic r_1..r_d, eps > 0, d = 1..8."""
    eps = sp.Symbol("eps", positive=True)
    for d in range(1, MAX_D + 1):
        r = sp.symbols(f"r0:{d}", real=True)
        mean = sum(r) / d
        v = sum((x - mean) ** 2 for x in r) / d
        lhs = sum(((x - mean) / sp.sqrt(v + eps)) ** 2 for x in r)
        assert _is_zero_rational(lhs - d * v / (v + eps)), d
    return f"d = 1..{MAX_D}"


def _is_zero_rational(expr: sp.Expr) -> bool:
    """True when the rational function ``expr`` is identically zero: the numerator of its single-fraction form,
    expanded, is the zero polynomial (exact, and a fraction of ``sp.simplify``'s work on these sums)."""
    numerator, _ = sp.fraction(sp.together(expr))
    return sp.expand(numerator) == 0


def ln_norm_control(profile: str) -> str:
    """Dropping eps from the identity (claiming sum u^2 = d) is false for eps > 0."""
    eps = sp.Symbol("eps", positive=True)
    r = sp.symbols("r0:2", real=True)
    mean = sum(r) / 2
    v = sum((x - mean) ** 2 for x in r) / 2
    lhs = sum(((x - mean) / sp.sqrt(v + eps)) ** 2 for x in r)
    return expect_violation(not _is_zero_rational(lhs - 2), "sum u^2 != d when eps > 0")


_EX = ("pldr_ref.norms.layer_norm",)




CHECKS = (
    Check(
        name="rowVar_nonneg",
        lean=("rowVar_nonneg",),
        paper="Lem. 5.11",
        label=THEOREM,
        method=(HYPOTHESIS, MPMATH),
        exercises=_EX,
        run=var_nonneg_run,
        negative_control=var_nonneg_control,
        slack="none (exact)",
        dropped="centred (two-pass) evaluation",
    ),
    Check(
        name="rowMean_shift",
        statement=IDENTITY,
        lean=("rowMean_shift",),
        paper="Lem. 5.11(i)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=mean_shift_run,
        negative_control=empty_row_control,
        slack="2 gamma(d+1)(|c| + ||r||_inf) + (d+2) subnormal",
        dropped="d >= 1",
    ),
    Check(
        name="rowVar_shift",
        statement=IDENTITY,
        lean=("rowVar_shift",),
        paper="Lem. 5.11(i)",
        label=THEOREM,
        method=(HYPOTHESIS, MPMATH),
        exercises=_EX,
        run=var_shift_run,
        negative_control=var_shift_control,
        slack="16u(|r|+|c|) spread + 2 gamma(2d+2) v",
        dropped="the shift is constant",
    ),
    Check(
        name="rowMean_smul",
        statement=IDENTITY,
        lean=("rowMean_smul",),
        paper="Lem. 5.11(ii)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=mean_smul_run,
        negative_control=mean_smul_control,
        slack="2 gamma(d+2)|c| ||r||_inf + (d+2)(1+|c|) subnormal",
        dropped="c in place of |c| (operator unchanged)",
        note="relative rounding bounds fail in the subnormal range: an absolute floor of one subnormal per op, "
           "and c * fl(mean r) multiplies the floor of fl(mean r) by |c| (the thorough-profile failure 3.5e-323 vs "
           "3e-323 was that factor missing)",
    ),
    Check(
        name="rowVar_smul",
        statement=IDENTITY,
        lean=("rowVar_smul",),
        paper="Lem. 5.11(ii)",
        label=THEOREM,
        method=(HYPOTHESIS, MPMATH),
        exercises=_EX,
        run=var_smul_run,
        negative_control=var_smul_control,
        slack="c^2(4 gamma(2d+4) s^2 + 4 delta s + 2 delta^2)",
        dropped="the square on c",
    ),
    Check(
        name="lnEps_shift",
        statement=IDENTITY,
        lean=("lnEps_shift",),
        paper="Lem. 5.11(i)",
        label=THEOREM,
        method=(HYPOTHESIS, MPMATH),
        exercises=_EX,
        run=ln_shift_run,
        negative_control=ln_shift_control,
        slack="||g||_inf(16u(|c|+|r|) sqrt(d)/sqrt(v+eps) + 4 gamma(2d+6) sqrt(d)) + 2u||b||_inf",
        dropped="the shift is constant",
        note="eps < 0 not tested: Lean's sqrt(negative) = 0 differs from NumPy's NaN",
    ),
    Check(
        name="lnEps_scale_eps_zero",
        statement=IDENTITY,
        lean=("lnEps_scale_eps_zero",),
        paper="Lem. 5.11(ii)",
        label=THEOREM,
        method=(HYPOTHESIS, MPMATH),
        exercises=_EX,
        run=ln_scale_run,
        negative_control=ln_scale_control,
        slack="8 gamma(2d+6) sqrt(d) ||g||_inf, var(r) >= 1e-6",
        dropped="c > 0",
    ),
    Check(
        name="sum_sq_normalized",
        statement=IDENTITY,
        lean=("sum_sq_normalized",),
        paper="Lem. 5.11(iii)",
        label=THEOREM,
        method=(HYPOTHESIS, MPMATH),
        exercises=_EX,
        run=sum_sq_run,
        negative_control=sum_sq_control,
        slack="4 gamma(2d+6) relative; strict < d in mpmath",
        dropped="eps > 0",
        note="in float64 d v/(v+eps) rounds to d once v/eps > ~1e16: the strict '< d' is checked in mpmath",
    ),
    Check(
        name="layernorm_scale_error",
        lean=(),
        paper="Lem. 5.11(ii)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_LN,
        run=scale_error_run,
        negative_control=scale_error_control,
        slack="8 gamma(2d+6) sqrt(d) ||gamma||_inf",
        dropped="the min(1, c^2) factor",
    ),
    Check(
        name="layernorm_compact_range",
        lean=(),
        paper="Lem. 5.11(iii)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_LN,
        run=ln_range_run,
        negative_control=ln_range_control,
        slack="(2 d gamma(d+2)|x|_inf + gamma(d)|x - mean|_1 + (d+2) subnormal)/sqrt(v+eps) on 1^T u; "
              "relative gamma(2d+6) on ||u||",
        dropped="centring",
        note="strict ||u|| < sqrt(d) is checked in mpmath by sum_sq_normalized; the mean's "
              "rounding is amplified by 1/sqrt(v + eps) in nearly constant rows",
    ),
    Check(
        name="layernorm_lipschitz",
        lean=(),
        paper="Lem. 5.11(iv)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_LN,
        run=lipschitz_run,
        negative_control=lipschitz_control,
        slack="Jacobian vs central differences rel 1e-5; bounds relative gamma(4d)",
        dropped="v0 is the variance floor of both rows",
    ),
    Check(
        name="sympy_layernorm_norm",
        statement=IDENTITY,
        lean=(),
        paper="Lem. 5.11(iii) (the exact identity behind sum_sq_normalized)",
        label=THEOREM,
        method=(SYMPY,),
        exercises=(),
        run=ln_norm_run,
        negative_control=ln_norm_control,
        slack="none (exact)",
        dropped="eps",
    ),
)
