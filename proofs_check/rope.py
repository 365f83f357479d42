"""Rope.lean: the rotation group, its 2x2 commutant {a I + b J} and relative-position scores (paper Prop. 4.1
single-plane core, Cor. 7.1 per block, Thm. 5.4(ii) mechanism).  Rotations come from ``pldr_ref.rope.apply_rope``;
the commutant identity is also checked on every diagonal 2x2 block of the real G_LM tensors.

Beyond Lean: the full multi-plane commutant criterion under nonresonance with its converse (Prop. 4.1,
Cor. 7.1).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from pldr_ref.rope import apply_rope
from proofs_check.profiles import expect_counterexample, expect_violation, run_property
from proofs_check.real_data import REAL_D_K, real_g_lm
from proofs_check.registry import HYPOTHESIS, IDENTITY, REAL_G_LM, THEOREM, Check
from proofs_check.rounding import SUBNORMAL_FLOOR, UNIT_ROUNDOFF
from proofs_check.strategies import reals, seeds
from proofs_check.torus import (
    J2,
    c_theta,
    commutant_projection,
    commutant_residual,
    difference_frequencies,
    eigenbasis,
    plane_frequencies,
    rope_rotation,
    rot,
)

ANGLE = reals(-1e3, 1e3)
ROPE_BASE = 10000.0


def lean_rot(theta: float) -> np.ndarray:
    """Oracle: the Lean definition rot theta = [[cos theta, -sin theta], [sin theta, cos theta]]."""
    return np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])


def lean_plane_frequency(a: int, d_k: int = REAL_D_K) -> float:
    """Oracle: theta_a = base^(-2a/d_k) in mpmath (30 digits), rounded once (catalog section 1)."""
    import mpmath

    with mpmath.workdps(30):
        return float(mpmath.mpf(ROPE_BASE) ** (-mpmath.mpf(2 * a) / d_k))


def angle_atol(*angles: float) -> float:
    """8u (1 + sum |angle|): fl(theta + phi) moves the angle by u |theta + phi|."""
    return 8 * UNIT_ROUNDOFF * (1 + sum(abs(a) for a in angles))


def rot_zero_run(profile: str) -> str:
    """rot 0 == I exactly, in 2x2 and for the real d_k = 64 RoPE at position 0."""
    assert np.array_equal(rot(0.0), np.eye(2))
    assert np.array_equal(rope_rotation(np.array([0.0]), REAL_D_K)[0], np.eye(REAL_D_K))
    return "exact"


def rot_zero_control(profile: str) -> str:
    """Any nonzero angle (theta = 0 dropped), even 1e-8, moves off the identity."""
    return expect_violation(not np.array_equal(rot(1e-8), np.eye(2)), "rot(1e-8) != I")


def rot_mul_run(profile: str) -> str:
    """rot theta rot phi = rot(theta + phi) within 8u(1+|theta|+|phi|); apply_rope(apply_rope(x, n), m) =
    apply_rope(x, n + m) at d_k = 64 for integer positions."""

    def prop(theta: float, phi: float, seed: int) -> None:
        assert np.abs(rot(theta) @ rot(phi) - rot(theta + phi)).max() <= angle_atol(theta, phi)
        # oracle: the operator's 2x2 rotation is the Lean rot (orientation and angle)
        assert np.abs(rot(theta) - lean_rot(theta)).max() <= angle_atol(theta), "apply_rope 2x2 != rot theta"
        rng = np.random.default_rng(seed)
        n, m = (int(v) for v in rng.integers(0, 4096, size=2))
        x = rng.normal(size=(1, REAL_D_K))
        twice = apply_rope(apply_rope(x, np.array([n])), np.array([m]))
        assert np.abs(twice - apply_rope(x, np.array([n + m]))).max() <= angle_atol(n, m) * 4 * np.abs(x).max()
        # oracle at d_k = 64: plane a of R_n is rot(n theta_a) with theta_a = base^(-2a/d_k)
        a = int(rng.integers(0, REAL_D_K // 2))
        block = rope_rotation(np.array([n]), REAL_D_K)[0][2 * a: 2 * a + 2, 2 * a: 2 * a + 2]
        angle = n * lean_plane_frequency(a)
        assert np.abs(block - lean_rot(angle)).max() <= angle_atol(angle) * 4, "RoPE plane != rot(n theta_a)"

    return run_property(profile, prop, ANGLE, ANGLE, seeds())


def rot_mul_control(profile: str) -> str:
    """Composing with the transpose (orientation dropped) gives rot(theta - phi), not rot(theta + phi)."""

    def prop(theta: float, phi: float) -> None:
        assert np.abs(rot(theta) @ rot(phi).T - rot(theta + phi)).max() <= angle_atol(theta, phi), "differs"

    return expect_counterexample(profile, prop, reals(0.1, 3.0), reals(0.1, 3.0))


def rot_transpose_run(profile: str) -> str:
    """rot(theta)^T = rot(-theta) (exact: cos is even and sin odd in libm)."""

    def prop(theta: float) -> None:
        assert np.abs(rot(theta).T - rot(-theta)).max() <= angle_atol(theta)

    return run_property(profile, prop, ANGLE)


def rot_transpose_control(profile: str) -> str:
    """rot(theta)^T != rot(theta) once sin theta != 0."""
    return expect_violation(not np.allclose(rot(0.5).T, rot(0.5)), "rot(0.5)^T != rot(0.5)")


def rot_orthogonal_run(profile: str) -> str:
    """R^T R = I within 8u: 2x2 for any theta, and the real d_k = 64 RoPE at positions up to 1e5."""

    def prop(theta: float, position: float) -> None:
        assert np.abs(rot(theta).T @ rot(theta) - np.eye(2)).max() <= 8 * UNIT_ROUNDOFF
        r = rope_rotation(np.array([position]), REAL_D_K)[0]
        assert np.abs(r.T @ r - np.eye(REAL_D_K)).max() <= 8 * UNIT_ROUNDOFF

    return run_property(profile, prop, ANGLE, reals(0.0, 1e5))


def rot_orthogonal_control(profile: str) -> str:
    """The float32 RoPE (``precision='float32'``, float64 precision dropped) is orthogonal only to ~1e-7."""
    eye = np.eye(REAL_D_K)
    rows = apply_rope(eye, np.full(REAL_D_K, 777), precision="float32")
    err = float(np.abs(rows @ rows.T - eye).max())
    return expect_violation(err > 8 * UNIT_ROUNDOFF, f"float32 RoPE: |R^T R - I| = {err:.2e}")


def commute_run(profile: str) -> str:
    """(a I + b J) rot theta = rot theta (a I + b J) within 8u(|a|+|b|)."""

    def prop(a: float, b: float, theta: float) -> None:
        g = a * np.eye(2) + b * J2
        tol = 8 * UNIT_ROUNDOFF * (abs(a) + abs(b)) + 16 * SUBNORMAL_FLOOR
        assert np.abs(g @ rot(theta) - rot(theta) @ g).max() <= tol

    return run_property(profile, prop, reals(-100, 100), reals(-100, 100), ANGLE)


def commute_control(profile: str) -> str:
    """A general 2x2 matrix (not in span{I, J}) does not commute with rot theta."""
    m = np.array([[1.0, 2.0], [0.0, -1.0]])
    return expect_violation(np.abs(m @ rot(0.7) - rot(0.7) @ m).max() > 0.1, "M rot != rot M")


def commutator_gap(m: np.ndarray, r: np.ndarray, sin_theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(||M R - R M||_F, 2 |sin theta| ||M - Pi M||_F) for stacks of 2x2 blocks."""
    lhs = np.linalg.norm(m @ r - r @ m, axis=(-2, -1))
    rhs = 2 * np.abs(sin_theta) * np.linalg.norm(m - commutant_projection(m), axis=(-2, -1))
    return lhs, rhs


