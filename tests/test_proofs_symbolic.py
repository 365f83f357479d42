"""The sympy identities of issue 7 (acceptance 4): rank-one characteristic polynomial, A^k = s^(k-1) A, the
LayerNorm norm identity and the geometric-sum twirl multiplier, for every d up to 8 or symbolic S."""

from __future__ import annotations

import sympy as sp

from proofs_check import layernorm, rank_one, twirl
from proofs_check.strategies import MAX_D


def test_rowclone_characteristic_polynomial_every_d_up_to_8():
    assert MAX_D == 8
    assert rank_one.charpoly_run("ci") == "d = 1..8"


def test_rowclone_power():
    assert "d <= 8" in rank_one.power_run("ci")


def test_layernorm_norm_identity():
    assert layernorm.ln_norm_run("ci") == "d = 1..8"


def test_twirl_multiplier_symbolic_s():
    assert "symbolic S" in twirl.twirl_run("ci")


def test_negative_controls_detect_wrong_identities():
    for control in (rank_one.charpoly_control, rank_one.power_control, layernorm.ln_norm_control,
                    twirl.twirl_control):
        assert control("ci").startswith("violated")


def test_row_clone_matrix_is_one_alpha_transpose():
    a = rank_one.row_clone_matrix(3)
    assert a.rank() == 1 and a[2, 1] == sp.Symbol("a1", real=True)
