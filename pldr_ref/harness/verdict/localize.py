"""Stage localization: run every stage of the forward chain in isolation from golden upstream values
and find the first one that fails.

For a model (``forward``) or layer (``decoder_layer``) case the golden trace holds every
intermediate, so each stage of ``pldr_ref.registry.FORWARD_STAGES`` can be fed exactly the golden
values it would see in a perfect run (``STAGE_INPUTS``) and judged on its own outputs.  A wrong
equation then shows up at its own stage and nowhere earlier, whatever it does downstream.
Stages are walked in forward order (embedding, input_norm, the layer stages of layer 0, of layer
1, ..., lm_head); :func:`first_failure` picks the first failing one.  Stages a backend does not
declare are reported as unsupported.  Cached-step quirks of layer cases (past keys and values,
frozen A, frozen G) are honoured: a stage whose golden output is a frozen input is not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.attention import causal_padding_mask
from pldr_ref.harness.policy.stage_reference import reference_stage
from pldr_ref.harness.policy.tolerance import (
    Allowance,
    ensemble_allowance,
    error_stats,
    failed_tests,
    float64_allowance,
    gross_error,
    inner_dimension,
    output_allowance,
    round_to,
)
from pldr_ref.harness.verdict.compare import TensorComparison, compare_tensor
from pldr_ref.harness.verdict.output_types import output_type_problem, widened
from pldr_ref.layer import LAYER_TRACE_NAMES
from pldr_ref.model import resolve_pad_masking
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import Params
from pldr_ref.registry import (
    ALL_STAGES,
    DEPTH_LOOP,
    FORWARD_STAGES,
    HEAD_KEY,
    HEAD_ROW,
    MODEL_STAGES_AFTER,
    MODEL_STAGES_BEFORE,
    REPLACEMENTS,
    Stage,
)
from pldr_ref.registry import stage as registry_stage

#: Upstream golden values each stage is guaranteed to receive (leaf names; ``mask`` is added when
#: the case has one, ``gram_offset`` for a cumulative Gram with cached rows) -- from :mod:`pldr_ref.registry`.
STAGE_INPUTS: dict[str, tuple[str, ...]] = {s.name: s.inputs for s in ALL_STAGES}


def _frozen_by() -> dict[str, tuple[str, ...]]:
    """{layer-case cache input: the stages whose outputs it freezes} (the registry's ``Output.frozen_by``)."""
    out: dict[str, tuple[str, ...]] = {}
    for st in FORWARD_STAGES:
        for key in dict.fromkeys(o.frozen_by for o in st.flow if o.frozen_by is not None):
            out[key] = (*out.get(key, ()), st.name)
    return out


#: Stages skipped when a layer case freezes their output through a cache input.
FROZEN_BY = _frozen_by()

#: Per-layer stage outputs that cover all T keys (cached ones first): only the new rows are computed.
KEY_AXIS_OUTPUTS = tuple(o.name for st in FORWARD_STAGES for o in st.flow if o.layout == HEAD_KEY)
#: Per-layer stage outputs laid out over the call's new rows (their row count is the number of new rows).
_NEW_ROW_OUTPUTS = tuple(o.name for st in FORWARD_STAGES if st.per_layer for o in st.flow if o.layout == HEAD_ROW)


@dataclasses.dataclass(frozen=True)
class OutputResult:
    """Verdict on one tensor: status in :data:`OUTPUT_STATUSES`.

    ``not_judgeable``: the allowance would exceed the stated fraction of the output's scale (or the ensemble's
    runs are non-finite) in a multi-stage case: it counts against the verdict unless covered by isolated
    stages (:func:`pldr_ref.harness.validate.case_status`).  ``not_applicable``: not judged and not counted
    (the dtype cannot represent a single-stage op case, or a float64 tolerance is absent).
    """

    name: str
    stage: str | None
    status: str
    comparison: TensorComparison | None
    allowance: Allowance | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"name": self.name, "stage": self.stage, "status": self.status,
                "comparison": None if self.comparison is None else self.comparison.to_dict(),
                "allowance": None if self.allowance is None else self.allowance.to_dict(), "note": self.note}


