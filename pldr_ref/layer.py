"""One post-norm PLDR decoder layer with power-law graph attention (spec §2.3-§2.4), and the float64 body of
each of its stages.

Each registry stage (:data:`pldr_ref.registry.FORWARD_STAGES`) runs one of the small functions below
(``Stage.run``), and :func:`decoder_layer` is the composition of the same functions, so the layer and an isolated
stage cannot drift (``tests/test_stage_registry_run.py``).  A body's parameters are named after what it reads:
``lp`` (this layer's parameters), ``config``, ``ops`` (the arithmetic) and the trace names of its inputs.  The
bodies compute with the primitives of ``ops`` (:class:`pldr_ref.ops.Ops`: ``ops.linear``, ``ops.glu``, ...; default
the float64 reference :data:`pldr_ref.ops.FLOAT64_OPS`, a calibration member's
:class:`pldr_ref.harness.policy.arithmetic.EmulatedOps` otherwise), and every LayerNorm through
:func:`pldr_ref.norms.configured_layer_norm` (the one place that reads LayerNorm's options from the config).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pldr_ref.attention import SoftmaxKernel, configured_attention_weights, merge_heads, split_heads
from pldr_ref.config import PLDRConfig
from pldr_ref.metric_learner import metric_learner
from pldr_ref.norms import configured_layer_norm
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import LayerParams
from pldr_ref.rope import RopeTable, configured_rope
from pldr_ref.stage_hooks import StageHook, layer_hook, split_hook


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


#: Every trace name of a layer in forward (stage) order, the optional stages' outputs included.
LAYER_TRACE_NAMES = tuple(f.name for f in dataclasses.fields(LayerTrace))
#: The trace names every engine computes, in forward order: the optional stages' outputs (``optional`` fields, which
#: only the engines that implement the stage's switch value give) left out.
LAYER_STAGES = tuple(f.name for f in dataclasses.fields(LayerTrace) if not f.metadata.get("optional"))


def qkv_projection(lp: LayerParams, config: PLDRConfig, x: np.ndarray, ops: Ops = FLOAT64_OPS
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q = X Wq^T + bq, K = X Wk^T + bk, V = X Wv^T + bv, split into heads (spec §2.4.1-2).

    x [B, S, d] -> q, k, v [B, H, S, d_k]; v is C-contiguous (the E V products read it per head).
    """
    h = config.num_heads
    return (split_heads(ops.linear(x, lp.wq, lp.bq), h), split_heads(ops.linear(x, lp.wk, lp.bk), h),
            np.ascontiguousarray(split_heads(ops.linear(x, lp.wv, lp.bv), h)))


def rotary(config: PLDRConfig, q: np.ndarray, k: np.ndarray, positions: np.ndarray,
           rope_table: RopeTable | None = None, ops: Ops = FLOAT64_OPS) -> tuple[np.ndarray, np.ndarray]:
    """q~ = R_p q, k~ = R_p k at the rows' positions (Def. 4.3, spec §2.4.3; Lean ``RoPE``).

    q, k [B, H, S, d_k]; positions [S] or [B, S]; ``rope_table``: the table of ``rope_table="explicit"``.
    """
    return (configured_rope(q, positions, config, rope_table, ops),
            configured_rope(k, positions, config, rope_table, ops))


def gram(config: PLDRConfig, q_rot: np.ndarray, gram_offset: np.ndarray | None = None, ops: Ops = FLOAT64_OPS
         ) -> np.ndarray:
    """A0 = Q~^T Q~ per head (eq. 3.2; Lean ``DensityOperator``): [B, H, S, d_k] -> [B, H, d_k, d_k]; with
    ``gram_mode="cumulative"`` one per row, [B, H, S, d_k, d_k], plus ``gram_offset`` [B, H, d_k, d_k] (the Gram
    of cached rows)."""
    if config.gram_mode == "cumulative":
        a0 = ops.cumulative_density_operator(q_rot)
        return a0 if gram_offset is None else a0 + gram_offset[:, :, None]
    return ops.density_operator(q_rot)


