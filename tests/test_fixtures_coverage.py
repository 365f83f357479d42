"""Every stage of the forward map, every building block, every cache and G mode has a golden case.

A new stage (FORWARD_STAGES), a new OP_FUNCTIONS entry, a new g_mode or a new inference mode
without a fixture makes this fail.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pldr_ref.config import (
    G_MODES,
    GRAM_MODES,
    MASK_MODES,
    METRIC_LEARNERS,
    ROPE_LAYOUTS,
    ROPE_PRECISIONS,
    PLDRConfig,
)
from pldr_ref.fixtures.runners import RUNNERS
from pldr_ref.fixtures.suite import CACHE_MODES, build_suite
from pldr_ref.inference.modes import NATIVE_MODES
from pldr_ref.registry import FORWARD_STAGES, OP_FUNCTIONS, Stage

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def missing_coverage(cases, stages=FORWARD_STAGES, op_functions=OP_FUNCTIONS) -> list[str]:
    """What has no fixture among ``cases`` (CaseSpec or case.json dicts with name/kind/config/outputs)."""
    kinds = {c["kind"] for c in cases}
    model_outputs = {name.rsplit(".", 1)[-1] for c in cases if c["kind"] == "forward" for name in c["outputs"]}
    missing = []
    for stage in stages:
        op_kinds = {k for k, fn in op_functions.items() if fn is stage.function} | {stage.name}
        if not op_kinds & kinds:
            missing.append(f"stage {stage.name}: no op-level case")
        if not set(stage.outputs) <= model_outputs:
            missing.append(f"stage {stage.name}: outputs {stage.outputs} not in any model-level trace")
    missing += [f"OP_FUNCTIONS[{k!r}]: no case" for k in op_functions if k not in kinds]
    configs = [PLDRConfig.from_dict(c["config"]) for c in cases if c["config"]]  # a default switch is not stored
    for field, values in (("g_mode", G_MODES), ("mask_mode", MASK_MODES), ("rope_layout", ROPE_LAYOUTS),
                          ("rope_precision", ROPE_PRECISIONS), ("gram_mode", GRAM_MODES),
                          ("metric_learner", METRIC_LEARNERS)):
        seen = {getattr(cfg, field) for cfg in configs}
        missing += [f"config {field}={v!r}: no case" for v in values if v not in seen]
    modes = {c["args"].get("mode") for c in cases if c["kind"] == "cached_generation"}
    missing += [f"cache mode {m!r}: no case" for m in [*NATIVE_MODES, "hf", "hf-first-G"] if m not in modes]
    return missing


def _spec_dicts():
    from pldr_ref.fixtures.build import compute_case

    out = []
    for s in build_suite("default"):
        outputs = ()
        if s.kind == "forward" and s.tier == "float64" and s.config.d_model <= 64:
            outputs = tuple(json.loads(compute_case(s)[0]["case.json"])["outputs"])
        out.append({"name": s.name, "kind": s.kind, "args": dict(s.args), "outputs": outputs,
                    "config": None if s.config is None else s.config.to_dict()})
    return out


def _committed_dicts():
    return [json.loads(p.read_text()) for p in sorted(GOLDEN.glob("*/*/case.json"))]


def test_committed_suite_covers_everything():
    assert missing_coverage(_committed_dicts()) == []


def test_suite_definition_covers_everything():
    assert missing_coverage(_spec_dicts()) == []


def test_every_runner_kind_is_used():
    assert {c["kind"] for c in _committed_dicts()} == set(RUNNERS)


def test_cache_modes_are_the_inference_modes():
    assert set(CACHE_MODES) == {*NATIVE_MODES, "hf", "hf-first-G"}


def test_new_stage_without_fixture_fails():
    """Negative control: a stage added to FORWARD_STAGES with no case is reported."""

    def new_fn(x):
        return x

    extra = (*FORWARD_STAGES, Stage("new_stage", new_fn, ("new_out",), "y = x", "none"))
    ops = {**OP_FUNCTIONS, "new_op": new_fn}
    missing = missing_coverage(_committed_dicts(), extra, ops)
    assert any("new_stage" in m for m in missing)
    assert any("new_op" in m for m in missing)


def test_removed_case_is_reported():
    cases = [c for c in _committed_dicts() if c["kind"] != "potential_tensor"]
    assert any("potential_tensor" in m for m in missing_coverage(cases))
    cases = [c for c in _committed_dicts() if c["args"].get("mode") != "kv"]
    assert any("'kv'" in m for m in missing_coverage(cases))
    cases = [dataclasses.replace(s) for s in []]  # no cases at all
    assert len(missing_coverage(cases)) > 20
