"""Proved results of the paper that the Lean development does not formalize (catalog section 4):
Perron-Frobenius structure of A_LM (Thm. 3.8), the singular-value perturbation bound (Prop. 3.9(iv)), the full
multi-plane commutant criterion under nonresonance with its converse (Prop. 4.1, Cor. 7.1), the matrix-level
frequency-resolved twirl bound (Lem. 5.9) and matrix Bernstein concentration (Prop. 5.10)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from pldr_ref.density import density_operator
from pldr_ref.plga import metric_tensor
from pldr_ref.rope import apply_rope
from proofs_check.models import tiny_forward
from proofs_check.profiles import expect_violation, run_property, trials
from proofs_check.real_data import REAL_D_K, real_g_lm
from proofs_check.registry import CONDITIONAL, HYPOTHESIS, MONTE_CARLO, REAL_G_LM, THEOREM, Check
from proofs_check.rounding import UNIT_ROUNDOFF, gamma
from proofs_check.strategies import seeds
from proofs_check.torus import (
    c_theta,
    commutant_projection,
    commutant_residual,
    difference_frequencies,
    eigenbasis,
    rope_rotation,
    twirl_average,
    twirl_multiplier,
)

# ---------------------------------------------------------------- Theorem 3.8 (Perron-Frobenius)


def perron_structure(a: np.ndarray) -> tuple[float, float, float, float]:
    """(rho, relative spectral gap (rho - |lambda_2|)/rho, min right Perron vector entry, min left entry) for a
    square matrix; eigenvectors normalized to unit 2-norm and sign-fixed so that their sum is positive."""
    lam, right = np.linalg.eig(a)
    order = np.argsort(-np.abs(lam))
    lam, right = lam[order], right[:, order]
    lam_l, left = np.linalg.eig(a.T)
    left = left[:, np.argmax(np.abs(lam_l))]
    v, w = right[:, 0], left
    v = np.real(v * np.sign(np.real(v.sum())))
    w = np.real(w * np.sign(np.real(w.sum())))
    rho = float(np.abs(lam[0]))
    gap = (rho - float(np.abs(lam[1]))) / rho if lam.size > 1 else 1.0
    assert abs(lam[0].imag) <= 1e-12 * rho and lam[0].real > 0, f"dominant eigenvalue {lam[0]} is not the Perron root"
    return rho, gap, float(v.min() / np.abs(v).max()), float(w.min() / np.abs(w).max())


def perron_run(profile: str) -> str:
    """A_LM > 0 => rho(A_LM) is a simple positive eigenvalue with positive left/right eigenvectors and every other
    |lambda| < rho: on A_LM = metric_tensor(...) of random inputs and on every head of a real forward pass.
    Float form: the dominant eigenvalue is real positive (|Im| <= 1e-12 rho), eigenvector entries > 0."""

    def prop(seed: int, d: int) -> None:
        rng = np.random.default_rng(seed)
        a = rng.normal(size=(1, 1, d, d))
        a_lm = metric_tensor(a, rng.normal(size=(1, d, d)), rng.normal(size=(1, d, d)))[0, 0]
        _, gap, vmin, wmin = perron_structure(a_lm)
        assert gap > 0 and vmin > 0 and wmin > 0

    detail = run_property(profile, prop, seeds(), st.integers(1, 12))
    gaps = []
    for layer in tiny_forward().layers:
        for a_lm in layer.A_LM.reshape(-1, *layer.A_LM.shape[-2:]):
            _, gap, vmin, wmin = perron_structure(a_lm)
            assert gap > 0 and vmin > 0 and wmin > 0
            gaps.append(gap)
    return detail + f"; forward A_LM heads: min relative spectral gap {min(gaps):.3f}"


def perron_control(profile: str) -> str:
    """Positivity dropped: the real G_LM heads (signed) violate the Perron structure on most heads."""
    bad = 0
    g = real_g_lm().reshape(-1, REAL_D_K, REAL_D_K)
    for head in g:
        try:
            _, gap, vmin, wmin = perron_structure(head)
            bad += not (gap > 0 and vmin > 0 and wmin > 0)
        except AssertionError:
            bad += 1
    return expect_violation(bad > 0, f"{bad} of {len(g)} real G_LM heads lack the Perron structure")


# ---------------------------------------------------------------- Proposition 3.9(iv)


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
    mean row (any alpha is allowed) and delta = ||G - 1 alpha^T||_2."""

    def prop(seed: int, d: int, scale: float) -> None:
        rng = np.random.default_rng(seed)
        alpha = rng.normal(size=d)
        delta_m = scale * rng.normal(size=(d, d))
        m = np.ones((d, 1)) * alpha + delta_m
        assert all(sv_bound_holds(m, alpha, float(np.linalg.norm(delta_m, 2))))

    detail = run_property(profile, prop, seeds(), st.integers(1, 10), st.sampled_from([1e-8, 1e-3, 0.1, 10.0]))
    worst = 0.0
    for g in real_g_lm().reshape(-1, REAL_D_K, REAL_D_K):
        alpha = g.mean(axis=0)
        delta = float(np.linalg.norm(g - np.ones((REAL_D_K, 1)) * alpha, 2))
        assert all(sv_bound_holds(g, alpha, delta))
        worst = max(worst, float(np.linalg.svd(g, compute_uv=False)[1] / delta))
    return detail + f"; real G_LM: max sigma_2 / delta = {worst:.3f}"


