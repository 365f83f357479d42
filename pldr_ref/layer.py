"""One post-norm PLDR decoder layer with power-law graph attention (spec §2.3-§2.4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from pldr_ref.attention import (
    SoftmaxKernel,
    attention_scores,
    masked_attention_weights,
    merge_heads,
    mix_values,
    split_heads,
)
from pldr_ref.config import PLDRConfig
from pldr_ref.density import cumulative_density_operator, density_operator
from pldr_ref.glu import glu, linear
from pldr_ref.metric_learner import metric_learner
from pldr_ref.norms import layer_norm
from pldr_ref.params import LayerParams
from pldr_ref.plga import energy_curvature, metric_tensor, potential_tensor
from pldr_ref.rope import RopeTable, apply_rope


@dataclasses.dataclass(frozen=True)
class LayerTrace:
    """Every intermediate of one decoder layer (float64).

    Shapes (B batch, H heads, S new rows, T = cached + S keys, d = H d_k):
    x [B,S,d]; q, k [B,H,S,d_k] (pre-RoPE); q_rot [B,H,S,d_k]; k_rot, v [B,H,T,d_k];
    A0, A, A_LM, A_P, G_LM [B,H,d_k,d_k] (one more S axis before d_k,d_k with the
    cumulative Gram); scores (scaled, pre-mask) and E [B,H,S,T]; ctx, attn_out,
    out1, ffn_out, out2 [B,S,d].  A is None without a metric learner; A_LM and A_P are None
    when G is fixed (no PLGA parameters); scores is None when E was computed over them in
    a ``workspace`` (:func:`decoder_layer`).

    Under the cache hooks of :func:`decoder_layer` (spec §8): with ``frozen_A`` (a KV cache step) A0 is
    None and A is the cache's frozen A; with ``frozen_G`` (a G cache step) A_LM, A_P and G_LM are the
    cache's (A_P None when the cache keeps none, as HF's buffer), while A0 and A are still computed from
    the new rows when a metric learner exists and ``frozen_A`` is not given (both None otherwise); with the
    cumulative Gram and ``gram_offset``, A0 is each new row's Gram including the cached rows'.
    """

    x: np.ndarray
    q: np.ndarray
    k: np.ndarray
    q_rot: np.ndarray
    k_rot: np.ndarray
    v: np.ndarray
    A0: np.ndarray | None
    A: np.ndarray | None
    A_LM: np.ndarray | None
    A_P: np.ndarray | None
    G_LM: np.ndarray
    scores: np.ndarray | None
    E: np.ndarray
    ctx: np.ndarray
    attn_out: np.ndarray
    out1: np.ndarray
    ffn_out: np.ndarray
    out2: np.ndarray

    def items(self) -> list[tuple[str, np.ndarray]]:
        """(name, array) for every non-None field, in forward order."""
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if getattr(self, f.name) is not None]


def _keep(a: np.ndarray) -> np.ndarray:
    return a


#: Trace names of a layer in forward (stage) order.
LAYER_STAGES = tuple(f.name for f in dataclasses.fields(LayerTrace))


def decoder_layer(
    lp: LayerParams,
    x: np.ndarray,
    config: PLDRConfig,
    *,
    positions: np.ndarray,
    mask: np.ndarray | None,
    past_k: np.ndarray | None = None,
    past_v: np.ndarray | None = None,
    frozen_A: np.ndarray | None = None,
    frozen_G: tuple[np.ndarray | None, np.ndarray | None, np.ndarray] | None = None,
    gram_offset: np.ndarray | None = None,
    round_to: Callable[[np.ndarray], np.ndarray] | None = None,
    rope_table: RopeTable | None = None,
    check: Callable[[str, np.ndarray], None] | None = None,
    workspace: np.ndarray | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
) -> LayerTrace:
    """Y = MHA_PLGA(X); O1 = LN1(Y + X); O2 = LN2(FFN(O1) + O1) (spec §2.3).

    x: [B, S, d]; positions: [S] absolute positions of the new rows, or [B, S] per row (HF ``position_ids``:
    RoPE only; the mask is built by the caller); ``rope_table``: the table of ``rope_table="explicit"``; mask: bool
    [B|1, 1, S, T] (True = forbidden) or None.  Cache hooks (spec §8): ``past_k`` (rotated)
    and ``past_v`` [B, H, T0, d_k] are prepended; ``frozen_A`` replaces the metric learner
    output (KV cache); ``frozen_G`` = (A_LM, A_P, G_LM) replaces PLGA (G cache).
    ``gram_offset`` [B, H, d_k, d_k] is the Gram of earlier rows for the cumulative mode.
    ``round_to`` (default: none) rounds every stage output, the cached inputs and the masked logits
    (a naive low-precision run, as the fixture baselines use); it never changes the float64 path.
    ``check`` (default: none), e.g. a finiteness check, is called as ``check(stage, array)`` on the trace entries in
    :data:`LAYER_STAGES` order as soon as each exists, so a failure stops the layer at the first bad stage; scores
    and E are summed block by block inside the softmax and passed to ``check`` only when some block's sum is not
    finite (:func:`pldr_ref.attention.masked_attention_weights`).
    ``workspace`` (default: none): a C-contiguous float64 [B, H, S, T] array that receives the scores, over which E
    is then computed in place (bit-identical): the trace has ``scores=None`` and ``E`` is the workspace, valid until
    its next use (unless ``round_to`` returns new arrays: then the workspace is not used for them).
    ``forward(keep_trace=False)`` hands one workspace to every layer, so no layer allocates (and page-faults) two
    fresh [B, H, S, T] arrays.
    ``softmax_kernel``: the float32 softmax of ``softmax_precision="explicit"``
    (:class:`pldr_ref.attention.SoftmaxKernel`).
    """
    c = config
    h = c.num_heads
    r = _keep if round_to is None else round_to

    def chk(name: str, arr: np.ndarray | None) -> None:
        if check is not None and arr is not None:
            check(name, arr)

    chk("x", x)
    q = r(split_heads(linear(x, lp.wq, lp.bq), h))
    chk("q", q)
    k = r(split_heads(linear(x, lp.wk, lp.bk), h))
    chk("k", k)
    v = np.ascontiguousarray(r(split_heads(linear(x, lp.wv, lp.bv), h)))  # contiguous heads for the E V GEMMs
    rope = dict(layout=c.rope_layout, base=c.rope_base, table=c.rope_table_source,
                arithmetic=c.rope_arithmetic_dtype, explicit=rope_table)
    q_rot = r(apply_rope(q, positions, **rope))
    k_rot = r(apply_rope(k, positions, **rope))
    if past_k is not None:
        k_rot = np.concatenate([r(past_k), k_rot], axis=2)
        v = np.concatenate([r(past_v), v], axis=2)
    chk("q_rot", q_rot)
    chk("k_rot", k_rot)
    chk("v", v)

    a0 = a = None
    if frozen_A is not None:
        a = r(frozen_A)
    elif frozen_G is None or c.metric_learner != "none":
        if c.gram_mode == "cumulative":
            a0 = cumulative_density_operator(q_rot)
            if gram_offset is not None:
                a0 = a0 + gram_offset[:, :, None]
        else:
            a0 = density_operator(q_rot)
        a0 = r(a0)
        if c.metric_learner != "none":
            a = r(metric_learner(a0, lp, c.metric_learner, c.eps_ln))
    chk("A0", a0)
    chk("A", a)

    if frozen_G is not None:
        a_lm, a_p, g_lm = frozen_G
    elif lp.plga is not None:
        a_lm = r(metric_tensor(a, lp.plga.W, lp.plga.b, c.eps_adj))
        a_p = r(potential_tensor(a_lm, lp.plga.P))
        g_lm = r(energy_curvature(a_p, lp.plga.a, lp.plga.b_a))
    else:
        a_lm = a_p = None
        g_lm = np.broadcast_to(lp.g_fixed, (x.shape[0], *lp.g_fixed.shape)).copy()
    chk("A_LM", a_lm)
    chk("A_P", a_p)
    chk("G_LM", g_lm)

    scores = r(attention_scores(q_rot, g_lm, k_rot, c.score_scale, out=workspace))
    in_place = workspace is not None and scores is workspace  # a rounding hook returns a new array: keep it
    e = masked_attention_weights(scores, mask, mask_mode=c.mask_mode, mask_value=c.mask_value,
                                 mask_add_dtype=c.mask_add_dtype, precision=c.softmax_precision,
                                 masked_row=c.masked_row, round_to=r, check=check, in_place=in_place,
                                 softmax_kernel=softmax_kernel)
    if in_place:
        scores = None  # overwritten by E
    ctx = r(merge_heads(mix_values(e, v)))
    chk("ctx", ctx)
    attn_out = r(linear(ctx, lp.wo, lp.bo))
    chk("attn_out", attn_out)
    out1 = r(layer_norm(attn_out + x, lp.norm1.gamma, lp.norm1.beta, c.eps_ln))
    chk("out1", out1)
    ffn_out = r(glu(out1, lp.ffn))
    chk("ffn_out", ffn_out)
    out2 = r(layer_norm(ffn_out + out1, lp.norm2.gamma, lp.norm2.beta, c.eps_ln))
    chk("out2", out2)
    return LayerTrace(x, q, k, q_rot, k_rot, v, a0, a, a_lm, a_p, g_lm, scores, e, ctx, attn_out, out1, ffn_out, out2)
