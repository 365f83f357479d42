"""Iswiglu.lean: sigmoid bounds, iSwiGLU >= 0 / > 0, and the A_LM entry floor (paper Def. 3.1, Prop. 3.7).

Beyond Lean (same subject, A_LM > 0): the Perron-Frobenius structure of A_LM (Thm. 3.8).
"""

from __future__ import annotations

import mpmath
import numpy as np
from hypothesis import strategies as st

from pldr_ref.activations import iswiglu, sigmoid, silu
from pldr_ref.constants import EPS_ADJ
from pldr_ref.plga import metric_tensor
from proofs_check.models import tiny_forward
from proofs_check.mutants import patched
from proofs_check.profiles import (
    expect_counterexample,
    expect_violation,
    record_lower,
    record_margin,
    record_ratio,
    run_property,
)
from proofs_check.real_data import REAL_D_K, real_g_lm
from proofs_check.registry import EXACT_FLOAT, HYPOTHESIS, MPMATH, REAL_G_LM, THEOREM, Check
from proofs_check.rounding import SUBNORMAL_FLOOR, UNIT_ROUNDOFF
from proofs_check.strategies import reals, seeds, square_matrices

# float64 domains on which the strict real statements survive rounding (catalog section 2)
SIGMOID_POS_FLOOR = -700.0  # expit underflows to 0 below about -745
SIGMOID_LT_ONE_CEIL = 36.0  # sigma(u) rounds to 1.0 from u = 37 on
ISWIGLU_POS_RANGE = (1e-100, 700.0)  # u^2 sigma(u) underflows below ~1e-162 and for u < -745
MP_DPS = 60
#: Below -log(float64 max) ~ -709.78, e^-u overflows and the operator's sigmoid (scipy expit) returns 0.
SIGMOID_OVERFLOW_EDGE = -float(np.log(np.finfo(np.float64).max))


def _mp_sigmoid(u: float) -> mpmath.mpf:
    return 1 / (1 + mpmath.exp(-mpmath.mpf(u)))


def sigmoid_pos_run(profile: str) -> str:
    """sigma(u) > 0 (mpmath, any u) and pldr_ref ``sigmoid`` > 0 on u >= -700, >= 0 everywhere, rel err <= 4u.
    Sharpness: min sigmoid(u) on the float domain (natural scale 1, the sup of sigma)."""

    def prop(u: float) -> None:
        with mpmath.workdps(MP_DPS):
            exact = _mp_sigmoid(u)
            assert exact > 0
            got = float(sigmoid(np.array(u)))
            assert got >= 0.0
            if u >= SIGMOID_POS_FLOOR:
                assert got > 0.0, u
                record_margin(got)
                assert abs(got - float(exact)) <= 4 * UNIT_ROUNDOFF * float(exact), (u, got)

    return run_property(profile, prop, reals(-1e4, 1e4))


def sigmoid_pos_control(profile: str) -> str:
    """Outside the float domain (u < -746) the strict float inequality fails: sigmoid underflows to 0.0."""

    def prop(u: float) -> None:
        assert float(sigmoid(np.array(u))) > 0.0, f"sigmoid({u}) == 0.0"

    return expect_counterexample(profile, prop, reals(-1e4, -746.0))


def sigmoid_lt_one_run(profile: str) -> str:
    """sigma(u) < 1 in mpmath (60 digits, u <= 100) and pldr_ref ``sigmoid`` < 1 for u <= 36.
    Sharpness: largest float sigmoid(v) / 1."""

    def prop(u: float) -> None:
        with mpmath.workdps(MP_DPS):
            assert _mp_sigmoid(u) < 1
        v = min(u, SIGMOID_LT_ONE_CEIL)  # the float statement on its domain u <= 36
        got = float(sigmoid(np.array(v)))
        assert got < 1.0, v
        record_ratio(got, 1.0)

    return run_property(profile, prop, reals(-1e3, 100.0))


def sigmoid_lt_one_control(profile: str) -> str:
    """Dropping the domain u <= 36: float sigmoid rounds to exactly 1.0."""

    def prop(u: float) -> None:
        assert float(sigmoid(np.array(u))) < 1.0, f"sigmoid({u}) == 1.0"

    return expect_counterexample(profile, prop, reals(37.0, 1e4))


def _iswiglu_nonneg_prop(u: float) -> None:
    assert float(iswiglu(np.array(u))) >= 0.0, f"iswiglu({u}) < 0"


