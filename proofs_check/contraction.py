"""Contraction.lean: diam((g o f)(S)) <= K_g K_f diam(S) and diam(f^N(S)) <= K^N diam(S) (paper Prop. 5.12(i)),
on finite point clouds with maps built from the real row-map operators: ``pldr_ref.linear_map.linear`` (K = ||W||_2),
``pldr_ref.norms.layer_norm`` on variance-floored rows (K = ||gamma||_inf / sqrt(v0 + eps), Lem. 5.11(iv)) and
the GLU gate ``pldr_ref.activations.silu`` applied entrywise (K = sup|SiLU'| ~ 1.0998, computed from the
definition z sigma(z); the mirror also checks that the operator is that function and attains that slope).

Beyond Lean: the product bound for N distinct maps (Prop. 5.12(i)-(ii)).
"""

from __future__ import annotations

import functools

import mpmath
import numpy as np
from hypothesis import strategies as st

from pldr_ref.activations import silu
from pldr_ref.constants import EPS_LN
from pldr_ref.linear_map import linear
from pldr_ref.norms import layer_norm
from proofs_check.profiles import expect_counterexample, record_ratio, run_property
from proofs_check.registry import HYPOTHESIS, THEOREM, Check
from proofs_check.rounding import UNIT_ROUNDOFF, gamma
from proofs_check.strategies import seeds


def diameter(points: np.ndarray) -> float:
    """max pairwise Euclidean distance of the rows of ``points`` [n, dim]."""
    diff = points[:, None, :] - points[None, :, :]
    return float(np.sqrt(np.max(np.sum(diff * diff, axis=-1))))


def ln_lipschitz(rows: np.ndarray, gain: np.ndarray, eps: float = EPS_LN) -> float:
    """||gamma||_inf / sqrt(v0 + eps) with v0 the smallest row variance of the cloud (Lemma 5.11(iv))."""
    v0 = float(np.min(np.var(rows, axis=-1)))
    return float(np.abs(gain).max() / np.sqrt(v0 + eps))


#: Step of the central difference that measures the operator's slope at the maximizer of SiLU' (its error is
#: about h^2 |SiLU^(3)(u*)| / 6 ~ 1e-10, far below the 1e-6 slack; the rounding error is about u / h ~ 1e-12).
SLOPE_STEP = 1e-4
SLOPE_SLACK = 1e-6
MP_DPS = 30


@functools.lru_cache(maxsize=1)
def silu_slope_sup() -> tuple[float, float]:
    """(u*, sup|SiLU'|) from the definition silu(u) = u sigma(u): SiLU'(u) = sigma(u) (1 + u (1 - sigma(u))) has
    its maximum where SiLU''(u) = sigma'(u) (2 + u (1 - 2 sigma(u))) = 0, i.e. u tanh(u / 2) = 2 (mpmath)."""
    with mpmath.workdps(MP_DPS):
        u = mpmath.findroot(lambda v: v * mpmath.tanh(v / 2) - 2, 2.4)
        sig = 1 / (1 + mpmath.exp(-u))
        return float(u), float(sig * (1 + u * (1 - sig)))


def check_silu_is_the_definition(z: np.ndarray) -> None:
    """The real ``silu`` is u sigma(u) (mpmath, within 8u relative) at the points ``z``: K = sup|SiLU'| is a
    Lipschitz constant of that function, so the operator must be it."""
    got = silu(z)
    with mpmath.workdps(MP_DPS):
        for u, value in zip(z.ravel().tolist(), got.ravel().tolist(), strict=True):
            exact = mpmath.mpf(u) / (1 + mpmath.exp(-mpmath.mpf(u)))
            assert abs(value - exact) <= 8 * UNIT_ROUNDOFF * abs(exact) + 1e-300, (u, value)


def check_silu_attains_its_slope() -> float:
    """The real ``silu``'s central difference at u* equals sup|SiLU'| within :data:`SLOPE_SLACK` (the constant
    is sharp for the operator, not only an upper bound); returns the measured slope."""
    u_star, k = silu_slope_sup()
    h = SLOPE_STEP
    slope = float((silu(np.array(u_star + h)) - silu(np.array(u_star - h))) / (2 * h))
    assert abs(slope - k) <= SLOPE_SLACK, f"silu slope at {u_star:.4f} is {slope:.6f}, sup|SiLU'| = {k:.6f}"
    return slope