def learned_metric(lp: LayerParams, config: PLDRConfig, A0: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """A = Res_R(... Res_1(LN(A0))) (eq. 3.3, Prop. 3.11; v900: spec §2.6), shape of A0."""
    return metric_learner(A0, lp, config.metric_learner, config, ops)


def adjacency(lp: LayerParams, config: PLDRConfig, A: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """A_LM = iSwiGLU(W A + b) + eps_adj (eq. 3.4, Prop. 3.7), shape of A."""
    return ops.metric_tensor(A, lp.plga.W, lp.plga.b, config.eps_adj)


def potential(lp: LayerParams, A_LM: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """A_P = A_LM^(o P) elementwise (eq. 3.5; Lean ``HadamardPower``), shape of A_LM."""
    return ops.potential_tensor(A_LM, lp.plga.P)


def curvature(lp: LayerParams, A_P: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """G_LM = a A_P + b_a (eq. 3.6; Lean ``RankOne``), shape of A_P."""
    return ops.energy_curvature(A_P, lp.plga.a, lp.plga.b_a)


def fixed_curvature(lp: LayerParams, batch: int) -> np.ndarray:
    """G_LM without PLGA parameters (``g_mode`` identity / random / external): the fixed [H, d_k, d_k] operator
    repeated over the batch, [B, H, d_k, d_k]."""
    return np.broadcast_to(lp.g_fixed, (batch, *lp.g_fixed.shape)).copy()


def scaled_scores(config: PLDRConfig, q_rot: np.ndarray, G_LM: np.ndarray, k_rot: np.ndarray,
                  out: np.ndarray | None = None, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """Sc = Q~ G_LM K~^T / sqrt(d_k) (eq. 3.7): [B, H, S, T], in ``out`` when given."""
    return ops.attention_scores(q_rot, G_LM, k_rot, config.score_scale, out=out)


def softmax_weights(config: PLDRConfig, scores: np.ndarray, mask: np.ndarray | None = None,
                    on_stage: StageHook | None = None, in_place: bool = False,
                    softmax_kernel: SoftmaxKernel | None = None, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """E = softmax_j(Sc + mask) (eq. 3.8, spec §7.2; Lean ``Softmax``): [B, H, S, T], blockwise over query rows
    (:func:`pldr_ref.attention.configured_attention_weights`; ``on_stage`` sees ``"masked_logits"`` and ``"E"``)."""
    return configured_attention_weights(scores, mask, config, on_stage=on_stage, in_place=in_place,
                                        softmax_kernel=softmax_kernel, ops=ops)


def value_mix(E: np.ndarray, v: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """Z = E V per head, heads merged (eq. 3.9): [B, H, S, T] x [B, H, T, d_k] -> [B, S, d]."""
    return merge_heads(ops.mix_values(E, v))


def output_projection(lp: LayerParams, ctx: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """Y = Z Wo^T + bo (spec §2.4.10): [B, S, d] -> [B, S, d]."""
    return ops.linear(ctx, lp.wo, lp.bo)


def post_attention_norm(lp: LayerParams, config: PLDRConfig, attn_out: np.ndarray, x: np.ndarray,
                        ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """O1 = LN1(Y + X) (spec §2.3; Lean ``LayerNorm``): [B, S, d]."""
    return configured_layer_norm(attn_out + x, lp.norm1, config, ops)


def ffn(lp: LayerParams, out1: np.ndarray, ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """FFN(O1) = W3(silu(W1 O1 + b1) * (W2 O1 + b2)) + b3 (spec §2.3): [B, S, d]."""
    return ops.glu(out1, lp.ffn)


def post_ffn_norm(lp: LayerParams, config: PLDRConfig, ffn_out: np.ndarray, out1: np.ndarray,
                  ops: Ops = FLOAT64_OPS) -> np.ndarray:
    """O2 = LN2(FFN(O1) + O1) (spec §2.3; Lean ``LayerNorm``): [B, S, d]."""
    return configured_layer_norm(ffn_out + out1, lp.norm2, config, ops)


def _no_hook(name: str, arr: np.ndarray) -> np.ndarray:
    return arr


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
    rope_table: RopeTable | None = None,
    on_stage: StageHook | None = None,
    workspace: np.ndarray | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    ops: Ops = FLOAT64_OPS,
) -> LayerTrace:
    """Y = MHA_PLGA(X); O1 = LN1(Y + X); O2 = LN2(FFN(O1) + O1) (spec §2.3), stage by stage.

    x: [B, S, d]; positions: [S] absolute positions of the new rows, or [B, S] per row (HF ``position_ids``:
    RoPE only; the mask is built by the caller); ``rope_table``: the table of ``rope_table="explicit"``; mask: bool
    [B|1, 1, S, T] (True = forbidden) or None.  Cache hooks (spec §8): ``past_k`` (rotated)
    and ``past_v`` [B, H, T0, d_k] are prepended; ``frozen_A`` replaces the metric learner
    output (KV cache); ``frozen_G`` = (A_LM, A_P, G_LM) replaces PLGA (G cache).
    ``gram_offset`` [B, H, d_k, d_k] is the Gram of earlier rows for the cumulative mode.
    ``on_stage(name, array) -> array`` (:mod:`pldr_ref.stage_hooks`; default: none, after the context's default
    hook :func:`pldr_ref.stage_hooks.default_stage_hook`) sees every trace entry in :data:`LAYER_STAGES` order as
    soon as it exists, and returns the array the layer goes on with: a naive low-precision run rounds (it also
    sees the masked logits, block by block), a finiteness check (:class:`pldr_ref.stage_hooks.FiniteCheck`) raises
    at the first bad stage; the check of scores and E runs blockwise inside the softmax.  It never changes the
    float64 path.
    ``workspace`` (default: none): a C-contiguous float64 [B, H, S, T] array that receives the scores, over which E
    is then computed in place (bit-identical): the trace has ``scores=None`` and ``E`` is the workspace, valid until
    its next use (unless the hook returns new arrays for the scores: then the workspace is not used for E).
    ``forward(keep_trace=False)`` hands one workspace to every layer, so no layer allocates (and page-faults) two
    fresh [B, H, S, T] arrays.
    ``softmax_kernel``: the float32 softmax of ``softmax_precision="explicit"``
    (:class:`pldr_ref.attention.SoftmaxKernel`).
    ``ops``: the arithmetic every stage computes with (:class:`pldr_ref.ops.Ops`; default float64).
    """
    c = config
    hook = layer_hook(on_stage)
    s = hook or _no_hook  # every stage output passes here
    transform = split_hook(hook)[0] or _no_hook  # the scores: their finiteness is screened inside the softmax

    x = s("x", x)
    q, k, v = qkv_projection(lp, c, x, ops)
    q, k = s("q", q), s("k", k)
    q_rot, k_rot = rotary(c, q, k, positions, rope_table, ops)
    q_rot = s("q_rot", q_rot)
    k_rot = s("k_rot", k_rot if past_k is None else np.concatenate([past_k, k_rot], axis=2))
    v = s("v", v if past_v is None else np.concatenate([past_v, v], axis=2))

    a0 = a = None
    if frozen_A is not None:
        a = s("A", frozen_A)
    elif frozen_G is None or c.metric_learner != "none":
        a0 = s("A0", gram(c, q_rot, gram_offset, ops))
        a = s("A", learned_metric(lp, c, a0, ops)) if c.metric_learner != "none" else None

    if frozen_G is not None:
        a_lm, a_p, g_lm = (None if t is None else s(n, t) for n, t in zip(("A_LM", "A_P", "G_LM"), frozen_G,
                                                                           strict=True))
    elif lp.plga is not None:
        a_lm = s("A_LM", adjacency(lp, c, a, ops))
        a_p = s("A_P", potential(lp, a_lm, ops))
        g_lm = s("G_LM", curvature(lp, a_p, ops))
    else:
        a_lm = a_p = None
        g_lm = s("G_LM", fixed_curvature(lp, x.shape[0]))

    scores = transform("scores", scaled_scores(c, q_rot, g_lm, k_rot, out=workspace, ops=ops))
    in_place = workspace is not None and scores is workspace  # a rounding hook returns a new array: keep it
    e = softmax_weights(c, scores, mask, on_stage=hook, in_place=in_place, softmax_kernel=softmax_kernel, ops=ops)
    ctx = s("ctx", value_mix(e, v, ops))
    attn_out = s("attn_out", output_projection(lp, ctx, ops))
    out1 = s("out1", post_attention_norm(lp, c, attn_out, x, ops))
    ffn_out = s("ffn_out", ffn(lp, out1, ops))
    out2 = s("out2", post_ffn_norm(lp, c, ffn_out, out1, ops))
    return LayerTrace(x, q, k, q_rot, k_rot, v, a0, a, a_lm, a_p, g_lm, None if in_place else scores, e, ctx,
                      attn_out, out1, ffn_out, out2)