def sv_perturbation_control(profile: str) -> str:
    """Dropping ||Delta||_2 <= delta (delta taken as half the norm): sigma_2 exceeds delta."""
    rng = np.random.default_rng(3)
    alpha, delta_m = rng.normal(size=6), rng.normal(size=(6, 6))
    m = np.ones((6, 1)) * alpha + delta_m
    sv_ok, _ = sv_bound_holds(m, alpha, 0.5 * float(np.linalg.norm(delta_m, 2)))
    return expect_violation(not sv_ok, "sigma_2 > ||Delta||_2 / 2")


# ---------------------------------------------------------------- Proposition 4.1 / Corollary 7.1


def commutant_dimension(d_k: int, base: float) -> int:
    """dim_R {G : G R_1 = R_1 G} from the null space of G -> G R_1 - R_1 G (real RoPE matrix R_1)."""
    r1 = rope_rotation(np.array([1.0]), d_k, base)[0]
    eye = np.eye(d_k)
    # vec(G R - R G) = (R^T kron I - I kron R) vec(G) for column-major vec
    op = np.kron(r1.T, eye) - np.kron(eye, r1)
    sv = np.linalg.svd(op, compute_uv=False)
    return int(np.sum(sv <= 1e-10 * sv[0]))


def conjugation_defect(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(||R_1 G R_1^T - G||_F^2, sum_jk 4 sin^2((w_j - w_k)/2) |G~_jk|^2) over heads (exact identity)."""
    d = g.shape[-1]
    r1 = rope_rotation(np.array([1.0]), d)[0]
    lhs = np.sum((r1 @ g @ r1.T - g) ** 2, axis=(-2, -1))
    u, w = eigenbasis(d)
    gt = u.conj().T @ g @ u
    rhs = np.sum(4 * np.sin((w[:, None] - w[None, :]) / 2) ** 2 * np.abs(gt) ** 2, axis=(-2, -1))
    return lhs, rhs


def commutant_run(profile: str) -> str:
    """Nonresonance of the real frequencies (d_k = 64, base 1e4: 2016 difference frequencies, min |sin(w/2)| > 0);
    commutant dimension = d_k for d_k in (2, 4, 8, 16) (Cor. 7.1: codimension d_k^2 - d_k); (if) Pi G commutes with
    R_n for all n; (converse) the exact identity ||R_1 G R_1^T - G||_F^2 = sum 4 sin^2(dw/2)|G~_jk|^2 >=
    (4 / C_Theta^2) ||G - Pi G||_F^2 on all 70 real G_LM heads, so commuting with R_1 forces G = Pi G."""
    freqs = difference_frequencies(REAL_D_K)
    min_sin = float(np.min(np.abs(np.sin(freqs / 2))))
    assert min_sin > 0
    for d in (2, 4, 8, 16):
        assert commutant_dimension(d, 10000.0) == d, d

    def prop(seed: int, n: int) -> None:
        g = real_g_lm()[seed % 5, (seed // 5) % 14]
        pg = commutant_projection(g)
        rn = rope_rotation(np.array([float(n)]), REAL_D_K)[0]
        assert np.abs(rn @ pg - pg @ rn).max() <= 16 * UNIT_ROUNDOFF * (1 + n) * np.abs(pg).sum(axis=1).max()
        assert np.allclose(commutant_projection(pg), pg, rtol=0, atol=4 * UNIT_ROUNDOFF * np.abs(g).max())

    detail = run_property(profile, prop, seeds(), st.integers(0, 100_000))
    g = real_g_lm().reshape(-1, REAL_D_K, REAL_D_K)
    lhs, rhs = conjugation_defect(g)
    assert np.all(np.abs(lhs - rhs) <= 1e-12 * np.sum(g**2, axis=(-2, -1)))
    c = c_theta(freqs)
    off = np.sum((g - commutant_projection(g)) ** 2, axis=(-2, -1))
    assert np.all(lhs >= 4 / c**2 * off * (1 - 1e-9))
    res = commutant_residual(g)
    return detail + (f"; min |sin(w/2)| = {min_sin:.3e}; real G_LM commutant residual median {np.median(res):.3f}"
                     f" (range {res.min():.3f}-{res.max():.3f})")


def commutant_control(profile: str) -> str:
    """Dropping nonresonance (base 1: every plane has theta = 1): the commutant is larger than d_k."""
    dim = commutant_dimension(4, 1.0)
    return expect_violation(dim > 4, f"resonant d_k = 4 commutant has dimension {dim}")


# ---------------------------------------------------------------- Lemma 5.9 (matrix-level twirl)


def twirl_components(m: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(|entries of U*(T_S M - Pi M)U|, mult(w_j - w_k, S) |M~_jk| (0 at zero frequency), zero-frequency mask)."""
    d = m.shape[-1]
    u, w = eigenbasis(d)
    dw = w[:, None] - w[None, :]
    zero = np.abs(dw) < 1e-12
    with np.errstate(invalid="ignore", divide="ignore"):
        mult = np.where(zero, 0.0, twirl_multiplier(np.where(zero, 1.0, dw), s))
    lhs = np.abs(u.conj().T @ (twirl_average(m, s, d) - commutant_projection(m)) @ u)
    return lhs, mult * np.abs(u.conj().T @ m @ u), zero


def twirl_matrix_run(profile: str) -> str:
    """||T_S(M) - Pi(M)||_F <= (C_Theta / S) ||M - Pi(M)||_F, and frequency-resolved: every eigenbasis entry of
    T_S(M) - Pi(M) has modulus mult(w_j - w_k, S) |M~_jk| (atol 1e-12 ||M||_F), zero at zero frequency; on real
    G_LM heads (d_k = 64, interleaved, base 1e4) for S in (1, 16, 64[, 256, 1024])."""
    heads = real_g_lm().reshape(-1, REAL_D_K, REAL_D_K)
    lengths = (1, 16, 64) if profile == "ci" else (1, 16, 64, 256, 1024)
    heads = heads[:: 14] if profile == "ci" else heads
    c = c_theta(difference_frequencies(REAL_D_K))
    worst = {}
    for s in lengths:
        lhs, rhs, zero = twirl_components(heads, s)
        scale = np.linalg.norm(heads, axis=(-2, -1))[:, None, None]
        assert np.all(np.abs(lhs - rhs) <= 1e-12 * scale)
        assert np.all(lhs[:, zero] <= 1e-12 * scale[:, :, 0])
        dist = np.linalg.norm(twirl_average(heads, s, REAL_D_K) - commutant_projection(heads), axis=(-2, -1))
        off = np.linalg.norm(heads - commutant_projection(heads), axis=(-2, -1))
        assert np.all(dist <= c / s * off * (1 + 1e-12))
        worst[s] = float(np.max(dist / off))
    return f"{len(heads)} real heads; max ||T_S M - Pi M|| / ||M - Pi M|| by S: " + ", ".join(
        f"{s}: {v:.3f}" for s, v in worst.items()) + f"; C_Theta = {c:.4e}"


def twirl_matrix_control(profile: str) -> str:
    """Dropping nonresonance (base 1, d_k = 4: both planes at theta = 1): cross-plane zero-frequency entries are
    not averaged away, so T_S(M) does not approach the block projection Pi(M) at the C/S rate."""
    m = np.random.default_rng(4).normal(size=(4, 4))
    s = 1000
    r = rope_rotation(np.arange(1, s + 1), 4, base=1.0)
    avg = np.mean(r @ m @ np.swapaxes(r, -1, -2), axis=0)
    c = float(1 / abs(np.sin(1.0)))  # the only nonzero difference frequency is 2 theta = 2
    dist = np.linalg.norm(avg - commutant_projection(m))
    bound = c / s * np.linalg.norm(m - commutant_projection(m))
    return expect_violation(dist > 10 * bound, f"||T_S M - Pi M|| = {dist:.3f} > (C/S)||M - Pi M|| = {bound:.1e}")


# ---------------------------------------------------------------- Proposition 5.10 (matrix Bernstein)

BERNSTEIN_D_K = 8
BERNSTEIN_S = 64


def bernstein_tail(t: np.ndarray, s: int, d: int, b_q: float) -> np.ndarray:
    """2 d exp(-(S t^2 / 2) / (B_q^4 + B_q^2 t / 3)) (Tropp Thm 1.6.2 with L = B_q^2/S, v = B_q^4/S)."""
    return 2 * d * np.exp(-(s * t**2 / 2) / (b_q**4 + b_q**2 * t / 3))


def _bernstein_population(rng: np.random.Generator, k: int, d: int) -> tuple[np.ndarray, np.ndarray, float]:
    """A finite population of k vectors (uniform law), its exact second moment Sigma and B_q = max norm."""
    pop = rng.normal(size=(k, d)) * np.linspace(0.3, 1.5, d)
    sigma = pop.T @ pop / k
    return pop, sigma, float(np.max(np.linalg.norm(pop, axis=1)))


def fluctuation_norms(pop: np.ndarray, sigma: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """||(1/S) sum_n R_n (q_n q_n^T - Sigma) R_n^T||_2 for each trial; draws [T, S] index the population.
    (1/S) sum R_n q_n q_n^T R_n^T is the real density operator of the RoPE-rotated queries divided by S."""
    s = draws.shape[1]
    d = pop.shape[1]
    q = pop[draws]  # [T, S, d]
    q_rot = apply_rope(q, np.arange(1, s + 1))  # row n rotated by R_n
    emp = density_operator(q_rot[:, None])[:, 0] / s
    r = rope_rotation(np.arange(1, s + 1), d)
    mean_part = np.mean(r @ sigma @ np.swapaxes(r, -1, -2), axis=0)
    return np.linalg.norm(emp - mean_part, ord=2, axis=(-2, -1))


def bernstein_run(profile: str) -> str:
    """Monte Carlo (conditional theorem: independent q_n, ||q_n|| <= B_q, common Sigma): summand bound
    ||R_n(q q^T - Sigma)R_n^T||_2 <= B_q^2; variance proxy ||E (qq^T - Sigma)^2||_2 <= B_q^4; empirical tail
    P(||X||_2 >= t) <= bound(t) + 4 sqrt(bound/T) + 4/T on every t where the bound is below 1."""
    rng = np.random.default_rng(510)
    d, s = BERNSTEIN_D_K, BERNSTEIN_S
    pop, sigma, b_q = _bernstein_population(rng, 32, d)
    summands = pop[:, :, None] * pop[:, None, :] - sigma
    assert np.all(np.linalg.norm(summands, ord=2, axis=(-2, -1)) <= b_q**2 * (1 + 8 * UNIT_ROUNDOFF))
    var = np.linalg.norm(np.mean(summands @ summands, axis=0), 2)
    assert var <= b_q**4
    n_trials = trials(profile, ci=400, thorough=4000)
    norms = fluctuation_norms(pop, sigma, rng.integers(0, len(pop), size=(n_trials, s)))
    ts = np.linspace(0.05, 3.0, 60) * b_q**2
    bound = bernstein_tail(ts, s, d, b_q)
    emp = np.array([np.mean(norms >= t) for t in ts])
    live = bound < 1
    assert np.any(live)
    assert np.all(emp[live] <= bound[live] + 4 * np.sqrt(bound[live] / n_trials) + 4 / n_trials)
    t_star = float(ts[live][0])
    return (f"{n_trials} trials, S = {s}, d_k = {d}, B_q^2 = {b_q**2:.2f}; first non-vacuous t = {t_star:.2f} "
            f"(bound {bound[live][0]:.3f}, empirical {emp[live][0]:.4f}); median ||X|| = {np.median(norms):.3f}")


def bernstein_control(profile: str) -> str:
    """Dropping independence (q_n = q_1 for every n): the fluctuation does not concentrate and the empirical tail
    exceeds the Bernstein bound."""
    rng = np.random.default_rng(511)
    d, s = BERNSTEIN_D_K, BERNSTEIN_S
    pop, sigma, b_q = _bernstein_population(rng, 32, d)
    n_trials = trials(profile, ci=200, thorough=1000)
    draws = np.repeat(rng.integers(0, len(pop), size=(n_trials, 1)), s, axis=1)
    norms = fluctuation_norms(pop, sigma, draws)
    ts = np.linspace(0.05, 3.0, 60) * b_q**2
    bound = bernstein_tail(ts, s, d, b_q)
    emp = np.array([np.mean(norms >= t) for t in ts])
    live = bound < 0.01
    excess = emp[live] - (bound[live] + 4 * np.sqrt(bound[live] / n_trials) + 4 / n_trials)
    return expect_violation(bool(np.any(excess > 0)), f"max tail excess {excess.max():.3f} with dependent draws")


CHECKS = (
    Check("perron_frobenius_A_LM", (), "Thm. 3.8", THEOREM, (HYPOTHESIS, REAL_G_LM),
          ("pldr_ref.plga.metric_tensor", "pldr_ref.model.forward"), perron_run, perron_control,
          slack="dominant eigenvalue |Im| <= 1e-12 rho; strict gap and positivity in float",
          dropped="A_LM > 0 (signed real G_LM instead)"),
    Check("singular_value_perturbation", (), "Prop. 3.9(iv)", THEOREM, (HYPOTHESIS, REAL_G_LM),
          (), sv_perturbation_run, sv_perturbation_control,
          slack="4 gamma(d) sigma_1 on singular values; log-determinant", dropped="||Delta||_2 <= delta",
          note="determinant bound compared in logs: at d_k = 64 the products under/overflow"),
    Check("commutant_criterion_multiplane", (), "Prop. 4.1 / Cor. 7.1", THEOREM, (HYPOTHESIS, REAL_G_LM),
          ("pldr_ref.rope.apply_rope", "pldr_ref.rope.rope_frequencies"), commutant_run, commutant_control,
          slack="null-space threshold 1e-10 sigma_1; identity at 1e-12 ||G||_F^2", dropped="nonresonance"),
    Check("twirl_matrix_bound", (), "Lem. 5.9", THEOREM, (REAL_G_LM,),
          ("pldr_ref.rope.apply_rope", "pldr_ref.rope.rope_frequencies"), twirl_matrix_run, twirl_matrix_control,
          slack="entrywise 1e-12 ||M||_F; Frobenius bound relative 1e-12",
          dropped="nonresonance", note="the uniform constant C_Theta/S is vacuous at S = 1024; the exact "
          "per-frequency multiplier is what the check pins"),
    Check("matrix_bernstein", (), "Prop. 5.10", CONDITIONAL, (MONTE_CARLO,),
          ("pldr_ref.density.density_operator", "pldr_ref.rope.apply_rope"), bernstein_run, bernstein_control,
          slack="binomial 4 sqrt(bound/T) + 4/T", dropped="independence of the q_n"),
)
