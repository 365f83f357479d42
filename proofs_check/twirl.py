"""TwirlBound.lean: the chord |1 - e^{i w}| = 2|sin(w/2)| and the geometric orbit bound
|sum_{n=1..S} e^{i w n}| <= 1/|sin(w/2)| (paper Lem. 5.9 analytic core), on the real RoPE frequencies.

Beyond Lean: the matrix-level frequency-resolved twirl bound (Lem. 5.9), matrix Bernstein concentration of
the rotated density operator (Prop. 5.10), and the sympy identity for the geometric-sum multiplier.
"""

from __future__ import annotations

import mpmath
import numpy as np
import sympy as sp
from hypothesis import strategies as st

from pldr_ref.density import density_operator
from pldr_ref.rope import apply_rope
from proofs_check.profiles import expect_counterexample, expect_violation, record_ratio, run_property, trials
from proofs_check.real_data import REAL_D_K, real_g_lm
from proofs_check.registry import (
    CONDITIONAL,
    HYPOTHESIS,
    IDENTITY,
    MONTE_CARLO,
    MPMATH,
    REAL_G_LM,
    SYMPY,
    THEOREM,
    Check,
)
from proofs_check.rounding import UNIT_ROUNDOFF, gamma
from proofs_check.strategies import MAX_D, reals
from proofs_check.torus import (
    c_theta,
    commutant_projection,
    difference_frequencies,
    eigenbasis,
    plane_frequencies,
    rope_rotation,
    twirl_average,
    twirl_multiplier,
)

MP_DPS = 50
ORBIT_LENGTHS = (1, 64, 256, 1024)


