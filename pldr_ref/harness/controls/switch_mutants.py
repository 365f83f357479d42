"""Switch mutants (issue 12): float64 reference backends that run with ONE switch set to a wrong value.

Each mutant is :class:`~pldr_ref.backends.reference.ReferenceBackend` with one ``PLDRConfig`` switch replaced
(or, for ``position_ids``, the per-row positions dropped) before every case and every isolated stage.  It
names the golden switch case (:mod:`pldr_ref.fixtures.suite_switches`) the harness must fail it on; the
unmutated reference passes the same case.  ``tests/test_switches_mutants.py`` runs them all.

The wrong value is chosen to be visible in float64: ``score_scale="reciprocal"`` against ``"exact"`` and
``rope_table="keras-0.6.4"`` against ``"exact"`` differ only by float64 roundings (one ulp of a scale or a
frequency), which no tolerance above the case's own one-ulp sensitivity can resolve; their mutants use the
float32 value instead (docs/equations.md, "Emulation switches").
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pldr_ref.backends.reference import ReferenceBackend
from pldr_ref.config import ROPE_PRECISIONS
from pldr_ref.fixtures.suite import build_suite
from pldr_ref.fixtures.suite_switches import TABLE_TAG
from pldr_ref.harness.protocol import StageRequest
from pldr_ref.params import Params, param_shapes
from pldr_ref.switches import ENGINE_SWITCHES, SWITCHES


@dataclasses.dataclass(frozen=True)
class SwitchMutation:
    """``switch`` forced to ``wrong`` on ``case`` (``switch="position_ids"``: the per-row positions dropped;
    ``switch="mode"``: the case's inference mode replaced)."""

    name: str
    switch: str
    wrong: Any
    case: str
    description: str


def _mutated_config(config: Any, mutation: SwitchMutation) -> Any:
    if mutation.switch in ("position_ids", "mode"):
        return config
    change = {mutation.switch: mutation.wrong}
    if mutation.switch == "rope_table" and mutation.wrong in ROPE_PRECISIONS:
        change["rope_precision"] = mutation.wrong  # the legacy switch must agree (PLDRConfig refuses a contradiction)
    return config.replace(**change)


def _mutated_inputs(inputs: dict[str, Any], mutation: SwitchMutation) -> dict[str, Any]:
    """A replayed RoPE table is dropped when the mutant's table source is not ``explicit`` (a table given under
    another source is refused, never silently ignored)."""
    if mutation.switch == "rope_table" and mutation.wrong != "explicit":
        return {k: v for k, v in inputs.items() if k not in ("rope_cos", "rope_sin")}
    return inputs


def _mutated_params(config: Any, params: Any) -> Params:
    """``params`` for the mutated ``config``: the tensors it has no use for (a switch that gates parameters, such as
    an optional stage's own norms, put back at its default) are left out, so the mutant computes, never errors."""
    wanted = param_shapes(config)
    return Params(config, {k: v for k, v in params.items() if k in wanted})


class SwitchMutant(ReferenceBackend):
    """The float64 reference with one switch forced to a wrong value."""

    mutation: SwitchMutation

    def __init__(self, mutation: SwitchMutation) -> None:
        self.mutation = mutation
        self.name = f"switch-mutant-{mutation.name}"

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        cfg = _mutated_config(case.config, self.mutation)
        inputs = _mutated_inputs(dict(case.inputs), self.mutation)
        args = dict(case.args)
        if self.mutation.switch == "position_ids":
            inputs.pop("position_ids", None)
        if self.mutation.switch == "mode":
            args["mode"] = self.mutation.wrong
        mutated = dataclasses.replace(case, config=cfg, params=_mutated_params(cfg, case.params), inputs=inputs,
                                      args=args)
        return super().run_case(mutated, dtype)

    def run_stage(self, request: StageRequest) -> dict[str, np.ndarray]:
        cfg = _mutated_config(request.config, self.mutation)
        inputs = _mutated_inputs(dict(request.inputs), self.mutation)
        if self.mutation.switch == "position_ids" and "positions" in inputs and np.ndim(inputs["positions"]) == 2:
            inputs["positions"] = np.arange(np.shape(inputs["positions"])[1])
        params = _mutated_params(cfg, request.params)
        return super().run_stage(dataclasses.replace(request, config=cfg, params=params, inputs=inputs))


#: One mutation per switch value with a switch case: the case name (without ``model/``) and the wrong value.
SWITCH_MUTATIONS: tuple[SwitchMutation, ...] = (
    SwitchMutation("keras-table-as-float32", "rope_table", "float32", "switch_rope_table_keras064",
                   "keras-nlp 0.6.4 float64 angles replaced by the float32 table"),
    SwitchMutation("explicit-table-ignored", "rope_table", "float32", "switch_rope_table_explicit",
                   "the replayed table ignored: the correctly rounded float32 table instead"),
    SwitchMutation("hf-half-rope-in-float32", "rope_arithmetic", "float32", "switch_rope_arithmetic_float64",
                   "HF reference_rope=False rotated in float32 (q, k rounded) instead of float64"),
    SwitchMutation("f32-rope-rotated-in-float64", "rope_arithmetic", "float64", "switch_rope_arithmetic_float32",
                   "torchtune's float32 rotation done in float64 with q, k unrounded"),
    SwitchMutation("double-cast-qk-unrounded", "rope_arithmetic", "float64", "switch_rope_arithmetic_float64_qk_f32",
                   "model.double(): q and k not rounded to float32 before the float64 rotation"),
    SwitchMutation("scale-sqrt-in-float64", "score_scale", "exact", "switch_score_scale_float32",
                   "PT/TF sqrt(d_k) taken in float64 instead of float32"),
    SwitchMutation("reciprocal-scale-in-float32", "score_scale", "float32", "switch_score_scale_reciprocal",
                   "HF 1/sqrt(d_k) replaced by the float32 square root"),
    SwitchMutation("mask-added-in-float64", "mask_add_dtype", "float64", "switch_mask_add_float32",
                   "the -1e9 mask added in float64: fully masked rows become softmax(Sc), not uniform"),
    SwitchMutation("softmax-in-float64", "softmax_precision", "float64", "switch_softmax_float32",
                   "HF eager's float32 softmax computed in float64"),
    SwitchMutation("masked-rows-arithmetic-not-zeros", "masked_row", "arithmetic", "switch_masked_row_zeros",
                   "fully masked rows left uniform (finfo.min arithmetic) instead of zeros"),
    SwitchMutation("masked-rows-arithmetic-not-uniform", "masked_row", "arithmetic", "switch_masked_row_uniform",
                   "fully masked rows left at zeros (ideal) instead of uniform"),
    SwitchMutation("masked-rows-zeros-not-nan", "masked_row", "zeros", "switch_masked_row_nan",
                   "fully masked rows zeros instead of NaN (hides the NaN an eager float32 softmax spreads)"),
    SwitchMutation("pads-from-token-id", "pad_source", "token", "switch_pad_source_attention_mask",
                   "id 0 masked without an attention mask (native rule) where HF masks nothing"),
    SwitchMutation("position-ids-ignored", "position_ids", None, "switch_position_ids",
                   "per-row position_ids ignored: every row at 0..S-1"),
    SwitchMutation("hf-generate-positions-ignored", "mode", "hf", "switch_hf_generate_left_padded",
                   "HF generate's per-row positions ignored: left-padded rows rotated at the sequence index"),
    SwitchMutation("hf-generate-4x-positions-for-5x", "mode", "hf-generate-4.x", "switch_hf_generate_left_padded_5x",
                   "transformers 4.x's left-pad positions (pads at 1) where 5.x puts them at 0"),
)


def table_mutations(suite: str = "full") -> tuple[SwitchMutation, ...]:
    """One mutation per case generated from the switch table (:func:`pldr_ref.fixtures.suite_switches.table_cases`):
    its one non-default switch put back at the default.  None on today's table (every value has a hand-written
    case)."""
    out = []
    for spec in build_suite(suite):
        if TABLE_TAG not in spec.tags:
            continue
        (sw,) = [s for s in SWITCHES if s.name in ENGINE_SWITCHES and getattr(spec.config, s.name) != s.default]
        short = spec.name.split("/", 1)[1]
        value = getattr(spec.config, sw.name)
        out.append(SwitchMutation(f"{short}-at-default", sw.name, sw.default, short,
                                  f"{sw.name}={value!r} computed at the default {sw.default!r}"))
    return tuple(out)


def all_mutations(suite: str = "full") -> tuple[SwitchMutation, ...]:
    """The hand-written mutations and those of the table's generated cases."""
    return SWITCH_MUTATIONS + table_mutations(suite)


def mutant_backend(mutation: SwitchMutation) -> SwitchMutant:
    """The backend of ``mutation``."""
    return SwitchMutant(mutation)
