"""The representable part of a case below float64: rows whose outputs do not depend on fully masked attention rows
that the dtype cannot represent.

With an additive mask (``mask_mode="additive"``, -1e9) a fully masked query row's softmax input is score - 1e9;
float64 keeps the scores (ulp(1e9) = 1.2e-7), float32 and below absorb them (ulp(1e9) = 64 in float32), so the
golden values of such a row cannot be represented.  The dependence is propagated through the layer math
(:func:`pldr_ref.layer.decoder_layer`): a tainted input row taints its q, k, v; a fully masked row, a tainted
unmasked key or a tainted Gram taints the attention row and everything after it in that row (E, ctx, attn_out,
out1, ffn_out, out2); the global Gram sums q~ q~^T over every row of a sample, so one tainted row of a layer's input
taints the Gram (A0 ... G_LM) and hence every row of that sample in that layer; the cumulative Gram taints the rows
from the first tainted one on.  Everything else is judged with the usual tolerance model.

Which rule and which layout each output follows is declared in the registry (``pldr_ref.registry.Output``: ``rows``
and ``layout``; the layer's chaining: ``DEPTH_LOOP``); this module holds the rules, not the leaves.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pldr_ref.registry import (
    DEPTH_LOOP,
    FORWARD_STAGES,
    GRAM,
    HEAD_KEY,
    HEAD_ROW,
    LAYER_FLOW,
    MODEL_OUTPUTS_AFTER,
    MODEL_OUTPUTS_BEFORE,
    ROW,
    ROWS_ATTENDED,
    ROWS_GRAM,
    ROWS_KEYS,
    ROWS_OWN,
    output_declaration,
)

#: {stage: its outputs that are attention weights}: in an isolated run (from golden upstream values) only their fully
#: masked rows are unrepresentable (the golden weights feed the next stage exactly).
_WEIGHTS = {st.name: tuple(o.name for o in st.flow if o.weights) for st in FORWARD_STAGES}


@dataclasses.dataclass(frozen=True)
class RepresentablePart:
    """Which elements of each output are judged (``keep`` by output name, broadcastable to its shape), and the
    row counts of the primary outputs (``judged_rows`` of ``total_rows`` (batch, position) rows)."""

    keep: dict[str, np.ndarray]
    judged_rows: int
    total_rows: int
    dtype: str
    full: np.ndarray  # [B, S] the fully masked query rows themselves

    def isolated_keep(self, stage: str, leaf: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """Keep mask of an isolated stage's output (run from golden upstream values): only the softmax rows that
        are fully masked are unrepresentable there (its golden output E feeds value_mix exactly)."""
        if leaf not in _WEIGHTS.get(stage, ()):
            return None
        try:
            return np.broadcast_to((~self.full)[:, None, :, None], shape)
        except ValueError:
            return None

    @property
    def note(self) -> str:
        """The report line."""
        return (f"judged on {self.judged_rows} of {self.total_rows} rows; excluded: fully masked rows not "
                f"representable in {self.dtype}")


def fully_masked_rows(mask: np.ndarray, batch: int) -> np.ndarray:
    """[B, S] True where every key of the query row is masked (mask: bool [B|1, 1, S, T], True = forbidden)."""
    m = np.asarray(mask, dtype=bool)
    full = np.all(m, axis=-1)[:, 0]
    return np.broadcast_to(full, (batch, full.shape[-1])).copy()


def _layer_taint(tx: np.ndarray, mask: np.ndarray, gram_mode: str) -> dict[str, np.ndarray]:
    """Row taint [B, S] of every leaf of one layer (:data:`pldr_ref.registry.LAYER_FLOW`) from the taint ``tx`` of
    its input rows, by each leaf's declared row dependence (module docstring)."""
    b, s = tx.shape
    m = np.broadcast_to(np.asarray(mask, dtype=bool)[:, 0], (b, s, mask.shape[-1]))
    full = np.all(m, axis=-1)
    if gram_mode == "cumulative":
        g = np.logical_or.accumulate(tx, axis=1)
    else:
        g = np.broadcast_to(np.any(tx, axis=1, keepdims=True), (b, s))
    t = m.shape[-1]
    keys = tx[:, None, -t:] if t <= s else np.zeros((b, 1, t), dtype=bool)
    key_in = np.any(keys & ~m, axis=-1)
    by_rows = {ROWS_OWN: tx, ROWS_GRAM: g, ROWS_KEYS: tx | g | np.any(keys, axis=-1),
               ROWS_ATTENDED: tx | g | full | key_in}
    return {o.name: by_rows[o.rows] for o in LAYER_FLOW}