@dataclasses.dataclass(frozen=True)
class StageResult:
    """Verdict on one isolated stage: status in {pass, fail, unsupported, error, not_applicable}."""

    stage: str
    layer: int | None
    status: str
    outputs: tuple[OutputResult, ...]
    note: str = ""

    @property
    def label(self) -> str:
        """``stage`` or ``layers.{l}.stage``."""
        return self.stage if self.layer is None else f"layers.{self.layer}.{self.stage}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"stage": self.stage, "layer": self.layer, "status": self.status, "note": self.note,
                "outputs": [o.to_dict() for o in self.outputs]}


#: Note of a not-judgeable output that is outside even its own wide allowance.
OUTSIDE_WIDE = "outside even this wide allowance"

#: Every status of one output.
OUTPUT_STATUSES = ("pass", "fail", "not_judgeable", "not_applicable", "missing", "not_produced")


def judge(name: str, stage: str | None, expected: np.ndarray, actual: np.ndarray, dtype: str,
          allowance: Allowance) -> OutputResult:
    """Compare and apply ``allowance``: pass iff the max test (no element outside it, no NaN/inf class
    difference) and, when set, the relative RMS, offset and gain tests hold.  A not-judged output still
    fails on a NaN/inf class difference when it counts against the verdict (``judgeable`` False)."""
    why = output_type_problem(expected, actual)  # never parsed or converted (pldr_ref.harness.verdict.output_types)
    if why is not None:
        return OutputResult(name, stage, "fail", None, allowance, note=f"not a numeric array of its type ({why})")
    actual = widened(actual)
    if allowance.judged:
        cmp = compare_tensor(name, expected, actual, dtype, allowance.atol, allowance.rtol)
        problems = failed_tests(cmp, allowance)
        return OutputResult(name, stage, "fail" if problems else "pass", cmp, allowance, note="; ".join(problems))
    cmp = compare_tensor(name, expected, actual, dtype)
    if cmp.error is not None:
        return OutputResult(name, stage, "fail", cmp, allowance, note=cmp.error)
    gross = gross_error(cmp, allowance)
    if gross is not None:  # not judgeable only stops a pass (pldr_ref.harness.policy.tolerance.K_GROSS)
        return OutputResult(name, stage, "fail", cmp, allowance, note=gross)
    if not allowance.judgeable:
        if cmp.class_mismatches:
            return OutputResult(name, stage, "fail", cmp, allowance,
                                note=f"{cmp.class_mismatches} NaN/inf class mismatches (never within any allowance)")
        if allowance.atol is not None:
            # Outside even this wide allowance does not fail the output: legitimate runs of an ill-conditioned
            # chain (A_LM^P amplifies by |P|) scatter far beyond the ensemble's statistic there.  It is noted, and
            # names the stage of a case that fails elsewhere (:func:`pldr_ref.harness.validate.describe_first_failure`).
            wide = compare_tensor(name, expected, actual, dtype, allowance.atol, allowance.rtol)
            problems = failed_tests(wide, allowance)
            if problems:
                return OutputResult(name, stage, "not_judgeable", wide, allowance,
                                    note=f"{allowance.reason}; {OUTSIDE_WIDE}: " + "; ".join(problems))
            cmp = wide
        return OutputResult(name, stage, "not_judgeable", cmp, allowance, note=allowance.reason)
    return OutputResult(name, stage, "not_applicable", cmp, allowance, note=allowance.reason)


def layer_upstream(case: Any, layer: int, prefix: str = "") -> dict[str, np.ndarray]:
    """Golden trace entries of ``layer`` by leaf name, plus positions, mask and cache inputs."""
    head = f"{prefix}layers.{layer}."
    up = {k[len(head):]: v for k, v in case.outputs.items() if k.startswith(head) and "." not in k[len(head):]}
    if case.kind == "decoder_layer":
        for name in ("positions", "mask", "gram_offset"):
            if name in case.inputs:
                up[name] = case.inputs[name]
    else:
        up.update(model_positions_and_mask(case))
    return up