def commute_iff_run(profile: str) -> str:
    """sin theta != 0 => (M rot = rot M <=> M = M00 I + M10 J), via the exact identity
    ||M R - R M||_F = 2|sin theta| ||M - Pi M||_F (rtol 1e-13), on random M and on all 70 x 32 diagonal 2x2
    blocks of the real G_LM tensors with their real plane angles theta_a."""

    def prop(seed: int, theta: float) -> None:
        m = np.random.default_rng(seed).normal(size=(2, 2))
        lhs, rhs = commutator_gap(m, rot(theta), np.sin(theta))
        assert abs(lhs - rhs) <= 1e-13 * np.linalg.norm(m) + angle_atol(theta) * np.linalg.norm(m)
        pm = commutant_projection(m)
        assert np.linalg.norm(pm @ rot(theta) - rot(theta) @ pm) <= angle_atol(theta) * 4 * np.linalg.norm(m)

    detail = run_property(profile, prop, seeds(), ANGLE)
    g = real_g_lm()
    a = np.arange(0, REAL_D_K, 2)
    blocks = np.stack([g[..., a, a], g[..., a, a + 1], g[..., a + 1, a], g[..., a + 1, a + 1]], -1)
    blocks = blocks.reshape(*blocks.shape[:-1], 2, 2)  # [5, 14, 32, 2, 2]
    th = plane_frequencies(REAL_D_K)
    r = rot(th)  # [32, 2, 2]
    lhs, rhs = commutator_gap(blocks, r, np.sin(th))
    scale = np.linalg.norm(blocks, axis=(-2, -1))
    assert np.all(np.abs(lhs - rhs) <= 1e-13 * scale + 1e-300)
    return detail + f"; real G_LM: 2240 blocks, max |gap| / ||B|| = {np.max(np.abs(lhs - rhs) / scale):.1e}"