def _cloud(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    return rng.normal(size=(n, dim)) * rng.uniform(0.1, 3.0)


def comp_run(profile: str) -> str:
    """g o f with f = linear(W1, b1) (K_f = ||W1||_2) and g = layer_norm (K_g from the floored variance of f(S)),
    and with g = linear(W2, b2): diam(g(f(S))) <= K_g K_f diam(S) (1 + 4 gamma(dim+2))."""

    def prop(seed: int, n: int, dim: int) -> None:
        rng = np.random.default_rng(seed)
        s = _cloud(rng, n, dim)
        w1, b1 = rng.normal(size=(dim, dim)), rng.normal(size=dim)
        w2, b2 = rng.normal(size=(dim, dim)), rng.normal(size=dim)
        gain, shift = rng.normal(size=dim), rng.normal(size=dim)
        fs = linear(s, w1, b1)
        k_f = np.linalg.norm(w1, 2)
        slack = 1 + 4 * gamma(dim + 2)
        g_ln = layer_norm(fs, gain, shift, EPS_LN)
        assert diameter(g_ln) <= ln_lipschitz(fs, gain) * k_f * diameter(s) * slack + 1e-12
        g_lin = linear(fs, w2, b2)
        bound = np.linalg.norm(w2, 2) * k_f * diameter(s)
        record_ratio(diameter(g_lin), bound)
        assert diameter(g_lin) <= bound * slack + 1e-12
        check_silu_is_the_definition(fs)
        g_silu = silu(fs)  # the GLU gate, entrywise: K_g = sup|SiLU'| in the Euclidean norm too
        assert diameter(g_silu) <= silu_slope_sup()[1] * k_f * diameter(s) * slack + 1e-12

    slope = check_silu_attains_its_slope()
    detail = run_property(profile, prop, seeds(), st.integers(2, 12), st.integers(2, 8))
    return f"{detail}; silu slope at u* {slope:.6f} = sup|SiLU'| {silu_slope_sup()[1]:.6f}"


def comp_control(profile: str) -> str:
    """Dropping "f is K_f-Lipschitz" (K_f = 1 claimed for an expanding f = linear(3 W)): the bound fails."""

    def prop(seed: int) -> None:
        rng = np.random.default_rng(seed)
        s = _cloud(rng, 6, 4)
        w1, w2 = 3 * rng.normal(size=(4, 4)), rng.normal(size=(4, 4))
        out = linear(linear(s, w1), w2)
        assert diameter(out) <= np.linalg.norm(w2, 2) * diameter(s), "diameter exceeds K_g diam(S)"

    return expect_counterexample(profile, prop, seeds())


def iterate_run(profile: str) -> str:
    """f = linear(W, b) with ||W||_2 = K in (0.2, 1.2): diam(f^N(S)) <= K^N diam(S) (1 + 4 N gamma(dim+2))."""

    def prop(seed: int, n_iter: int, dim: int) -> None:
        rng = np.random.default_rng(seed)
        w = rng.normal(size=(dim, dim))
        w *= rng.uniform(0.2, 1.2) / np.linalg.norm(w, 2)
        b = rng.normal(size=dim)
        k = np.linalg.norm(w, 2)
        s = _cloud(rng, 8, dim)
        x = s
        for _ in range(n_iter):  # the iterate f^[N] is sequential by definition
            x = linear(x, w, b)
        bound = k**n_iter * diameter(s) * (1 + 4 * (n_iter + 1) * gamma(dim + 2))
        record_ratio(diameter(x), bound)
        assert diameter(x) <= bound + 1e-13 * diameter(s)

    # N = 0 is the identity (diam f^0(S) = diam S): N starts at 1 so that every example calls the operator
    return run_property(profile, prop, seeds(), st.integers(1, 12), st.integers(1, 6))


def iterate_control(profile: str) -> str:
    """The spectral radius rho(W) < ||W||_2 of a non-normal W is not a Lipschitz constant: diam(f^N(S)) exceeds
    rho^N diam(S)."""

    def prop(seed: int) -> None:
        rng = np.random.default_rng(seed)
        w = np.array([[0.5, 4.0], [0.0, 0.5]])
        s = _cloud(rng, 8, 2)
        x = s
        for _ in range(2):
            x = linear(x, w)
        rho = float(np.max(np.abs(np.linalg.eigvals(w))))
        assert diameter(x) <= rho**2 * diameter(s), "exceeds rho^N diam"

    return expect_counterexample(profile, prop, seeds())


def composition_run(profile: str) -> str:
    """diam(u_N o ... o u_1 (S)) <= (prod_j L_j) diam(S) for N distinct maps u_j = layer_norm(linear(., W_j, b_j))
    with L_j = ||W_j||_2 ||gamma_j||_inf / sqrt(v0_j + eps) (v0_j the variance floor of the stage input cloud),
    and every output lies within (prod L_j) diam(S) of phi(r0) (Prop. 5.12(ii) centre).  Sharpness: max
    diam(output) / ((prod L_j) diam(S))."""

    def prop(seed: int, n_maps: int, dim: int) -> None:
        rng = np.random.default_rng(seed)
        s = rng.normal(size=(8, dim)) * rng.uniform(0.1, 2.0)
        x, lip = s, 1.0
        for _ in range(n_maps):  # the maps are distinct and applied in sequence (depth, not data)
            w, b = rng.normal(size=(dim, dim)), rng.normal(size=dim)
            g, beta = rng.normal(size=dim), rng.normal(size=dim)
            y = linear(x, w, b)
            lip *= np.linalg.norm(w, 2) * ln_lipschitz(y, g)
            x = layer_norm(y, g, beta, EPS_LN)
        slack = 1 + 8 * n_maps * gamma(dim + 8)
        assert diameter(x) <= lip * diameter(s) * slack + 1e-12
        record_ratio(diameter(x), lip * diameter(s))
        assert np.max(np.linalg.norm(x - x[0], axis=1)) <= lip * diameter(s) * slack + 1e-12

    return run_property(profile, prop, seeds(), st.integers(1, 5), st.integers(2, 8))


def composition_control(profile: str) -> str:
    """Dropping one factor L_j from the product: the bound fails for an expanding stage."""

    def prop(seed: int) -> None:
        rng = np.random.default_rng(seed)
        s = rng.normal(size=(8, 4))
        w1, w2 = 5 * rng.normal(size=(4, 4)), rng.normal(size=(4, 4))
        out = linear(linear(s, w1), w2)
        assert diameter(out) <= np.linalg.norm(w2, 2) * diameter(s), "exceeds the product without L_1"

    return expect_counterexample(profile, prop, seeds())


_EX = ("pldr_ref.linear_map.linear", "pldr_ref.norms.layer_norm", "pldr_ref.activations.silu")
CHECKS = (
    Check(
        name="diam_comp_le",
        lean=("diam_comp_le",),
        paper="Prop. 5.12(i)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=comp_run,
        negative_control=comp_control,
        slack="relative 4 gamma(dim+2) + 1e-12",
        dropped="f is K_f-Lipschitz",
    ),
    Check(
        name="diam_iterate_le",
        lean=("diam_iterate_le",),
        paper="Prop. 5.12(i)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=("pldr_ref.linear_map.linear",),
        run=iterate_run,
        negative_control=iterate_control,
        slack="relative 4(N+1) gamma(dim+2)",
        dropped="f is K-Lipschitz",
    ),
    Check(
        name="composition_diameter",
        lean=(),
        paper="Prop. 5.12(i)-(ii)",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=("pldr_ref.linear_map.linear", "pldr_ref.norms.layer_norm"),
        run=composition_run,
        negative_control=composition_control,
        slack="relative 8 N gamma(dim+8) + 1e-12",
        dropped="one Lipschitz factor of the product",
    ),
)
