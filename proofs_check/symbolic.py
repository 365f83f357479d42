"""Symbolic identities checked with sympy for symbolic entries and every d up to 8 (or symbolic d, S):

* characteristic polynomial of a row clone 1 alpha^T: lambda^(d-1) (lambda - s), s = sum alpha (Prop. 3.9(ii));
* A^k = s^(k-1) A for the row clone (Prop. 3.9(iii); Lean ``rowClone_pow``);
* the LayerNorm norm identity sum u_i^2 = d v / (v + eps) (Lem. 5.11(iii); Lean ``sum_sq_normalized``);
* the geometric-sum twirl multiplier |sum_{n=1..S} e^{i w n}| = |sin(S w/2)| / |sin(w/2)| (Lem. 5.9; Lean
  ``geom_orbit_bound``), for symbolic S and w.
"""

from __future__ import annotations

import functools

import sympy as sp

from proofs_check.profiles import expect_violation
from proofs_check.registry import SYMPY, THEOREM, Check

MAX_D = 8


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


def ln_norm_run(profile: str) -> str:
    """sum_i ((r_i - mean) / sqrt(v + eps))^2 = d v / (v + eps) for symbolic r_1..r_d, eps > 0, d = 1..8."""
    eps = sp.Symbol("eps", positive=True)
    for d in range(1, MAX_D + 1):
        r = sp.symbols(f"r0:{d}", real=True)
        mean = sum(r) / d
        v = sum((x - mean) ** 2 for x in r) / d
        lhs = sum(((x - mean) / sp.sqrt(v + eps)) ** 2 for x in r)
        assert sp.simplify(lhs - d * v / (v + eps)) == 0, d
    return f"d = 1..{MAX_D}"


def ln_norm_control(profile: str) -> str:
    """Dropping eps from the identity (claiming sum u^2 = d) is false for eps > 0."""
    eps = sp.Symbol("eps", positive=True)
    r = sp.symbols("r0:2", real=True)
    mean = sum(r) / 2
    v = sum((x - mean) ** 2 for x in r) / 2
    lhs = sum(((x - mean) / sp.sqrt(v + eps)) ** 2 for x in r)
    return expect_violation(sp.simplify(lhs - 2) != 0, "sum u^2 != d when eps > 0")


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


_EX: tuple[str, ...] = ()  # exact algebra of the objects pldr_ref implements; no operator call
CHECKS = (
    Check("sympy_rowclone_charpoly", (), "Prop. 3.9(ii)", THEOREM, (SYMPY,), _EX, charpoly_run, charpoly_control,
          slack="none (exact)", dropped="row-clone structure"),
    Check("sympy_rowclone_power", ("rowClone_pow", "rowClone_mul_self"), "Prop. 3.9(iii)", THEOREM, (SYMPY,), _EX,
          power_run, power_control, slack="none (exact)", dropped="the exponent k - 1"),
    Check("sympy_layernorm_norm", ("sum_sq_normalized",), "Lem. 5.11(iii)", THEOREM, (SYMPY,), _EX, ln_norm_run,
          ln_norm_control, slack="none (exact)", dropped="eps"),
    Check("sympy_twirl_multiplier", ("geom_orbit_bound", "norm_one_sub_exp"), "Lem. 5.9", THEOREM, (SYMPY,), _EX,
          twirl_run, twirl_control, slack="none (exact)", dropped="the half angle"),
)