def commute_iff_control(profile: str) -> str:
    """Dropping sin theta != 0 (theta = pi): every M commutes up to rounding although M is not in span{I, J}."""
    m = np.array([[1.0, 2.0], [0.0, -1.0]])
    r = rot(np.pi)
    lhs = np.linalg.norm(m @ r - r @ m)
    off = np.linalg.norm(m - commutant_projection(m))
    return expect_violation(lhs <= 1e-14 and off > 1.0, f"||[M, rot pi]|| = {lhs:.1e} but ||M - Pi M|| = {off:.2f}")


def relative_run(profile: str) -> str:
    """G commuting with every rotation => rot(-u) G rot(v) = G rot(v-u): 2x2 G = aI + bJ (atol 8u(1+|u|+|v|)||G||),
    and at d_k = 64 with G = Pi(real G_LM head) and integer positions through the real RoPE matrices."""
    g = real_g_lm()

    def prop(a: float, b: float, u: float, v: float, seed: int) -> None:
        g2 = a * np.eye(2) + b * J2
        lhs = rot(-u) @ g2 @ rot(v)
        floor = 16 * SUBNORMAL_FLOOR  # a, b in the subnormal range lose relative accuracy in the products
        assert np.abs(lhs - g2 @ rot(v - u)).max() <= angle_atol(u, v) * 4 * (abs(a) + abs(b)) + floor
        rng = np.random.default_rng(seed)
        layer, head = rng.integers(0, 5), rng.integers(0, 14)
        n, m = (int(x) for x in rng.integers(0, 2048, size=2))
        pg = commutant_projection(g[layer, head])
        rn, rm, rd = rope_rotation(np.array([-n, m, m - n]), REAL_D_K)
        tol = angle_atol(n, m) * 8 * np.abs(pg).sum(axis=1).max()
        assert np.abs(rn @ pg @ rm - pg @ rd).max() <= tol

    return run_property(profile, prop, reals(-10, 10), reals(-10, 10), ANGLE, ANGLE, seeds())


