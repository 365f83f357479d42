"""The operator mutation run: ``patched`` swaps a pldr_ref operator everywhere it is bound and always restores
it; the tracer sees a stand-in as the operator; a LayerNorm variance bug is caught by the LayerNorm mirrors."""

from __future__ import annotations

import numpy as np
import pytest

import pldr_ref.diagnostics.contraction
import pldr_ref.norms
from proofs_check import layernorm
from proofs_check.mutants import MUTANTS, OPERATOR_LEAN_FILE, patched, run_mutants
from proofs_check.tracing import Tracer


def test_patched_swaps_every_binding_and_restores():
    original = pldr_ref.norms.layer_norm

    def fake(x, gamma, beta, eps=1e-6):
        return np.zeros_like(x)

    with patched("pldr_ref.norms.layer_norm", fake):
        assert pldr_ref.norms.layer_norm is fake
        assert pldr_ref.diagnostics.contraction.layer_norm is fake  # the `from ... import` copy inside pldr_ref
        assert layernorm.layer_norm is fake  # and inside proofs_check
        with Tracer() as tracer:
            pldr_ref.norms.layer_norm(np.ones(3), np.ones(3), np.zeros(3))
        assert "pldr_ref.norms.layer_norm" in tracer.called
    assert pldr_ref.norms.layer_norm is original and pldr_ref.diagnostics.contraction.layer_norm is original


def test_patched_restores_after_an_exception():
    original = pldr_ref.norms.layer_norm
    with pytest.raises(RuntimeError), patched("pldr_ref.norms.layer_norm", lambda *a, **k: None):
        raise RuntimeError
    assert pldr_ref.norms.layer_norm is original


def test_mutant_table_is_well_formed():
    assert len(MUTANTS) >= 20 and len({m.name for m in MUTANTS}) == len(MUTANTS)
    for m in MUTANTS:
        assert m.operator in OPERATOR_LEAN_FILE and m.description


def test_variance_bug_is_caught_by_layernorm_mirrors():
    [result] = run_mutants("ci", only="ln_variance_ddof1")
    assert result.caught and len(result.caught_by) >= 5, result.caught_by


@pytest.mark.slow
def test_every_mutant_is_caught_by_its_own_operator_mirrors():
    results = run_mutants("ci")
    assert all(r.caught for r in results), [r.mutant.name for r in results if not r.caught]


#: Operator bugs `pldr-ref prove` used to pass (issue 20 item 11) -> the mirror that now catches each.
ISSUE20_MUTANTS = {
    "silu_slope": "diam_comp_le",
    "energy_right_side": "score_sdpa_special_case",
    "p_head0": "hadPow_apply",
    "finfo_min_row_neg_inf": "softmax_sum_one",
}


@pytest.mark.parametrize(("name", "mirror"), list(ISSUE20_MUTANTS.items()))
def test_issue20_operator_bugs_are_caught(name: str, mirror: str) -> None:
    [result] = [r for r in run_mutants("ci", only=name) if r.mutant.name == name]
    assert result.caught and mirror in result.caught_by, result.caught_by
