"""The full PLDR-LLM forward map with a trace of every intermediate (spec §2)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pldr_ref.attention import SoftmaxKernel, causal_padding_mask, check_kernel_used
from pldr_ref.config import PLDRConfig
from pldr_ref.inputs import validate_attention_mask, validate_token_ids
from pldr_ref.layer import LayerTrace, decoder_layer
from pldr_ref.memory_budget import check_forward_budget
from pldr_ref.norms import configured_layer_norm
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import NormParams, Params
from pldr_ref.rope import RopeTable, check_table_used
from pldr_ref.stage_hooks import FiniteCheck, StageHook, check_finite

__all__ = ["DepthPass", "ForwardOutput", "check_finite", "depth_pass", "embed", "forward", "input_norm", "lm_head",
           "positions_and_mask", "sequence_mask"]


@dataclasses.dataclass(frozen=True)
class ForwardOutput:
    """Result of :func:`forward`: logits [B, S, V] and the trace of every stage.

    ``embed`` is the sqrt(d)-scaled embedding [B, S, d], ``x0`` the input-LayerNorm
    output, ``layers[l]`` a :class:`LayerTrace` (empty when ``forward(..., keep_trace=False)``),
    ``positions`` the absolute positions [S].
    """

    config: PLDRConfig
    positions: np.ndarray
    embed: np.ndarray
    x0: np.ndarray
    layers: tuple[LayerTrace, ...]
    logits: np.ndarray

    def flat(self) -> dict[str, np.ndarray]:
        """Flat trace: ``embed``, ``x0``, ``layers.{l}.{stage}``, ``logits`` (the fixture names)."""
        out = {"embed": self.embed, "x0": self.x0}
        for i, layer in enumerate(self.layers):
            out.update({f"layers.{i}.{k}": v for k, v in layer.items()})
        out["logits"] = self.logits
        return out


def embedding_scale(config: PLDRConfig) -> float:
    """sqrt(d_model), in float64 (``"exact"``) or rounded to float32 as PT-v510/TF do (spec §12)."""
    if config.embed_scale_precision == "float32":
        return float(np.sqrt(np.float32(config.d_model)))
    return float(np.sqrt(float(config.d_model)))


def embed(params: Params, token_ids: np.ndarray, on_stage: StageHook | None = None) -> np.ndarray:
    """X0 = E[x] * sqrt(d) (spec §2.1): [B, S] int -> [B, S, d].  ``on_stage`` (a naive run's rounding) sees the
    scale sqrt(d) as ``"embed_scale"`` (a 0-d array) before the product."""
    scale = embedding_scale(params.config)
    if on_stage is not None:
        scale = on_stage("embed_scale", np.array(scale))
    return params["decoder.embedding.weight"][token_ids] * scale


def input_norm(params: Params, config: PLDRConfig, embed: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """X0 <- LN(X0), the model's input LayerNorm (spec §2.2; Lean ``LayerNorm``): [B, S, d]."""
    norm = NormParams(params["decoder.layernorm1.weight"], params["decoder.layernorm1.bias"])
    return configured_layer_norm(embed, norm, config, ops)


def lm_head(params: Params, hidden: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """logits = X^L W_out^T + b_out (spec §2.5; no final LayerNorm, no weight tying)."""
    return ops.linear(hidden, params["final_layer.weight"], params.get("final_layer.bias"))


def layer_finite_check(layer: int) -> FiniteCheck:
    """The ``on_stage`` hook of :func:`pldr_ref.layer.decoder_layer` for layer ``layer``: :func:`check_finite` on
    ``layers.{layer}.{stage}``, so the error names the first non-finite stage as soon as it is made."""
    return FiniteCheck(f"layers.{layer}.")


def sequence_mask(
    config: PLDRConfig,
    ids: np.ndarray,
    *,
    start_pos: int = 0,
    attention_mask: np.ndarray | None = None,
    pad_masking: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Absolute positions [S] and the causal + padding mask [B|1, 1, S, S] of a full-sequence call (spec §7.1-§7.2).

    Padding keys come from ``attention_mask`` (HF, 1 = keep) when given, else from token id
    ``config.pad_id`` when ``pad_masking`` (native), else none.
    """
    positions = np.arange(start_pos, start_pos + ids.shape[1])
    if attention_mask is not None:
        key_padding = validate_attention_mask(attention_mask, ids.shape)
    elif pad_masking:
        key_padding = ids == config.pad_id
    else:
        key_padding = None
    return positions, causal_padding_mask(positions, positions, key_padding)


def resolve_pad_masking(config: PLDRConfig, pad_masking: bool | None) -> bool:
    """``pad_masking`` if given, else the config default: True for ``pad_source="token"`` (native: ids equal to
    pad_id are padding keys), False for ``"attention_mask"`` (HF: no masking without an attention mask)."""
    if pad_masking is None:
        return config.pad_source == "token"
    return bool(pad_masking)


def validate_position_ids(position_ids: object, shape: tuple[int, int], config: PLDRConfig) -> np.ndarray:
    """``position_ids`` as int64 [B, S] (HF semantics: RoPE positions per row), or ``ValueError``/``TypeError``.

    Every id must be in [0, max_seq_len); they need not be increasing (HF left padding repeats them).
    """
    arr = np.asarray(position_ids)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"position_ids must be an integer array, got dtype {arr.dtype}")
    if arr.shape != shape:
        raise ValueError(f"position_ids has shape {arr.shape}, expected {shape} (one per token)")
    if arr.size and (arr.min() < 0 or arr.max() >= config.max_seq_len):
        raise ValueError(f"position_ids must be in [0, max_seq_len={config.max_seq_len}), got "
                         f"{int(arr.min())}..{int(arr.max())}")
    return arr.astype(np.int64)


def positions_and_mask(config: PLDRConfig, token_ids: np.ndarray, start_pos: int = 0,
                       attention_mask: np.ndarray | None = None, pad_masking: bool = True,
                       position_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(RoPE positions, mask) of a full-sequence call (spec §7.1-§7.2, the ``sequence_mask`` stage): positions
    [S] = start_pos + [0..S), or ``position_ids`` [B, S] (HF: per-row RoPE positions; the mask keeps the sequence
    index), and the causal + padding mask of :func:`sequence_mask`."""
    ids = np.asarray(token_ids)
    positions, mask = sequence_mask(config, ids, start_pos=int(start_pos), attention_mask=attention_mask,
                                    pad_masking=bool(pad_masking))
    if position_ids is not None:
        positions = validate_position_ids(position_ids, ids.shape, config)
    return positions, mask


def check_explicit_inputs(config: PLDRConfig, rope_table: RopeTable | None,
                          softmax_kernel: SoftmaxKernel | None) -> None:
    """Refuse, before any work, a ``rope_table`` given while ``config.rope_table != "explicit"`` or a
    ``softmax_kernel`` given while ``config.softmax_precision != "explicit"`` (each would be silently ignored), and
    either switch at ``"explicit"`` without its input."""
    check_rope_table_input(config, rope_table)
    check_kernel_used(config.softmax_precision, softmax_kernel)


def check_rope_table_input(config: PLDRConfig, rope_table: RopeTable | None) -> None:
    """Refuse a ``rope_table`` given while ``config.rope_table != "explicit"`` (it would be silently ignored),
    ``rope_table="explicit"`` without a table, and a table that is not a :class:`RopeTable` (every tier: float64
    and exact)."""
    check_table_used(config.rope_table_source, rope_table)
    if config.rope_table_source == "explicit" and rope_table is None:
        raise ValueError("PLDRConfig.rope_table='explicit' needs a RopeTable (argument rope_table=RopeTable(cos, sin), "
                         "e.g. RopeTable.from_torchtune_cache(cache))")
    if rope_table is not None and not isinstance(rope_table, RopeTable):
        raise TypeError(f"rope_table must be a pldr_ref.rope.RopeTable, got {type(rope_table).__name__}")


#: Rows the LM head of :func:`depth_pass` reads: every row ([B, S, V] logits), the last row ([B, V]), or none.
HEAD_ROWS = ("all", "last", "none")


@dataclasses.dataclass(frozen=True)
class DepthPass:
    """Result of :func:`depth_pass`: the embedding [B, S, d], the input-LayerNorm output ``x0``, every layer's
    trace (empty without ``keep_trace``), the last layer's output ``hidden`` [B, S, d] and the logits (None
    with ``head="none"``)."""

    embed: np.ndarray
    x0: np.ndarray
    layers: tuple[LayerTrace, ...]
    hidden: np.ndarray
    logits: np.ndarray | None


def _no_hook(name: str, arr: np.ndarray) -> np.ndarray:
    return arr


def depth_pass(
    params: Params,
    ids: np.ndarray,
    *,
    positions: np.ndarray,
    mask: np.ndarray | None,
    layer_inputs: Callable[[int], Mapping[str, Any]] | None = None,
    layer_hook: Callable[[int], StageHook | None] | None = None,
    on_stage: StageHook | None = None,
    keep_trace: bool = True,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    head: str = "all",
    ops: Ops = FLOAT64_OPS,
) -> DepthPass:
    """The one float64 depth loop: X0 = LN(E[x] sqrt(d)); X^l = layer_l(X^(l-1)); logits = X^L Wout^T + bout
    (spec §2), shared by :func:`forward`, the cached step, the diagnostics and the naive low-precision baselines.

    ids [B, S]; ``positions`` and ``mask`` as :func:`pldr_ref.layer.decoder_layer` takes them.  Per layer ``i``:
    ``layer_inputs(i)`` gives the layer's cache hooks (``past_k``, ``past_v``, ``frozen_A``, ``frozen_G``,
    ``gram_offset``) and ``layer_hook(i)`` its ``on_stage`` hook.  ``on_stage`` sees the model-level stages:
    ``"embed_scale"``, ``"embed"``, ``"x0"`` and ``"logits"``.  ``head``: :data:`HEAD_ROWS`.  ``ops``: the
    arithmetic of every stage (:class:`pldr_ref.ops.Ops`; default the float64 reference).
    ``keep_trace=False`` drops each layer's trace once the next layer has its input and computes every layer's
    scores and E in one reused [B, H, S, S] buffer (no cache inputs then): the logits are identical (bitwise), and
    memory stays O(B H S^2) for one layer instead of L.
    """
    if head not in HEAD_ROWS:
        raise ValueError(f"head must be one of {HEAD_ROWS}, got {head!r}")
    if not keep_trace and layer_inputs is not None:
        raise ValueError("keep_trace=False reuses one [B, H, S, S] workspace: it takes no cache inputs")
    c = params.config
    h = on_stage or _no_hook
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x_embed = h("embed", embed(params, ids, on_stage))
        x = x0 = h("x0", input_norm(params, c, x_embed, ops))
        traces = []
        # without a kept trace, one [B, H, S, S] buffer serves every layer's scores and E (E overwrites them)
        workspace = None if keep_trace else np.empty((ids.shape[0], c.num_heads, ids.shape[1], ids.shape[1]))
        for i in range(c.num_layers):  # layers are sequential: the loop is over depth, not data
            t = decoder_layer(params.layer(i), x, c, positions=positions, mask=mask, rope_table=rope_table,
                              on_stage=None if layer_hook is None else layer_hook(i), workspace=workspace,
                              softmax_kernel=softmax_kernel, ops=ops,
                              **({} if layer_inputs is None else layer_inputs(i)))
            if keep_trace:
                traces.append(t)
            x = t.out2
            del t  # without a kept trace, this layer's arrays are freed before the next layer allocates its own
        rows = x if head == "all" else x[:, -1]
        logits = None if head == "none" else h("logits", lm_head(params, rows, ops))
    return DepthPass(x_embed, x0, tuple(traces), x, logits)


def forward(
    params: Params,
    token_ids: np.ndarray,
    *,
    start_pos: int = 0,
    attention_mask: np.ndarray | None = None,
    pad_masking: bool | None = None,
    check_finite_values: bool = True,
    keep_trace: bool = True,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    ops: Ops = FLOAT64_OPS,
) -> ForwardOutput:
    """Full forward map of PLDR-LLM in float64 (spec §2; paper eqs. 3.2-3.9).

    token_ids: int [B, S] at absolute positions start_pos..start_pos+S-1.  Padding keys
    come from ``attention_mask`` (HF, 1 = keep) when given, else from token id
    ``config.pad_id`` when ``pad_masking`` (default: ``config.pad_source == "token"``), else none.
    ``position_ids`` [B, S] (HF) replaces the RoPE positions per row (the causal mask still follows the
    sequence index start_pos + s); ``rope_table`` is the table of ``rope_table="explicit"`` and ``softmax_kernel``
    the float32 softmax of ``softmax_precision="explicit"`` (either given under another switch value is refused:
    :func:`check_explicit_inputs`).  Every stage is checked for NaN/inf (``FloatingPointError`` names the stage)
    unless disabled.  ``ops``: the arithmetic of every stage (:class:`pldr_ref.ops.Ops`; default the float64
    reference, :data:`pldr_ref.ops.FLOAT64_OPS`).
    ``keep_trace=False`` drops each layer's trace once the next layer has its input (``layers`` is
    then empty) and computes every layer's scores and E in one reused [B, H, S, S] buffer: the logits are
    identical (bitwise), and memory stays O(B H S^2) for one layer instead of L.
    """
    if not isinstance(params, Params):
        raise TypeError(f"params must be a pldr_ref.Params, got {type(params).__name__}")
    c = params.config
    check_explicit_inputs(c, rope_table, softmax_kernel)
    ids = validate_token_ids(token_ids, c, start_pos)
    check_forward_budget(c, ids.shape[0], ids.shape[1], keep_trace=keep_trace)  # refuse before allocating
    positions, mask = positions_and_mask(c, ids, start_pos, attention_mask, resolve_pad_masking(c, pad_masking),
                                         position_ids)
    run = depth_pass(params, ids, positions=positions, mask=mask, keep_trace=keep_trace,
                     layer_hook=layer_finite_check if check_finite_values else None, rope_table=rope_table,
                     softmax_kernel=softmax_kernel, ops=ops)
    if check_finite_values:
        check_finite("logits", run.logits)
    return ForwardOutput(c, positions, run.embed, run.x0, run.layers, run.logits)
