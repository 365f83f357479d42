"""The one composition of the engines (torch, JAX): a decoder layer and a model forward walk the registry's stages
(:data:`pldr_ref.registry.FORWARD_STAGES`) in forward order, and each stage is computed by the engine's own entry of
its stage table -- the same entry an isolated stage request runs.  So an engine writes every stage body once, and
its layer cannot drift from its isolated stages (``tests/test_engine_stage_chain_torch.py`` and ``..._jax.py`` check
them bit for bit).

The walk owns the data flow between stages, written once for every engine: the values are named by the trace names
of ``Stage.inputs`` / ``Stage.outputs``; the cache tables derive from the registry's per-output declarations
(``Output.frozen_by``, ``Output.cache``, the key-axis layout), so they name no trace entry.  The cache hooks of spec
§8 (:class:`LayerCache`) prepend cached keys and values to the new rows and replace the stages a frozen A or G makes
unnecessary (:func:`replaced_stages`); a G_LM without PLGA parameters (``g_mode`` identity / random / external) comes
from the engine's ``fixed_g``.  The engine gives how to run one stage (its table, weights and extra values) and how
to join two tensors along the key axis.  Array-library free: imports neither torch nor JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from pldr_ref.layer import LAYER_TRACE_NAMES
from pldr_ref.registry import DEPTH_LOOP, FORWARD_STAGES, FROZEN, HEAD_KEY, LAYER_FLOW, Stage, read_view

#: The per-layer stages in forward (registry) order: the walk of one decoder layer.
LAYER_STAGE_ORDER: tuple[Stage, ...] = tuple(s for s in FORWARD_STAGES if s.per_layer)

#: The model-level stages before the layers (embedding, input norm) and after them (LM head), in registry order.
MODEL_HEAD_STAGES: tuple[Stage, ...] = tuple(
    s for s in FORWARD_STAGES[:FORWARD_STAGES.index(LAYER_STAGE_ORDER[0])] if not s.per_layer)
MODEL_TAIL_STAGES: tuple[Stage, ...] = tuple(
    s for s in FORWARD_STAGES[FORWARD_STAGES.index(LAYER_STAGE_ORDER[-1]):] if not s.per_layer)

#: The trace name of a layer's output, the name the first tail stage reads it under, and the layers' input.
LAYER_OUTPUT, MODEL_HIDDEN, MODEL_INPUT = DEPTH_LOOP.layer_output, DEPTH_LOOP.model_output, DEPTH_LOOP.model_input

#: Trace entries that have cached rows in front of the new ones under a KV cache (the registry's key-axis outputs):
#: entry -> :class:`LayerCache` field (``past_`` + entry).
PAST_ROWS: dict[str, str] = {o.name: f"past_{o.name}" for o in LAYER_FLOW if o.layout == HEAD_KEY}


def _frozen_by() -> dict[str, tuple[Stage, ...]]:
    """{cache input (``Output.frozen_by``, a :class:`LayerCache` field): the per-layer stages whose outputs it
    freezes}, in registry order."""
    out: dict[str, tuple[Stage, ...]] = {}
    for stage in LAYER_STAGE_ORDER:
        for key in dict.fromkeys(o.frozen_by for o in stage.flow if o.frozen_by is not None):
            out[key] = (*out.get(key, ()), stage)
    return out


#: The stages each frozen cache input replaces: ``frozen_A`` (KV cache of the global Gram) the density operator and
#: metric learner; ``frozen_G_LM`` (G cache) the PLGA stages.
FROZEN_BY: dict[str, tuple[Stage, ...]] = _frozen_by()

#: The entries each frozen cache input gives (its outputs the cache keeps :data:`~pldr_ref.registry.FROZEN`), in
#: the order of its :class:`LayerCache` field: one value (``frozen_A``: A) or a tuple (``frozen_G_LM``: A_LM, A_P,
#: G_LM).
FROZEN_ENTRIES: dict[str, tuple[str, ...]] = {
    key: tuple(o.name for s in stages for o in s.flow
               if o.frozen_by == key and o.cache is not None and o.cache.use == FROZEN)
    for key, stages in FROZEN_BY.items()}


@dataclasses.dataclass(frozen=True)
class LayerCache:
    """The cache hooks of one layer call (spec §8), in the engine's arrays; the field names derive from the registry
    (:data:`PAST_ROWS`, :data:`FROZEN_BY`).  ``past_k_rot`` (rotated keys) and ``past_v`` [B, H, T0, d_k] are
    prepended to the new rows; ``frozen_A`` replaces the Gram and metric learner (KV cache); ``frozen_G_LM`` =
    (A_LM, A_P, G_LM) replaces PLGA (G cache; A_LM / A_P may be None); ``gram_offset``: the Gram of earlier rows
    (cumulative Gram), read by the density operator's entry."""

    past_k_rot: Any = None
    past_v: Any = None
    frozen_A: Any = None
    frozen_G_LM: tuple[Any, Any, Any] | None = None
    gram_offset: Any = None