def model_positions_and_mask(case: Any) -> dict[str, np.ndarray]:
    """positions and mask of a ``forward`` case, as :func:`pldr_ref.model.forward` builds them."""
    ids = np.asarray(case.inputs["token_ids"])
    start = int(case.args.get("start_pos", 0))
    positions = np.arange(start, start + ids.shape[1])
    pad_masking = resolve_pad_masking(case.config, case.args.get("pad_masking"))  # None: the config's pad_source
    if "attention_mask" in case.inputs:
        pad = np.asarray(case.inputs["attention_mask"]) == 0
    elif pad_masking:
        pad = ids == case.config.pad_id
    else:
        pad = None
    out = {"positions": case.inputs.get("position_ids", positions),  # RoPE positions; the mask keeps the index
           "mask": causal_padding_mask(positions, positions, pad)}
    out.update({k: case.inputs[k] for k in ("rope_cos", "rope_sin") if k in case.inputs})  # explicit RoPE table
    return out


def stage_plan(case: Any) -> list[tuple[str, int | None, dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """(stage, layer, upstream inputs, golden outputs by leaf name) for every isolatable stage, in order: the
    structure stage and the model-level stages before the layers, every layer's stages, the model-level stages after
    the layers (:data:`pldr_ref.registry.DEPTH_LOOP` chains them)."""
    plan: list[tuple[str, int | None, dict[str, np.ndarray], dict[str, np.ndarray]]] = []
    g = case.outputs
    if case.kind == "forward":
        seq = registry_stage("sequence_mask")
        seq_in = {name: case.inputs[name] for name in seq.inputs}
        seq_in.update({"start_pos": np.array(int(case.args.get("start_pos", 0)), dtype=np.int64),
                       "pad_masking": np.array(resolve_pad_masking(case.config, case.args.get("pad_masking")))})
        seq_in.update({k: case.inputs[k] for k in ("attention_mask", "position_ids") if k in case.inputs})
        seq_out = model_positions_and_mask(case)
        plan.append((seq.name, None, seq_in, {k: seq_out[k] for k in seq.outputs}))
        plan += _model_level_plan(case, MODEL_STAGES_BEFORE, {})
        layers = range(case.config.num_layers)
    elif case.kind == "decoder_layer":
        layers = [int(case.args["layer"])]
    else:
        return plan
    frozen = {s for key, stages in FROZEN_BY.items() if key in case.inputs for s in stages}
    for li in layers:
        up = layer_upstream(case, li)
        s_new = next((up[o].shape[2] for o in _NEW_ROW_OUTPUTS if o in up), None)
        for st in FORWARD_STAGES:
            if not st.per_layer or st.name in frozen:
                continue
            if not all(o in up for o in st.outputs) or not all(n in up for n in STAGE_INPUTS[st.name]):
                continue
            inputs = {k: v for k, v in up.items() if _is_upstream(k, st.name)}
            golden = {}
            for o in st.outputs:
                val = up[o]
                if o in KEY_AXIS_OUTPUTS and s_new is not None:
                    val = val[:, :, val.shape[2] - s_new:]
                golden[o] = val
            plan.append((st.name, li, inputs, golden))
    if case.kind == "forward":
        last = f"layers.{case.config.num_layers - 1}.{DEPTH_LOOP.layer_output}"
        plan += _model_level_plan(case, MODEL_STAGES_AFTER, {DEPTH_LOOP.model_output: g[last]} if last in g else {})
    return plan


def _model_level_plan(case: Any, stages: tuple[Stage, ...], upstream: dict[str, np.ndarray]
                      ) -> list[tuple[str, None, dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """The plan entries of model-level ``stages`` of a forward case: each is isolated when its golden outputs and its
    inputs (``upstream``, then the golden model-level outputs, then the case's inputs) are all there; it receives its
    declared inputs, the optional ones its body takes and the outputs replacing an input (``Output.replaces``) that
    are there."""
    g = case.outputs

    def value(name: str) -> np.ndarray | None:
        for source in (upstream, g, case.inputs):
            if name in source:
                return source[name]
        return None

    out = []
    for st in stages:
        optional = tuple(n for n, required in st.body_inputs if not required and value(n) is not None)
        # an output that stands for an input of later stages (Output.replaces) goes along: the stage reads it
        # in that input's place (registry.read_view)
        replacing = tuple(n for n in sorted(REPLACEMENTS) if n not in st.outputs and value(n) is not None)
        inputs = {n: value(n) for n in (*st.inputs, *optional, *replacing)}
        if any(v is None for v in inputs.values()) or not all(o in g for o in st.outputs):
            continue
        out.append((st.name, None, inputs, {o: g[o] for o in st.outputs}))
    return out


def _is_upstream(name: str, stage: str) -> bool:
    """True if trace entry ``name`` precedes ``stage`` (or is a non-trace input such as the mask)."""
    if name not in LAYER_TRACE_NAMES:
        return True
    stage_outputs = next(s.outputs for s in FORWARD_STAGES if s.name == stage)
    first = min(LAYER_TRACE_NAMES.index(o) for o in stage_outputs)
    return LAYER_TRACE_NAMES.index(name) < first


def _rounded_params(params: Params, dtype: str, cache: dict) -> Params:
    key = (id(params), dtype)
    if key not in cache:
        cache[key] = (params, Params(params.config, {k: round_to(dtype, v) for k, v in params.items()}))
    return cache[key][1]


def stage_allowance(case: Any, stage: str, layer: int | None, leaf: str, inputs: Mapping[str, np.ndarray],
                    golden: np.ndarray, dtype: str, params_cache: dict,
                    member_runs: Any) -> Allowance:
    """float64: the case tolerance of the trace entry; integer / boolean entries: exact; lower dtypes: the
    four tests scaled by the ensemble members' runs of this stage alone (its own conditioning, never the
    compounded one).  An isolated stage's allowance above the stated fraction of its scale makes it not judged
    (it covers nothing); it never counts against the verdict on its own."""
    full = leaf if layer is None else f"layers.{layer}.{leaf}"
    if np.asarray(golden).dtype.kind in "biu" or dtype == "float64":
        if dtype == "float64" and np.asarray(golden).dtype.kind == "f":
            return float64_allowance(case, full)
        return output_allowance(case, full, dtype, golden, None)
    if callable(member_runs):  # the members' runs, computed only when the statistics are not stored
        from pldr_ref.harness.policy.ensemble import stored_stats

        runs = member_runs
        stats = stored_stats(case, dtype, f"stage:{stage}:{layer}:{leaf}",
                             lambda: _ensemble_stats(golden, dtype, runs(), leaf))
    else:
        stats = _ensemble_stats(golden, dtype, member_runs, leaf)
    return ensemble_allowance(dtype, golden, stats, inner_dimension(case),
                              source="isolated stage (calibration ensemble)", single_stage=True)


def _ensemble_stats(golden: np.ndarray, dtype: str, runs: Any, leaf: str) -> Any:
    """Robust statistics of the members' runs of one stage output (None: no usable run)."""
    from pldr_ref.harness.policy.ensemble import arithmetic_stats

    if runs is None:
        return None
    if isinstance(runs, Mapping):  # one run (e.g. already restricted to a representable part)
        runs = [runs]
    per = [None if r is None or leaf not in r else error_stats(golden, round_to(dtype, r[leaf])) for r in runs]
    return arithmetic_stats(per, dtype)


def ensemble_stage(case: Any, stage: str, layer: int | None, inputs: Mapping[str, np.ndarray], dtype: str,
                   params_cache: dict) -> list[dict[str, np.ndarray] | None]:
    """Every calibration member's run of the stage from the golden upstream values (:func:`storage_stage` with that
    member's arithmetic; memoized per case, dtype and stage)."""
    from pldr_ref.harness.policy.ensemble import stage_runs

    memo: dict[str, Any] = {}

    def run(ops: Ops) -> dict[str, np.ndarray] | None:
        if "inputs" not in memo:  # the members share the rounded inputs
            # an output replacing an input (Output.replaces) is read in its place (registry.read_view)
            memo["inputs"] = {k: round_to(dtype, v) for k, v in inputs.items()
                              if k in STAGE_INPUTS.get(stage, ()) or k in REPLACEMENTS or k not in LAYER_TRACE_NAMES}
        return storage_stage(case, stage, layer, memo["inputs"], dtype, params_cache, rounded=True, ops=ops)

    runs = stage_runs(case, stage, layer, dtype, run)
    return [r for _, r in runs]


def storage_stage(case: Any, stage: str, layer: int | None, inputs: Mapping[str, np.ndarray], dtype: str,
                params_cache: dict, *, rounded: bool = False, ops: Ops = FLOAT64_OPS) -> dict[str, np.ndarray] | None:
    """The reference stage, in the arithmetic ``ops`` (default float64), on dtype-rounded inputs (``rounded``:
    already rounded) and parameters (None if it cannot run)."""
    if not rounded:
        inputs = {k: round_to(dtype, v) for k, v in inputs.items()}
    try:
        return reference_stage(stage, layer, case.config, _rounded_params(case.params, dtype, params_cache), inputs,
                               round_to=lambda a: round_to(dtype, a), ops=ops)
    except (ValueError, FloatingPointError, OverflowError):
        return None


def read_only(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copies of ``arrays`` that cannot be written (what a backend is handed).  An array that is already read-only
    (the tensors of a :class:`pldr_ref.params.Params`) is handed as a read-only view instead of a copy: NumPy
    refuses to make a view of a read-only array writeable, and a 110 M-parameter set is not copied per case."""
    out = {}
    for k, v in arrays.items():
        if isinstance(v, np.ndarray) and not v.flags.writeable and v.base is None:  # owns its (read-only) data
            a = v.view()
        else:
            a = np.array(v, copy=True)
        a.flags.writeable = False
        out[k] = a
    return out


def unrepresentable_stage(case: Any, dtype: str) -> str | None:
    """The first isolated stage of ``case`` (forward order) that ``dtype`` cannot represent at all: its storage run
    (float64 inside the stage, output rounded) from the golden upstream values is itself off by more than the not-
    judgeable thresholds (relative RMS above ``MAX_ALLOWANCE_FRACTION`` or max error above ``MAX_ABS_FRACTION`` of
    the scale), e.g. the fully masked rows of an additive -1e9 mask, where float32 absorbs the scores. None if every
    stage is representable (or the case has no isolatable stage, or dtype is float64)."""
    from pldr_ref.harness.policy.tolerance import MAX_ABS_FRACTION, MAX_ALLOWANCE_FRACTION

    if dtype == "float64":
        return None
    params_cache: dict = {}
    for stage, layer, inputs, golden in stage_plan(case):
        stored = storage_stage(case, stage, layer, inputs, dtype, params_cache)
        if stored is None:
            continue
        for leaf, want in golden.items():
            if leaf not in stored or np.asarray(want).dtype.kind != "f":
                continue
            st = error_stats(want, round_to(dtype, stored[leaf]))
            g = np.asarray(want, dtype=np.float64)
            fin = np.isfinite(g)
            scale = float(np.max(np.abs(g[fin]))) if fin.any() else 0.0
            if st.max_abs is None or (scale > 0 and (st.rms_rel > MAX_ALLOWANCE_FRACTION
                                                     or st.max_abs > MAX_ABS_FRACTION * scale)):
                where = stage if layer is None else f"layers.{layer}.{stage}"
                err = "non-finite" if st.max_abs is None else f"relative RMS {st.rms_rel:.1%}"
                return f"{where} (output {leaf}: {dtype} storage error from golden upstream values {err})"
    return None


def first_failing_stage(stages: list[StageResult]) -> StageResult | None:
    """The first stage (forward order) whose isolated run failed or crashed."""
    return next((s for s in stages if s.status in ("fail", "error")), None)
