"""A cached forward step: any number of new tokens at their absolute positions (spec §7.3, §8).

The step is the full forward map of :func:`pldr_ref.model.forward` with the cache hooks of
:func:`pldr_ref.layer.decoder_layer` filled in:

* new rows sit at positions T0..T0+S-1 with T0 = cached length (PT-v510 ``p = kvcache length``,
  HF ``cache_position``); cached rotated keys and values are prepended;
* ``gram_mode="global"``: A is read from the KV cache (frozen at the prompt, the metric learner is
  skipped); ``gram_mode="cumulative"``: each new row's A0 is the running Gram plus its own prefix;
* a G cache replaces PLGA (A_LM, A_P, G_LM frozen);
* the mask of a cached step is ``None`` (``cached_mask="none"``, PT-v510: correct for one new
  token without padding) or the proper causal + key-padding mask over all T0+S keys
  (``cached_mask="causal"``, HF).  A first call (no KV cache) always uses the causal + pad mask.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pldr_ref.attention import SoftmaxKernel, causal_padding_mask
from pldr_ref.inference.cache import GCache, KVCache, g_cache_from_output, kv_cache_from_output
from pldr_ref.inputs import validate_attention_mask, validate_token_ids
from pldr_ref.model import (
    ForwardOutput,
    check_explicit_inputs,
    check_finite,
    depth_pass,
    layer_finite_check,
    resolve_pad_masking,
    validate_position_ids,
)
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable

#: Mask of a cached step: ``"none"`` (PT-v510 native) or ``"causal"`` (causal + key padding, HF).
CACHED_MASKS = ("none", "causal")


@dataclasses.dataclass(frozen=True)
class StepOutput:
    """Result of :func:`cached_forward`: the step's trace and the caches after it.

    ``output.logits`` [B, S, V] are the new rows only; ``g_cache`` holds the operators the step
    used (the frozen ones when a G cache was given; None for the cumulative Gram); ``kv_cache`` is
    None only after a cache-less call at ``start_pos > 0`` (it would have no keys for earlier positions).
    """

    output: ForwardOutput
    kv_cache: KVCache | None
    g_cache: GCache | None

    @property
    def logits(self) -> np.ndarray:
        """Logits of the new rows [B, S, V]."""
        return self.output.logits


def new_key_padding(ids: np.ndarray, pad_id: int, attention_mask: np.ndarray | None, pad_masking: bool) -> np.ndarray:
    """Padding of the new keys [B, S] (True = pad): from ``attention_mask`` (HF, 1 = keep) when given,
    else token id ``pad_id`` when ``pad_masking`` (native), else none."""
    if attention_mask is not None:
        return validate_attention_mask(attention_mask, ids.shape)
    if pad_masking:
        return ids == pad_id
    return np.zeros(ids.shape, dtype=bool)


def step_mask(
    positions: np.ndarray, kv_cache: KVCache | None, key_padding: np.ndarray, cached_mask: str
) -> np.ndarray | None:
    """The attention mask of a step (True = forbidden), [B|1, 1, S, T] or None (native cached step)."""
    if cached_mask not in CACHED_MASKS:
        raise ValueError(f"cached_mask must be one of {CACHED_MASKS}, got {cached_mask!r}")
    if kv_cache is None:
        return causal_padding_mask(positions, positions, key_padding)
    if cached_mask == "none":
        return None
    keys = np.arange(positions[-1] + 1)
    return causal_padding_mask(positions, keys, np.concatenate([kv_cache.key_padding, key_padding], axis=1))


def cached_forward(
    params: Params,
    token_ids: np.ndarray,
    *,
    kv_cache: KVCache | None = None,
    g_cache: GCache | None = None,
    start_pos: int | None = None,
    attention_mask: np.ndarray | None = None,
    pad_masking: bool | None = None,
    cached_mask: str = "none",
    check_finite_values: bool = True,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    ops: Ops = FLOAT64_OPS,
) -> StepOutput:
    """Forward of S new tokens [B, S] given the caches of the T0 earlier ones (spec §8; paper §4.4).

    Without caches this is :func:`pldr_ref.model.forward` (same numbers, bitwise).  ``start_pos``
    is only for calls without a KV cache (with one, positions start at its length).  Padding of the
    new keys comes from ``attention_mask`` (1 = keep) or token id ``pad_id`` (``pad_masking``); it is
    remembered in the returned KV cache for later causal cached masks (``pad_masking`` None: the config's
    ``pad_source``).  ``position_ids`` [B, S] (HF) are the RoPE positions of the new rows; the mask and the
    cache bookkeeping keep the sequence index T0..T0+S-1 (HF ``cache_position``).  ``rope_table`` and
    ``softmax_kernel`` are the inputs of the ``"explicit"`` switch values (:func:`pldr_ref.model.forward`); ``ops``
    the arithmetic of every stage (:class:`pldr_ref.ops.Ops`; default float64).
    """
    if not isinstance(params, Params):
        raise TypeError(f"params must be a pldr_ref.Params, got {type(params).__name__}")
    c = params.config
    check_explicit_inputs(c, rope_table, softmax_kernel)
    t0 = 0 if kv_cache is None else kv_cache.length
    if kv_cache is not None and start_pos not in (None, t0):
        raise ValueError(f"start_pos={start_pos} disagrees with the KV cache length {t0}")
    if kv_cache is None and start_pos is not None:
        t0 = start_pos
    ids = validate_token_ids(token_ids, c, t0)
    b = ids.shape[0]
    if kv_cache is not None:
        kv_cache.validate(c, b)
    if g_cache is not None:
        g_cache.validate(c, b)
    positions = np.arange(t0, t0 + ids.shape[1])
    key_padding = new_key_padding(ids, c.pad_id, attention_mask, resolve_pad_masking(c, pad_masking))
    mask = step_mask(positions, kv_cache, key_padding, cached_mask)
    rope_positions = positions if position_ids is None else validate_position_ids(position_ids, ids.shape, c)
    cumulative = c.gram_mode == "cumulative"

    def layer_inputs(i: int) -> dict[str, Any]:
        """The cache hooks of layer ``i`` (spec §8): cached keys and values, frozen A or Gram offset, frozen G."""
        lk = None if kv_cache is None else kv_cache.layers[i]
        return dict(past_k=None if lk is None else lk.k_rot, past_v=None if lk is None else lk.v,
                    frozen_A=None if lk is None or cumulative else lk.A,
                    frozen_G=None if g_cache is None else g_cache.layers[i].as_frozen(),
                    gram_offset=None if lk is None or not cumulative else lk.gram)

    run = depth_pass(params, ids, positions=rope_positions, mask=mask, layer_inputs=layer_inputs,
                     layer_hook=layer_finite_check if check_finite_values else None, rope_table=rope_table,
                     softmax_kernel=softmax_kernel, ops=ops)
    if check_finite_values:
        check_finite("logits", run.logits)
    out = ForwardOutput(c, rope_positions, run.embed, run.x0, run.layers, run.logits)
    all_padding = key_padding if kv_cache is None else np.concatenate([kv_cache.key_padding, key_padding], axis=1)
    # a cache-less call at start_pos > 0 has no keys for 0..start_pos-1: its KV cache would lie about positions
    new_kv = None if t0 > 0 and kv_cache is None else kv_cache_from_output(out, all_padding)
    new_g = None if cumulative else (g_cache if g_cache is not None else g_cache_from_output(out))
    return StepOutput(out, new_kv, new_g)
