"""The bitwise check of an engine's one composition (issue 32, item 4): a whole case run by the engine equals, bit
for bit, the engine's own isolated stages (``run_stage``) chained by hand in the harness's stage order.

:func:`chain_case` walks :func:`pldr_ref.harness.verdict.localize.stage_plan` (the stages the harness isolates for the
case, in forward order) and feeds every stage the engine's *own* upstream outputs -- never a golden value -- except what
a case gives as an input (``x``, ``positions``, ``mask``, the cache hooks).  The cache glue is written here once,
plainly: cached keys and values are prepended to the new rows (``past_k``, ``past_v``), a frozen A / G replaces the
stages it freezes, and a fixed G (``g_mode`` identity / random / external) is read from the parameters.
:func:`bitwise_differences` lists every output whose bits differ; the tests assert it is empty and, as the negative
control, that it is not for an engine with one stage body perturbed or two stages' bodies swapped.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.harness.protocol import StageRequest
from pldr_ref.harness.verdict.localize import stage_plan
from pldr_ref.params import FIXED_G_KEY


@functools.cache
def case_named(name: str) -> Any:
    """A committed golden case, loaded once per test session (both engines' tests share it)."""
    return load_case(DEFAULT_GOLDEN_DIR / name)


#: Cache-hook inputs of a decoder-layer case -> the trace entry they give in place of a stage's output.
FROZEN_INPUTS = {"frozen_A": "A", "frozen_A_LM": "A_LM", "frozen_A_P": "A_P", "frozen_G_LM": "G_LM"}

#: Inputs of a model-level stage that are the case's own inputs (not computed by a stage).
CASE_INPUTS = ("token_ids", "start_pos", "pad_masking", "attention_mask", "position_ids")

#: Cache-hook inputs prepended (key axis 2) to the new rows' trace entry.
PAST_INPUTS = {"past_k": "k_rot", "past_v": "v"}


#: Structure a model-level chain computes that a whole-case run does not return.
STRUCTURE = ("positions", "mask")

def _layer_start(case: Any, values: Mapping[str, np.ndarray], layer: int) -> dict[str, np.ndarray]:
    """The chain's values of layer ``layer`` before its first stage: its input x, positions, mask, cache hooks."""
    if case.kind == "decoder_layer":
        start = {k: np.asarray(v) for k, v in case.inputs.items()}
    else:
        start = {"positions": values["positions"], "mask": values["mask"]}
        start["x"] = values["x0"] if layer == 0 else values[f"layers.{layer - 1}.out2"]
    for hook, entry in FROZEN_INPUTS.items():
        if hook in start:
            start[entry] = start[hook]
    return start


def _fixed_g(case: Any, layer: int, batch: int) -> np.ndarray:
    """G_LM without PLGA parameters: the layer's fixed operator repeated over the batch (float64, from the params)."""
    fixed = np.asarray(case.params[FIXED_G_KEY])[layer, 2, 0]
    return np.broadcast_to(fixed, (batch, *fixed.shape)).copy()


def chain_case(backend: Any, case: Any, dtype: str) -> tuple[dict[str, np.ndarray], set[str]]:
    """(outputs, given): the case's trace (golden names) computed by chaining ``backend.run_stage`` in the harness's
    stage order, each stage fed the previous stages' outputs of this chain (see module docstring), and the trace
    names no stage computes (a layer's input ``x``, frozen cache values, a fixed G_LM)."""
    out: dict[str, np.ndarray] = {}
    given: set[str] = set()
    layer_values: dict[int, dict[str, np.ndarray]] = {}
    for stage, layer, plan_inputs, _ in stage_plan(case):
        if layer is None:
            inputs = {k: out.get(k, v) for k, v in plan_inputs.items()}
            if stage == "lm_head":
                inputs = {"hidden": out[f"layers.{case.config.num_layers - 1}.out2"]}
            leaked = [k for k in inputs if k not in out and k not in CASE_INPUTS and stage != "lm_head"]
            assert not leaked, f"{stage} needs {leaked}, which no earlier stage of the chain gave"
            out.update(backend.run_stage(StageRequest(stage, None, case.config, case.params, dtype, inputs)))
            continue
        if layer not in layer_values:
            layer_values[layer] = _layer_start(case, out, layer)
            given.update(f"layers.{layer}.{k}" for k in ("x", *FROZEN_INPUTS.values()) if k in layer_values[layer])
        vals = layer_values[layer]
        if stage == "attention_scores" and "G_LM" not in vals:
            vals["G_LM"] = _fixed_g(case, layer, vals["x"].shape[0])
            given.add(f"layers.{layer}.G_LM")
        missing = [k for k in plan_inputs if k not in vals]
        assert not missing, f"{stage} (layer {layer}) needs {missing}, which no earlier stage of the chain gave"
        got = backend.run_stage(StageRequest(stage, layer, case.config, case.params, dtype,
                                             {k: vals[k] for k in plan_inputs}))
        out.update({f"layers.{layer}.{k}": v for k, v in got.items()})  # a cached step: the new rows only
        for hook, entry in PAST_INPUTS.items():
            if entry in got and hook in vals:
                got[entry] = np.concatenate([vals[hook], got[entry]], axis=2)
        vals.update(got)
    return out, given


def bitwise_differences(whole: Mapping[str, np.ndarray], chain: tuple[dict[str, np.ndarray], set[str]]) -> list[str]:
    """Every output of the chain (:func:`chain_case`) whose whole-case value differs in any bit (or shape, dtype,
    presence), plus every float output of the whole case the chain neither computes nor was given; empty when the two
    compositions agree bit for bit."""
    chained, given = chain
    bad = [f"{k}: not in the whole-case run" for k in chained if k not in whole and k not in STRUCTURE]
    bad += [f"{k}: not produced by the chain" for k in whole
            if k not in chained and k not in given and np.asarray(whole[k]).dtype.kind == "f"]
    for k in sorted(set(whole) & set(chained)):
        a, b = np.asarray(whole[k]), np.asarray(chained[k])
        if k.endswith(tuple(f".{e}" for e in PAST_INPUTS.values())) and a.ndim == 4 and b.ndim == 4:
            a = a[:, :, a.shape[2] - b.shape[2]:]  # the cached rows are a case input: the chain gives the new rows
        if a.shape != b.shape or a.dtype != b.dtype:
            bad.append(f"{k}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
        elif a.tobytes() != b.tobytes():
            bits_a, bits_b = (np.ascontiguousarray(t).view(np.uint8).reshape(t.size, -1) for t in (a, b))
            diff = int(np.count_nonzero((bits_a != bits_b).any(axis=1)))
            bad.append(f"{k}: {diff} of {a.size} values differ in their bits")
    return bad