def _read_by(config: Any) -> frozenset[str]:
    """The trace names some per-layer stage that ``config`` enables reads."""
    return frozenset(n for s in LAYER_STAGE_ORDER if s.enabled(config) for n in s.inputs)


def replaced_stages(config: Any, cache: LayerCache) -> frozenset[str]:
    """The per-layer stages the cache hooks replace: those a given frozen input freezes (:data:`FROZEN_BY`); and,
    when any is given, the stages whose outputs no enabled stage reads -- the density operator without a metric
    learner under a frozen G: it would feed only the frozen stages (:func:`pldr_ref.layer.decoder_layer` does not
    compute it; uncached it runs for its trace entry).  The layer's output is always computed."""
    frozen = [key for key in FROZEN_BY if getattr(cache, key) is not None]
    if not frozen:
        return frozenset()
    out = {s.name for key in frozen for s in FROZEN_BY[key]}
    read = _read_by(config)
    out.update(s.name for s in LAYER_STAGE_ORDER
               if DEPTH_LOOP.layer_output not in s.outputs and not read.intersection(s.outputs))
    return frozenset(out)


def walk_layer(run: Callable[[Stage, MutableMapping[str, Any]], tuple[Any, ...]], config: Any,
               values: MutableMapping[str, Any], cache: LayerCache, *, fixed_g: Callable[[], Any],
               join_keys: Callable[[Any, Any], Any],
               after_stage: Callable[[str, MutableMapping[str, Any]], None] | None = None) -> dict[str, Any]:
    """One decoder layer: every enabled per-layer stage in registry order, run by ``run(stage, values)`` (which
    reads the stage's inputs from ``values`` and returns its outputs in ``Stage.outputs`` order).  ``run`` is handed
    ``values`` as the stage reads them (:func:`pldr_ref.registry.read_view`: an entry a stage's output replaces,
    such as a QK-norm's normalized q, reads as that output).

    ``values`` holds ``x``, ``positions`` and the optional ``mask`` on entry; ``after_stage(name, values)`` is the
    engine's glue after a stage (before cached rows are prepended); ``join_keys(past, new)`` concatenates along
    the key axis (2).  Returns the trace entries of :data:`pldr_ref.layer.LAYER_TRACE_NAMES` that exist, in that
    order (an optional stage's outputs included when it ran).
    """
    skip = replaced_stages(config, cache)
    for key, entries in FROZEN_ENTRIES.items():
        given = getattr(cache, key)
        if given is not None:
            values.update(zip(entries, given if len(entries) > 1 else (given,), strict=True))
    values["gram_offset"] = cache.gram_offset
    for stage in LAYER_STAGE_ORDER:
        if stage.name in skip or not stage.enabled(config):
            continue
        if "G_LM" in stage.inputs and values.get("G_LM") is None:  # no PLGA parameters, no G cache
            values["G_LM"] = fixed_g()
        values.update(zip(stage.outputs, run(stage, read_view(values, stage)), strict=True))
        if after_stage is not None:
            after_stage(stage.name, values)
        for entry, field in PAST_ROWS.items():
            past = getattr(cache, field)
            if entry in stage.outputs and past is not None:
                values[entry] = join_keys(past, values[entry])
    return {n: values[n] for n in LAYER_TRACE_NAMES if values.get(n) is not None}


def walk_model(run: Callable[[Stage, MutableMapping[str, Any]], tuple[Any, ...]], config: Any,
               values: MutableMapping[str, Any], layer: Callable[[int, Any], Mapping[str, Any]]) -> dict[str, Any]:
    """The depth loop: the enabled model-level head stages (embedding, input norm), then ``layer(i, x)`` for each
    of ``config.num_layers`` layers (its trace; the next layer reads its ``out2``), then the enabled tail stages
    (LM head) on the last output.

    ``values`` holds the head's inputs (``token_ids``); ``run(stage, values)`` as in :func:`walk_layer`.  Returns
    the trace with the golden names: the head's and tail's outputs and ``layers.{i}.{entry}``.
    """
    trace: dict[str, Any] = {}
    for stage in MODEL_HEAD_STAGES:
        if not stage.enabled(config):
            continue
        out = dict(zip(stage.outputs, run(stage, read_view(values, stage)), strict=True))
        values.update(out)
        trace.update(out)
    x = values[MODEL_INPUT]
    for i in range(config.num_layers):  # depth is sequential
        t = layer(i, x)
        trace.update({f"layers.{i}.{n}": v for n, v in t.items()})
        x = t[LAYER_OUTPUT]
    values[MODEL_HIDDEN] = x
    for stage in MODEL_TAIL_STAGES:
        if not stage.enabled(config):  # an optional model-level stage (off at its switch's default)
            continue
        out = dict(zip(stage.outputs, run(stage, read_view(values, stage)), strict=True))
        values.update(out)
        trace.update(out)
    return trace
