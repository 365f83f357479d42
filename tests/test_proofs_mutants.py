"""The operator mutation run: ``patched`` swaps a pldr_ref operator everywhere it is bound and always restores
it; the tracer sees a stand-in as the operator; a LayerNorm variance bug is caught by the LayerNorm mirrors."""

from __future__ import annotations

import numpy as np
import pytest

import pldr_ref.metric_learner
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
        assert pldr_ref.metric_learner.layer_norm is fake  # the `from ... import` copy inside pldr_ref
        assert layernorm.layer_norm is fake  # and inside proofs_check
        with Tracer() as tracer:
            pldr_ref.norms.layer_norm(np.ones(3), np.ones(3), np.zeros(3))
        assert "pldr_ref.norms.layer_norm" in tracer.called
    assert pldr_ref.norms.layer_norm is original and pldr_ref.metric_learner.layer_norm is original


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