def iswiglu_nonneg_run(profile: str) -> str:
    """iSwiGLU(u) >= 0 exactly in float64 for |u| <= 1e150 (u^2 overflows beyond 1e154); oracle: the operator is
    the Lean definition u^2 sigma(u) (mpmath, 60 digits) within 8u relative + one subnormal.
    Sharpness: min iSwiGLU(u) / u^2 (natural scale u^2 = iSwiGLU's sup-ratio; 0 where sigma underflows)."""

    def prop(u: float) -> None:
        _iswiglu_nonneg_prop(u)
        got = float(iswiglu(np.array(u)))
        if u != 0.0 and u * u < np.inf:
            record_margin(got, u * u)
        with mpmath.workdps(MP_DPS):
            exact = mpmath.mpf(u) ** 2 * _mp_sigmoid(u)
            if u < SIGMOID_OVERFLOW_EDGE:
                # sigma(u) = 1 / (1 + e^-u) with e^-u beyond float64: the operator's sigmoid is 0, so iSwiGLU may be
                # 0 where the exact value is u^2 sigma(u) <= u^2 e^u ~ 3e-303; it may never exceed the exact value
                assert 0.0 <= got <= exact * (1 + 8 * UNIT_ROUNDOFF) + SUBNORMAL_FLOOR, (u, got)
            else:
                assert abs(got - exact) <= 8 * UNIT_ROUNDOFF * exact + SUBNORMAL_FLOOR, (u, got)

    return run_property(profile, prop, reals(-1e150, 1e150))


def iswiglu_nonneg_control(profile: str) -> str:
    """Mutation control (no hypothesis): the same property with the operator replaced by SiLU (one factor u
    dropped) fails: the nonnegativity is specific to iSwiGLU."""
    with patched("pldr_ref.activations.iswiglu", silu):
        return expect_counterexample(profile, _iswiglu_nonneg_prop, reals(-50.0, 50.0))


def iswiglu_pos_run(profile: str) -> str:
    """u != 0 => iSwiGLU(u) > 0: mpmath for any u, float64 on 1e-100 <= |u| <= 700.
    Sharpness: min iSwiGLU(u) / u^2 = min sigma(u) (natural scale u^2)."""

    def prop(mag: float, negative: bool) -> None:
        u = -mag if negative else mag
        with mpmath.workdps(MP_DPS):
            assert mpmath.mpf(u) ** 2 * _mp_sigmoid(u) > 0
        got = float(iswiglu(np.array(u)))
        assert got > 0.0, u
        record_margin(got, u * u)

    from hypothesis import strategies as st

    return run_property(profile, prop, reals(*ISWIGLU_POS_RANGE), st.booleans())


def iswiglu_pos_control(profile: str) -> str:
    """Dropping u != 0: iSwiGLU(0) == 0, not > 0."""
    at_zero = float(iswiglu(np.array(0.0)))
    return expect_violation(at_zero == 0.0, f"iswiglu(0) = {at_zero}")


def _metric_identity_w(m: np.ndarray, eps: float) -> np.ndarray:
    """A_LM = iSwiGLU(I M + 0) + eps through the real ``metric_tensor`` (W = I is an exact product)."""
    d = m.shape[0]
    return metric_tensor(m[None, None], np.eye(d)[None], np.zeros((1, d, d)), eps)[0, 0]


def metric_entry_ge_run(profile: str) -> str:
    """eps <= iSwiGLU(M_ij) + eps for any eps sign, exact float comparison (rounding is monotone).
    Sharpness (lower bound lhs >= rhs): largest (eps + |eps| + 1) / (min A_LM + |eps| + 1), both sides shifted
    by |eps| + 1 so they are positive for either sign of eps (1 = an entry sits on the floor)."""

    def prop(m: np.ndarray, eps: float) -> None:
        a_lm = _metric_identity_w(m, eps)
        assert np.all(a_lm >= eps)
        shift = abs(eps) + 1.0
        record_lower(float(a_lm.min()) + shift, eps + shift)

    return run_property(profile, prop, square_matrices(1, 6, -1e3, 1e3), reals(-10.0, 10.0))


def metric_entry_ge_control(profile: str) -> str:
    """Mutation control (no hypothesis): the same property on metric_tensor with SiLU in place of iSwiGLU
    (nonnegativity dropped) breaks the floor eps."""

    def prop(m: np.ndarray, eps: float) -> None:
        assert np.all(_metric_identity_w(m, eps) >= eps), "A_LM < eps"

    with patched("pldr_ref.activations.iswiglu", silu):
        return expect_counterexample(profile, prop, square_matrices(2, 6, -10.0, 10.0), reals(-1.0, 1.0))


def metric_entry_pos_run(profile: str) -> str:
    """eps > 0 => A_LM > 0 strictly, also where iSwiGLU underflows to 0 (eps = 1e-9 and float32(1e-9)),
    and on the A_LM of a real tiny-model forward pass.  Sharpness: min A_LM / eps (natural scale eps, the floor;
    1 = an entry sits on it, reached where iSwiGLU underflows)."""
    eps_values = (EPS_ADJ, float(np.float32(EPS_ADJ)))

    def prop(m: np.ndarray) -> None:
        for eps in eps_values:
            a_lm = _metric_identity_w(m, eps)
            assert np.all(a_lm > 0.0)
            record_margin(float(a_lm.min()), eps)

    detail = run_property(profile, prop, square_matrices(1, 6, -1e4, 1e4))
    underflow = _metric_identity_w(np.full((3, 3), -800.0), EPS_ADJ)
    assert np.all(underflow == EPS_ADJ), "underflowed iSwiGLU must leave exactly eps_adj"
    for layer in tiny_forward().layers:
        assert np.all(layer.A_LM > 0.0)
    return detail + "; underflow rows equal eps_adj; forward A_LM > 0"


