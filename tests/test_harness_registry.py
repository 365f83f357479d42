"""The registry (pldr_ref.registry) is the one source of the stage and op tables: every derived table
agrees with it, and the runner tables cover exactly its ops."""

from __future__ import annotations

import pytest

from pldr_ref import registry
from pldr_ref.exact.op_api import OPS as EXACT_OPS
from pldr_ref.fixtures.exact_tier import EXACT_RUNNERS
from pldr_ref.fixtures.runners import RUNNERS
from pldr_ref.harness.policy.tolerance import SINGLE_STAGE_KINDS
from pldr_ref.harness.verdict.localize import STAGE_INPUTS
from pldr_ref.registry import FORWARD_STAGES, OP_FUNCTIONS, STRUCTURE_STAGES


def test_stage_tables_derive_from_the_registry():
    assert FORWARD_STAGES is registry.FORWARD_STAGES and STRUCTURE_STAGES is registry.STRUCTURE_STAGES
    assert list(STAGE_INPUTS) == [s.name for s in registry.ALL_STAGES]
    assert all(STAGE_INPUTS[s.name] == s.inputs and s.inputs for s in registry.ALL_STAGES)
    names = [s.name for s in registry.ALL_STAGES]
    assert len(set(names)) == len(names)


def test_every_stage_input_is_produced_upstream_or_is_a_case_input():
    produced = {"token_ids", "positions", "hidden", "x"}
    for s in registry.ALL_STAGES:
        missing = [i for i in s.inputs if i not in produced]
        assert not missing, (s.name, missing)
        produced |= set(s.outputs)
    # negative control: a stage reading something nobody produced is reported
    assert "nonexistent" not in produced


def test_runner_tables_cover_exactly_the_registry_ops():
    kinds = [op.name for op in registry.OPS]
    assert list(RUNNERS) == kinds
    assert set(EXACT_RUNNERS) == {op.name for op in registry.OPS if op.exact is not None}
    assert set(EXACT_OPS) == {op.exact for op in registry.OPS if op.exact not in (None, "runner")}
    assert set(SINGLE_STAGE_KINDS) == {op.name for op in registry.OPS if op.category == "op"}
    assert {op.name: op.function for op in registry.OPS if op.function is not None} == OP_FUNCTIONS


def test_every_op_names_an_existing_stage_and_category():
    stages = {s.name for s in registry.ALL_STAGES}
    for op in registry.OPS:
        assert op.category in ("op", "layer", "model", "cache", "scoring"), op.name
        assert op.stage is None or op.stage in stages, op.name
        assert op.reference, op.name
    with pytest.raises(KeyError, match="unknown stage"):
        registry.stage("no_such_stage")


def test_torch_backend_tables_derive_from_the_registry():
    pytest.importorskip("torch")
    from pldr_ref.backends import torch_backend

    assert tuple(s.name for s in registry.ALL_STAGES) == torch_backend.STAGE_NAMES
    assert registry.op_kinds("op") == torch_backend.OP_KINDS
    assert registry.op_kinds("scoring") == torch_backend.SCORING_KINDS