def chord_run(profile: str) -> str:
    """|1 - e^{i w}| = 2|sin(w/2)|: mpmath at 50 digits for any w; float64 at rtol 4u(1+|w|) where
    |sin(w/2)| >= 1e-3; and per RoPE plane ||(I - R_1) x|| = 2|sin(theta_a/2)| ||x|| with the real rotations."""

    th_all = plane_frequencies(REAL_D_K)

    def prop(w: float, plane: int, position: int) -> None:
        with mpmath.workdps(MP_DPS):
            lhs = abs(1 - mpmath.expj(mpmath.mpf(w)))
            rhs = 2 * abs(mpmath.sin(mpmath.mpf(w) / 2))
            assert abs(lhs - rhs) <= mpmath.mpf(10) ** (-MP_DPS + 5) * (1 + rhs)
        if abs(np.sin(w / 2)) >= 1e-3:
            got = abs(1 - np.exp(1j * w))
            assert abs(got - 2 * abs(np.sin(w / 2))) <= 4 * UNIT_ROUNDOFF * (1 + abs(w)) * 1e3 * got
        # the real RoPE: ||x - R_n x|| = 2 |sin(n theta_a / 2)| ||x|| for x = e_{2a} (one plane)
        x = np.zeros((1, REAL_D_K))
        x[0, 2 * plane] = 1.0
        moved = apply_rope(x, np.array([position]))
        angle = position * th_all[plane]
        chord = float(np.linalg.norm(x - moved))
        assert abs(chord - 2 * abs(np.sin(angle / 2))) <= 8 * UNIT_ROUNDOFF * (1 + angle)

    detail = run_property(profile, prop, reals(-100.0, 100.0), st.integers(0, REAL_D_K // 2 - 1),
                          st.integers(0, 100_000))
    th = plane_frequencies(REAL_D_K)
    r1 = rope_rotation(np.array([1.0]), REAL_D_K)[0]
    x = np.zeros((REAL_D_K, REAL_D_K // 2))
    x[np.arange(0, REAL_D_K, 2), np.arange(REAL_D_K // 2)] = 1.0  # e_{2a}: one vector per plane
    chord = np.linalg.norm(x - r1 @ x, axis=0)
    assert np.all(np.abs(chord - 2 * np.abs(np.sin(th / 2))) <= 8 * UNIT_ROUNDOFF)
    return detail + "; 32 real RoPE planes"


def chord_control(profile: str) -> str:
    """The full angle in place of the half angle (|1 - e^{iw}| = 2|sin w|) is caught by the same comparison."""

    def prop(w: float) -> None:
        got = abs(1 - np.exp(1j * w))
        assert abs(got - 2 * abs(np.sin(w))) <= 4 * UNIT_ROUNDOFF * (1 + abs(w)) * 1e3 * got, "chord != 2|sin w|"

    return expect_counterexample(profile, prop, reals(0.1, 3.0))


def orbit_sum(w: np.ndarray, s: int) -> np.ndarray:
    """|sum_{n=1..S} e^{i w n}| evaluated directly (float64)."""
    n = np.arange(1, s + 1)
    return np.abs(np.exp(1j * np.multiply.outer(np.asarray(w), n)).sum(axis=-1))


def orbit_run(profile: str) -> str:
    """sin(w/2) != 0 => |sum_{n=1..S} e^{iwn}| <= 1/|sin(w/2)|: closed form |sin(Sw/2)|/|sin(w/2)| vs the direct
    sum in mpmath; float direct sum <= bound (1 + gamma(S+2)) + S u on all 2016 real RoPE difference frequencies
    for S in (1, 64, 256, 1024) and S = 0; resonance S w in 2 pi Z gives ~0."""

    th_all = plane_frequencies(REAL_D_K)

    def prop(w: float, s: int, plane: int) -> None:
        with mpmath.workdps(MP_DPS):
            wm = mpmath.mpf(w)
            direct = abs(mpmath.fsum(mpmath.expj(wm * n) for n in range(1, s + 1)))
            closed = abs(mpmath.sin(s * wm / 2)) / abs(mpmath.sin(wm / 2))
            assert abs(direct - closed) <= mpmath.mpf(10) ** (-MP_DPS + 10) * (1 + closed)
            assert direct <= 1 / abs(mpmath.sin(wm / 2)) * (1 + mpmath.mpf(10) ** (-MP_DPS + 10))
            record_ratio(float(direct * abs(mpmath.sin(wm / 2))))
        # the real RoPE orbit of one plane: ||sum_{n=1..S} R_n e_{2a}|| = |sum_n e^{i n theta_a}|
        x = np.zeros((max(s, 1), REAL_D_K))
        x[:, 2 * plane] = 1.0
        orbit = apply_rope(x, np.arange(1, max(s, 1) + 1))[:s].sum(axis=0)
        bound = 1 / abs(np.sin(th_all[plane] / 2))
        assert np.linalg.norm(orbit) <= bound * (1 + gamma(s + 2)) + 8 * s * UNIT_ROUNDOFF

    # every w, including near the resonances 2 pi k (k = -3..3) where the bound 1/|sin(w/2)| blows up
    near_resonance = st.tuples(st.integers(-3, 3), st.sampled_from([-1.0, 1.0]), reals(-12.0, 0.5)).map(
        lambda t: 2 * np.pi * t[0] + t[1] * 10.0 ** t[2]).filter(lambda w: np.sin(w / 2) != 0.0)
    omegas = st.one_of(reals(-1e3, 1e3).filter(lambda w: np.sin(w / 2) != 0.0), near_resonance)
    detail = run_property(profile, prop, omegas, st.integers(0, 300), st.integers(0, REAL_D_K // 2 - 1))
    # the worst frequency: C_Theta comes from the smallest difference frequency w*; at S* = round(pi / w*)
    # |sin(S* w*/2)| ~ 1, so the bound is attained there up to rounding (sharpness ratio ~ 1)
    freqs_all = difference_frequencies(REAL_D_K)
    w_star = float(freqs_all[np.argmax(1 / np.abs(np.sin(freqs_all / 2)))])
    s_star = round(np.pi / w_star)
    worst = float(orbit_sum(np.array([w_star]), s_star)[0] * abs(np.sin(w_star / 2)))
    record_ratio(worst)
    assert 0.99 <= worst <= 1 + gamma(s_star + 2) + s_star * UNIT_ROUNDOFF * abs(np.sin(w_star / 2))
    # the same on the real RoPE at its slowest plane frequency theta_31
    slow = float(th_all[-1])
    s_slow = round(np.pi / slow)
    x = np.zeros((s_slow, REAL_D_K))
    x[:, -2] = 1.0
    slow_ratio = float(np.linalg.norm(apply_rope(x, np.arange(1, s_slow + 1)).sum(axis=0)) * abs(np.sin(slow / 2)))
    assert 0.99 <= slow_ratio <= 1 + gamma(s_slow + 2) + s_slow * UNIT_ROUNDOFF
    record_ratio(slow_ratio)
    freqs = difference_frequencies(REAL_D_K)
    bound = 1 / np.abs(np.sin(freqs / 2))
    for s in ORBIT_LENGTHS:
        assert np.all(orbit_sum(freqs, s) <= bound * (1 + gamma(s + 2)) + s * UNIT_ROUNDOFF), s
    assert np.all(orbit_sum(freqs, 0) == 0.0)
    for s in (3, 7, 64):
        assert orbit_sum(np.array([2 * np.pi / s]), s)[0] <= 8 * s * UNIT_ROUNDOFF
    # on real G_LM heads: the eigenbasis entry (j, k) of sum_n R_n M R_n^T is (sum_n e^{i dw n}) M~_jk, so its
    # modulus is at most |M~_jk| / |sin(dw/2)| at every nonzero difference frequency dw
    heads = real_g_lm()[:, 0]
    u, w = eigenbasis(REAL_D_K)
    dw = w[:, None] - w[None, :]
    live = np.abs(dw) > 1e-12
    s = 64
    summed = np.abs(u.conj().T @ (s * twirl_average(heads, s, REAL_D_K)) @ u)
    bound = np.abs(u.conj().T @ heads @ u) / np.where(live, np.abs(np.sin(dw / 2)), 1.0)
    scale = np.linalg.norm(heads, axis=(-2, -1))[:, None, None]
    assert np.all((summed <= bound + 1e-12 * s * scale)[:, live])
    return detail + f"; 2016 real frequencies x S in {ORBIT_LENGTHS}; 5 real G_LM heads at S = 64; " \
        f"C_Theta = {c_theta(freqs):.4e}; worst frequency {w_star:.3e} at S = {s_star}: |sum| sin(w/2) = " \
        f"{worst:.6f}; real RoPE plane 31 at S = {s_slow}: {slow_ratio:.6f}"


def orbit_control(profile: str) -> str:
    """Dropping nonresonance (w = 0): the orbit sum is S, above the nonresonant constant C_Theta at S = 1e5."""
    c = c_theta(difference_frequencies(REAL_D_K))
    s = 100_000
    total = float(orbit_sum(np.array([0.0]), s)[0])
    return expect_violation(total > c, f"w = 0: |sum| = {total:.0f} > C_Theta = {c:.0f}")


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
    G_LM heads (d_k = 64, interleaved, base 1e4) for S in (1, 16, 64[, 256, 1024]).  Sharpness: max
    ||T_S M - Pi M||_F / ((C_Theta / S) ||M - Pi M||_F)."""
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
        record_ratio(float(np.max(dist / off)), c / s)
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
    P(||X||_2 >= t) <= bound(t) + 4 sqrt(bound/T) + 4/T on every t where the bound is below 1.  Sharpness: max of
    summand norm / B_q^2, variance proxy / B_q^4 and empirical tail / its tested bound."""
    rng = np.random.default_rng(510)
    d, s = BERNSTEIN_D_K, BERNSTEIN_S
    pop, sigma, b_q = _bernstein_population(rng, 32, d)
    summands = pop[:, :, None] * pop[:, None, :] - sigma
    summand_norms = np.linalg.norm(summands, ord=2, axis=(-2, -1))
    assert np.all(summand_norms <= b_q**2 * (1 + 8 * UNIT_ROUNDOFF))
    record_ratio(float(summand_norms.max()), b_q**2)
    var = np.linalg.norm(np.mean(summands @ summands, axis=0), 2)
    assert var <= b_q**4
    record_ratio(float(var), b_q**4)
    n_trials = trials(profile, ci=400, thorough=4000)
    norms = fluctuation_norms(pop, sigma, rng.integers(0, len(pop), size=(n_trials, s)))
    ts = np.linspace(0.05, 3.0, 60) * b_q**2
    bound = bernstein_tail(ts, s, d, b_q)
    emp = np.array([np.mean(norms >= t) for t in ts])
    live = bound < 1
    assert np.any(live)
    tested = bound[live] + 4 * np.sqrt(bound[live] / n_trials) + 4 / n_trials
    assert np.all(emp[live] <= tested)
    record_ratio(float(np.max(emp[live] / tested)))
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


def _modulus_identity_gap(w: sp.Symbol, k: int, half: sp.Rational) -> sp.Expr:
    """|sum_{n=1..k} e^{iwn}|^2 sin^2(half w) - sin^2(half k w), simplified in exponential form (0 iff the
    multiplier identity holds at S = k with the angle factor ``half``)."""
    direct = sum(sp.exp(sp.I * w * j) for j in range(1, k + 1))
    mod2 = sp.expand(direct * sp.conjugate(direct))
    return sp.simplify(sp.expand((mod2 * sp.sin(half * w) ** 2 - sp.sin(half * k * w) ** 2).rewrite(sp.exp)))


def twirl_run(profile: str) -> str:
    """sum_{n=1..S} z^n = z (z^S - 1)/(z - 1) (sympy summation, symbolic S) and, at z = e^{iw},
    |z^S - 1|^2 = 4 sin^2(S w / 2), |z - 1|^2 = 4 sin^2(w / 2), so |sum| = |sin(S w/2)| / |sin(w/2)|; also each
    S = 1..8 expanded directly."""
    z = sp.Symbol("z")
    s = sp.Symbol("S", integer=True, positive=True)
    n = sp.Symbol("n", integer=True, positive=True)
    w = sp.Symbol("w", real=True)
    total = sp.summation(z**n, (n, 1, s))
    closed = z * (z**s - 1) / (z - 1)
    check = sp.simplify(total.args[1][0] - closed) if isinstance(total, sp.Piecewise) else sp.simplify(total - closed)
    assert check == 0
    chord = sp.expand(sp.expand_complex((sp.exp(sp.I * s * w) - 1) * (sp.exp(-sp.I * s * w) - 1)))
    assert sp.simplify(chord - 4 * sp.sin(s * w / 2) ** 2) == 0
    for k in range(1, MAX_D + 1):
        assert _modulus_identity_gap(w, k, sp.Rational(1, 2)) == 0, k
    return f"symbolic S, w; direct S = 1..{MAX_D}"


def twirl_control(profile: str) -> str:
    """The full-angle variant |sin(S w)| / |sin w| is not the modulus (S = 2)."""
    w = sp.Symbol("w", real=True)
    return expect_violation(_modulus_identity_gap(w, 2, sp.Integer(1)) != 0, "full-angle multiplier differs")


_EX = ("pldr_ref.rope.rope_frequencies", "pldr_ref.rope.apply_rope")
CHECKS = (
    Check(
        name="norm_one_sub_exp",
        statement=IDENTITY,
        lean=("norm_one_sub_exp",),
        paper="Lem. 5.9",
        label=THEOREM,
        method=(MPMATH, HYPOTHESIS),
        exercises=_EX,
        run=chord_run,
        negative_control=chord_control,
        slack="mpmath 1e-45; float 4e3 u(1+|w|) away from 2 pi Z",
        dropped="the half angle (broken variant 2|sin w|)",
        note="float comparison only where |sin(w/2)| >= 1e-3 (rtol 4e3 u(1+|w|)); mpmath at 50 digits covers "
              "every w",
    ),
    Check(
        name="geom_orbit_bound",
        lean=("geom_orbit_bound",),
        paper="Lem. 5.9",
        label=THEOREM,
        method=(MPMATH, HYPOTHESIS, REAL_G_LM),
        exercises=_EX,
        run=orbit_run,
        negative_control=orbit_control,
        slack="bound (1 + gamma(S+2)) + S u",
        dropped="sin(w/2) != 0",
    ),
    Check(
        name="twirl_matrix_bound",
        lean=(),
        paper="Lem. 5.9",
        label=THEOREM,
        method=(REAL_G_LM,),
        exercises=("pldr_ref.rope.apply_rope", "pldr_ref.rope.rope_frequencies"),
        run=twirl_matrix_run,
        negative_control=twirl_matrix_control,
        slack="entrywise 1e-12 ||M||_F; Frobenius bound relative 1e-12",
        dropped="nonresonance",
        note="the uniform constant C_Theta/S is vacuous at S = 1024; the exact "
              "per-frequency multiplier is what the check pins",
    ),
    Check(
        name="matrix_bernstein",
        lean=(),
        paper="Prop. 5.10",
        label=CONDITIONAL,
        method=(MONTE_CARLO,),
        exercises=("pldr_ref.density.density_operator", "pldr_ref.rope.apply_rope"),
        run=bernstein_run,
        negative_control=bernstein_control,
        slack="binomial 4 sqrt(bound/T) + 4/T",
        dropped="independence of the q_n",
    ),
    Check(
        name="sympy_twirl_multiplier",
        statement=IDENTITY,
        lean=("geom_orbit_bound", "norm_one_sub_exp"),
        paper="Lem. 5.9",
        label=THEOREM,
        method=(SYMPY,),
        exercises=(),
        run=twirl_run,
        negative_control=twirl_control,
        slack="none (exact)",
        dropped="the half angle",
    ),
)