def relative_control(profile: str) -> str:
    """Dropping "G rot t = rot t G for all t" (the raw real G_LM head, not in the commutant): R_{-n} G R_m depends
    on n, not only on m - n."""
    g = real_g_lm()[0, 0]
    rn, rm, rd = rope_rotation(np.array([-5, 12, 7]), REAL_D_K)
    gap = float(np.abs(rn @ g @ rm - g @ rd).max() / np.abs(g).max())
    return expect_violation(gap > 1e-3, f"max |R_-n G R_m - G R_(m-n)| / max|G| = {gap:.3f}")


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


_EX = ("pldr_ref.rope.apply_rope",)
CHECKS = (
    Check(
        name="rot_zero",
        statement=IDENTITY,
        lean=("rot_zero",),
        paper="Prop. 4.1",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=rot_zero_run,
        negative_control=rot_zero_control,
        slack="none (exact)",
        dropped="theta = 0",
    ),
    Check(
        name="rot_mul",
        statement=IDENTITY,
        lean=("rot_mul",),
        paper="Prop. 4.1",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=rot_mul_run,
        negative_control=rot_mul_control,
        slack="8u(1+|theta|+|phi|)",
        dropped="orientation of the second factor",
    ),
    Check(
        name="rot_transpose",
        statement=IDENTITY,
        lean=("rot_transpose",),
        paper="Prop. 4.1",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=rot_transpose_run,
        negative_control=rot_transpose_control,
        slack="8u(1+|theta|)",
        dropped="negated angle",
    ),
    Check(
        name="rot_orthogonal",
        statement=IDENTITY,
        lean=("rot_orthogonal",),
        paper="Prop. 4.1",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=rot_orthogonal_run,
        negative_control=rot_orthogonal_control,
        slack="8u",
        dropped="float64 RoPE (precision='float32')",
        note="the float32 RoPE switch of pldr_ref is orthogonal only to float32 accuracy",
    ),
    Check(
        name="smul_one_add_smul_rotJ_commute",
        statement=IDENTITY,
        lean=("smul_one_add_smul_rotJ_commute",),
        paper="Prop. 4.1",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=commute_run,
        negative_control=commute_control,
        slack="8u(|a|+|b|) + 16 subnormal",
        dropped="G in span{I, J}",
    ),
    Check(
        name="commute_rot_iff",
        statement=IDENTITY,
        lean=("commute_rot_iff",),
        paper="Prop. 4.1 / Cor. 7.1 (per block)",
        label=THEOREM,
        method=(HYPOTHESIS, REAL_G_LM),
        exercises=_EX,
        run=commute_iff_run,
        negative_control=commute_iff_control,
        slack="rtol 1e-13 on ||[M,R]||_F = 2|sin theta| ||M - Pi M||_F",
        dropped="sin theta != 0",
    ),
    Check(
        name="relative_position_of_commute",
        statement=IDENTITY,
        lean=("relative_position_of_commute",),
        paper="Prop. 4.1 (if) / Thm. 5.4(ii)",
        label=THEOREM,
        method=(HYPOTHESIS, REAL_G_LM),
        exercises=_EX,
        run=relative_run,
        negative_control=relative_control,
        slack="8u(1+|u|+|v|)||G|| + 16 subnormal (2x2); 8u(1+n+m) max row sum (d_k = 64)",
        dropped="G rot t = rot t G for all t",
    ),
    Check(
        name="commutant_criterion_multiplane",
        statement=IDENTITY,
        lean=(),
        paper="Prop. 4.1 / Cor. 7.1",
        label=THEOREM,
        method=(HYPOTHESIS, REAL_G_LM),
        exercises=("pldr_ref.rope.apply_rope", "pldr_ref.rope.rope_frequencies"),
        run=commutant_run,
        negative_control=commutant_control,
        slack="null-space threshold 1e-10 sigma_1; identity at 1e-12 ||G||_F^2",
        dropped="nonresonance",
    ),
)