def metric_entry_pos_control(profile: str) -> str:
    """Dropping eps > 0 (eps_adj = 0): A_LM has exact zeros where iSwiGLU underflows."""
    a_lm = _metric_identity_w(np.full((3, 3), -800.0), 0.0)
    return expect_violation(bool(np.any(a_lm == 0.0)), f"min A_LM = {a_lm.min()} with eps_adj = 0")


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
    Float form: the dominant eigenvalue is real positive (|Im| <= 1e-12 rho), eigenvector entries > 0.
    Sharpness: min over heads of (relative spectral gap, min Perron vector entry / max entry) (scale 1)."""

    def prop(seed: int, d: int) -> None:
        rng = np.random.default_rng(seed)
        a = rng.normal(size=(1, 1, d, d))
        a_lm = metric_tensor(a, rng.normal(size=(1, d, d)), rng.normal(size=(1, d, d)))[0, 0]
        _, gap, vmin, wmin = perron_structure(a_lm)
        assert gap > 0 and vmin > 0 and wmin > 0
        record_margin(min(gap, vmin, wmin))

    detail = run_property(profile, prop, seeds(), st.integers(1, 12))
    gaps = []
    for layer in tiny_forward().layers:
        for a_lm in layer.A_LM.reshape(-1, *layer.A_LM.shape[-2:]):
            _, gap, vmin, wmin = perron_structure(a_lm)
            assert gap > 0 and vmin > 0 and wmin > 0
            record_margin(min(gap, vmin, wmin))
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


CHECKS = (
    Check(
        name="sigmoid_pos",
        lean=("sigmoid_pos",),
        paper="Def. 3.1",
        label=THEOREM,
        method=(MPMATH, HYPOTHESIS),
        exercises=("pldr_ref.activations.sigmoid",),
        run=sigmoid_pos_run,
        negative_control=sigmoid_pos_control,
        slack="strict > 0 for u >= -700; >= 0 everywhere; rel err vs mpmath <= 4u",
        dropped="float domain: u >= -700",
        note="float64 sigmoid underflows to 0.0 below about -745: strict positivity is an mpmath fact there",
    ),
    Check(
        name="sigmoid_lt_one",
        lean=("sigmoid_lt_one",),
        paper="Def. 3.1",
        label=THEOREM,
        method=(MPMATH, HYPOTHESIS),
        exercises=("pldr_ref.activations.sigmoid",),
        run=sigmoid_lt_one_run,
        negative_control=sigmoid_lt_one_control,
        slack="exact < 1 for u <= 36",
        dropped="float domain: u <= 36",
        note="float64 sigmoid rounds to exactly 1.0 for u >= 37; mpmath (60 digits) covers u <= 100",
    ),
    Check(
        name="iswiglu_nonneg",
        lean=("iswiglu_nonneg",),
        paper="Def. 3.1",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=("pldr_ref.activations.iswiglu",),
        run=iswiglu_nonneg_run,
        negative_control=iswiglu_nonneg_control,
        slack="none (exact >= 0); oracle 8u + subnormal",
        dropped="the second factor u (operator -> SiLU)",
        note="|u| > 1e154 excluded: u^2 overflows and inf * 0 = NaN",
    ),
    Check(
        name="iswiglu_pos",
        lean=("iswiglu_pos",),
        paper="Def. 3.1",
        label=THEOREM,
        method=(MPMATH, HYPOTHESIS),
        exercises=("pldr_ref.activations.iswiglu",),
        run=iswiglu_pos_run,
        negative_control=iswiglu_pos_control,
        slack="exact > 0 on 1e-100 <= |u| <= 700",
        dropped="u != 0",
        note="float64 underflows to 0 for |u| < ~1e-162 and u < -745",
    ),
    Check(
        name="metric_entry_ge",
        lean=("metric_entry_ge",),
        paper="Prop. 3.7",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=("pldr_ref.plga.metric_tensor",),
        run=metric_entry_ge_run,
        negative_control=metric_entry_ge_control,
        slack="none (monotone rounding)",
        dropped="iSwiGLU >= 0 (operator -> SiLU)",
    ),
    Check(
        name="metric_entry_pos",
        lean=("metric_entry_pos",),
        paper="Prop. 3.7",
        label=THEOREM,
        method=(HYPOTHESIS, EXACT_FLOAT),
        exercises=("pldr_ref.plga.metric_tensor", "pldr_ref.model.forward"),
        run=metric_entry_pos_run,
        negative_control=metric_entry_pos_control,
        slack="none (exact > 0)",
        dropped="eps > 0",
    ),
    Check(
        name="perron_frobenius_A_LM",
        lean=(),
        paper="Thm. 3.8",
        label=THEOREM,
        method=(HYPOTHESIS, REAL_G_LM),
        exercises=("pldr_ref.plga.metric_tensor", "pldr_ref.model.forward"),
        run=perron_run,
        negative_control=perron_control,
        slack="dominant eigenvalue |Im| <= 1e-12 rho; strict gap and positivity in float",
        dropped="A_LM > 0 (signed real G_LM instead)",
    ),
)
