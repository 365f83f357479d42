"""HadamardPower.lean: A_P = A_LM^(elementwise P), its zero law and group law (paper Prop. 3.7), on
``pldr_ref.plga.potential_tensor`` (and ``metric_tensor`` for positive bases)."""

from __future__ import annotations

import mpmath
import numpy as np
from hypothesis import strategies as st

from pldr_ref.plga import metric_tensor, potential_tensor
from proofs_check.profiles import expect_violation, run_property
from proofs_check.registry import EXACT_FLOAT, HYPOTHESIS, IDENTITY, THEOREM, Check
from proofs_check.rounding import UNIT_ROUNDOFF
from proofs_check.strategies import reals, seeds, square_matrices


def had_pow(a: np.ndarray, p: np.ndarray) -> np.ndarray:
    """hadPow A P of one head through the real operator."""
    return potential_tensor(np.asarray(a, dtype=np.float64)[None, None], np.asarray(p, dtype=np.float64)[None])[0, 0]


def apply_run(profile: str) -> str:
    """(hadPow A P)_ij = A_ij ** P_ij per head: the operator on a batch of 1-2 rows x 1-3 heads, each head with its
    own A > 0 and P, every entry within 4u of the 40-digit mpmath power of its own head's A and P."""

    def prop(a: np.ndarray, seed: int, batch: int, heads: int) -> None:
        rng = np.random.default_rng(seed)
        base = (np.abs(a) + 1e-9) * rng.uniform(0.5, 2.0, size=(batch, heads, *a.shape))  # [B, H, d, d]
        p = rng.normal(size=(heads, *a.shape)) * 3  # [H, d, d]
        got = potential_tensor(base, p)
        assert got.shape == base.shape
        with mpmath.workdps(40):
            for (b, h, i, j), value in np.ndenumerate(got):
                exact = mpmath.mpf(base[b, h, i, j]) ** mpmath.mpf(p[h, i, j])
                assert abs(value - exact) <= 4 * UNIT_ROUNDOFF * exact, (b, h, base[b, h, i, j], p[h, i, j])

    return run_property(profile, prop, square_matrices(1, 6, -10.0, 10.0), seeds(), st.integers(1, 2),
                        st.integers(1, 3))


def apply_control(profile: str) -> str:
    """The matrix power A @ A is not the Hadamard power A^(o 2) (entrywise semantics dropped)."""
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    return expect_violation(not np.allclose(a @ a, had_pow(a, np.full((2, 2), 2.0))), "A @ A != A^(o2)")


def zero_run(profile: str) -> str:
    """hadPow A 0 == all-ones exactly for every finite A (0 and negatives included, no positivity)."""

    def prop(a: np.ndarray) -> None:
        assert np.array_equal(had_pow(a, np.zeros_like(a)), np.ones_like(a))

    return run_property(profile, prop, square_matrices(1, 6, -1e300, 1e300))


def zero_control(profile: str) -> str:
    """A nonzero exponent (P = 0 dropped), however tiny, sends a zero entry to 0, not 1."""
    return expect_violation(had_pow(np.zeros((1, 1)), np.full((1, 1), 1e-300))[0, 0] == 0.0, "0^(1e-300) = 0")


def add_rtol(a: np.ndarray, p: np.ndarray, s: float, t: float) -> np.ndarray:
    """8u (1 + |log A| (|s| + |t|) |P|): pow's error scales with |exponent * log(base)|."""
    return 8 * UNIT_ROUNDOFF * (1 + np.abs(np.log(a)) * (abs(s) + abs(t)) * np.abs(p) * 2)


def add_run(profile: str) -> str:
    """A > 0 (A = A_LM from the real metric_tensor) => A^(o(s+t)P) = A^(o sP) o A^(o tP) within :func:`add_rtol`."""

    def prop(m: np.ndarray, seed: int, s: float, t: float) -> None:
        d = m.shape[0]
        rng = np.random.default_rng(seed)
        a = metric_tensor(m[None, None], rng.normal(size=(1, d, d)), rng.normal(size=(1, d, d)))[0, 0]
        p = rng.normal(size=(d, d))
        lhs = had_pow(a, (s + t) * p)
        rhs = had_pow(a, s * p) * had_pow(a, t * p)
        assert np.all(np.abs(lhs - rhs) <= add_rtol(a, p, s, t) * np.abs(lhs))

    return run_property(profile, prop, square_matrices(1, 6, -5.0, 5.0), seeds(), reals(-3, 3), reals(-3, 3))


def add_control(profile: str) -> str:
    """Dropping A > 0: a zero entry with s = -t gives 0^0 = 1 on the left but 0 * inf (NaN) on the right, and a
    negative entry gives NaN for a non-integer exponent."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.array([[0.0, -2.0]])
        p = np.array([[1.0, 0.5]])
        lhs = had_pow(a, 0.0 * p)
        rhs = had_pow(a, 1.0 * p) * had_pow(a, -1.0 * p)
    return expect_violation(not np.array_equal(lhs, rhs), f"lhs {lhs.ravel()} vs rhs {rhs.ravel()}")


_EX = ("pldr_ref.plga.potential_tensor",)
CHECKS = (
    Check(
        name="hadPow_apply",
        statement=IDENTITY,
        lean=("hadPow_apply",),
        paper="Prop. 3.7",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=apply_run,
        negative_control=apply_control,
        slack="rel 4u vs mpmath (NumPy pow is not correctly rounded: ~5% of entries differ from C pow by 1 ulp)",
        dropped="entrywise (Hadamard) semantics",
    ),
    Check(
        name="hadPow_zero",
        statement=IDENTITY,
        lean=("hadPow_zero",),
        paper="Prop. 3.7",
        label=THEOREM,
        method=(HYPOTHESIS,),
        exercises=_EX,
        run=zero_run,
        negative_control=zero_control,
        slack="none (exact 1.0)",
        dropped="P = 0",
    ),
    Check(
        name="hadPow_add",
        statement=IDENTITY,
        lean=("hadPow_add",),
        paper="Prop. 3.7",
        label=THEOREM,
        method=(HYPOTHESIS, EXACT_FLOAT),
        exercises=(*_EX, "pldr_ref.plga.metric_tensor"),
        run=add_run,
        negative_control=add_control,
        slack="rel 8u(1 + 2|log A|(|s|+|t|)|P|)",
        dropped="A_ij > 0 for all i, j",
    ),
)