def _keep_for(leaf: str, taint: np.ndarray, shape: tuple[int, ...], gram_mode: str) -> np.ndarray | None:
    """Boolean keep mask for an output of trace leaf ``leaf`` broadcastable to ``shape``, by its declared layout
    (None: no declared layout, or one that does not fit the shape)."""
    try:
        layout = output_declaration(leaf)[1].layout
    except KeyError:
        return None
    keep = ~taint
    b, s = keep.shape
    if layout == ROW:
        k = keep.reshape(b, s, *([1] * (len(shape) - 2)))
    elif layout in (HEAD_ROW, HEAD_KEY) or (layout == GRAM and gram_mode == "cumulative"):
        k = keep[:, None].reshape(b, 1, s, *([1] * (len(shape) - 3)))
    elif layout == GRAM:
        k = keep[:, :1].reshape(b, *([1] * (len(shape) - 1)))
    else:
        return None
    try:
        return np.broadcast_to(k, shape)
    except ValueError:
        return None


def representable_part(case: Any, dtype: str) -> RepresentablePart | None:
    """The part of ``case`` that ``dtype`` can represent, or None when no exclusion applies (float64, a mask mode
    other than additive, no fully masked row, or the dtype resolves the masked rows: see
    :func:`pldr_ref.harness.verdict.localize.unrepresentable_stage`)."""
    from pldr_ref.harness.verdict.localize import model_positions_and_mask, unrepresentable_stage

    config = getattr(case, "config", None)
    if dtype == "float64" or config is None or config.mask_mode != "additive":
        return None
    if case.kind == "forward":
        mask = model_positions_and_mask(case)["mask"]
        batch, rows = np.shape(case.inputs["token_ids"])
        layers = list(range(config.num_layers))
    elif case.kind == "decoder_layer" and "mask" in case.inputs and DEPTH_LOOP.layer_input.name in case.inputs:
        mask = np.asarray(case.inputs["mask"])
        batch, rows = np.shape(case.inputs[DEPTH_LOOP.layer_input.name])[:2]
        layers = [int(case.args["layer"])]
    else:
        return None
    if mask is None or not fully_masked_rows(mask, batch).any() or unrepresentable_stage(case, dtype) is None:
        return None
    tx = np.zeros((batch, rows), dtype=bool)
    taints: dict[str, np.ndarray] = dict.fromkeys(MODEL_OUTPUTS_BEFORE, tx)
    for li in layers:
        lt = _layer_taint(tx, mask, config.gram_mode)
        for leaf, t in lt.items():
            taints[f"layers.{li}.{leaf}"] = t
        tx = lt[DEPTH_LOOP.layer_output]
    taints.update(dict.fromkeys(MODEL_OUTPUTS_AFTER, tx))
    keep: dict[str, np.ndarray] = {}
    for name, golden in case.outputs.items():
        if name not in taints:
            continue
        k = _keep_for(name.rsplit(".", 1)[-1], taints[name], np.shape(golden), config.gram_mode)
        if k is not None:
            keep[name] = k
    primary = tx  # the last layer's output rows: the logits' of a forward case, the layer output's of a layer case
    return RepresentablePart(keep, int(np.sum(~primary)), int(primary.size), dtype, fully_masked_rows(mask, batch))
