"""The full PLDR-LLM forward map in ball arithmetic, certified stage by stage (spec §2).

:func:`forward_certified` returns a :class:`~pldr_ref.exact.arb.ziv.Certified` with the same trace
names and shapes as ``pldr_ref.forward(...).flat()`` (``embed``, ``x0``, ``layers.{l}.{stage}``,
``logits``); :func:`forward` returns the float64 trace like the mpmath engine and raises
:class:`UncertifiedError` when some value is not certified at the largest precision.

The working precision starts at :func:`initial_precision` (an estimate of the bits that ball
arithmetic loses through the layers: measured on v510-110m, about 95-125 bits per layer, most of
them in the 16 GLUs of the metric learner) and is raised by Ziv's strategy
(:mod:`pldr_ref.exact.arb.ziv`) if some value is not decided.  Inside an attempt the working
precision follows the accuracy of the balls (:func:`pldr_ref.exact.arb.stages.follow_accuracy`),
and an attempt whose accuracy, extrapolated over the remaining layers, would end below
:data:`REQUIRED_BITS` stops early (:class:`~pldr_ref.exact.arb.stages.NeedPrecisionError`) instead of
finishing a forward that cannot certify its logits.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import flint
import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.constants import FINFO_MIN_F64
from pldr_ref.exact.arb import stages as st
from pldr_ref.exact.arb.balls import accuracy_bits, ball, balls
from pldr_ref.exact.arb.ziv import DEFAULT_MAX_PREC, PREC_STEP, Certified, Stages, certify
from pldr_ref.inputs import validate_attention_mask, validate_token_ids
from pldr_ref.layer import LAYER_STAGES, LAYER_TRACE_NAMES
from pldr_ref.params import LayerParams, Params
from pldr_ref.registry import FORWARD_STAGES
from pldr_ref.switches import pinned_values

#: Vocabulary rows of the LM head multiplied per ``arb_mat`` product (bounds the memory of one block).
LM_HEAD_BLOCK = 4096
#: Trace entries that are >= 0 by construction (their zeros are +0.0).
NONNEG_STAGES = frozenset({"E", "A_LM", "A_P"})
#: Estimated bits lost per layer outside the metric learner, and per GLU inside it.
BITS_PER_LAYER = 40
BITS_PER_GLU = 5
#: Normwise accuracy (bits) the logits must keep for a certified rounding of (almost) every value.
REQUIRED_BITS = 53 + 16


class UncertifiedError(ArithmeticError):
    """Some value of the arb forward is not certified correctly rounded at the largest precision."""

    def __init__(self, result: Certified) -> None:
        self.result = result
        bad = result.uncertified()
        first = next(iter(bad))
        super().__init__(f"{sum(bad.values())} value(s) not certified at {result.prec} bits "
                         f"(first stage {first!r}: {bad[first]}); raise max_prec")


def initial_precision(config: PLDRConfig) -> int:
    """First working precision (bits) of the forward: 53 + 64 plus the estimated loss of every layer."""
    per_layer = BITS_PER_LAYER + BITS_PER_GLU * config.num_reslayerA * config.num_denseA
    bits = 53 + 64 + config.num_layers * per_layer
    return -(-bits // PREC_STEP) * PREC_STEP


def trace_names(config: PLDRConfig) -> list[str]:
    """The trace entries of the forward, in order (as ``pldr_ref.forward(...).flat()``)."""
    skip = set()
    if config.metric_learner == "none":
        skip.add("A")
    if not config.uses_plga_params:
        skip |= {"A_LM", "A_P"}
    # an optional stage's outputs (not in LAYER_STAGES) exist only when the config enables the stage
    skip |= {n for s in FORWARD_STAGES if s.per_layer and not s.enabled(config) for n in s.outputs
             if n not in LAYER_STAGES}
    names = ["embed", "x0"]
    for i in range(config.num_layers):
        names += [f"layers.{i}.{s}" for s in LAYER_TRACE_NAMES if s not in skip]
    return [*names, "logits"]


def sequence_mask(ids: np.ndarray, start_pos: int, key_padding: np.ndarray | None) -> np.ndarray:
    """Causal + padding mask [B, 1, S, S] (True = forbidden) of a full-sequence call (spec §7.1)."""
    pos = np.arange(start_pos, start_pos + ids.shape[1])
    mask = (pos[None, :] > pos[:, None])[None, None]
    mask = np.broadcast_to(mask, (ids.shape[0], 1, ids.shape[1], ids.shape[1]))
    if key_padding is not None:
        mask = mask | np.asarray(key_padding, dtype=bool)[:, None, None, :]
    return mask


def embedding_scale(config: PLDRConfig, rn32: st.Float32Rounder) -> Any:
    """sqrt(d) as a ball (``exact``) or RN32(sqrt(d)) (``float32``, spec §12)."""
    s = ball(config.d_model).sqrt()
    return rn32(np.array([s], dtype=object))[0] if config.embed_scale_precision == "float32" else s


def decoder_layer(lp: LayerParams, x: np.ndarray, config: PLDRConfig, *, positions: list[int],
                  mask: np.ndarray | None, rn32: st.Float32Rounder) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (stage, balls) of one decoder layer in :data:`pldr_ref.layer.LAYER_TRACE_NAMES` order (spec §2.3-§2.4)."""
    c = config
    st.follow_accuracy(x)
    yield "x", x
    q = st.split_heads(st.linear(x, lp.wq, lp.bq), c.num_heads)
    yield "q", q
    k = st.split_heads(st.linear(x, lp.wk, lp.bk), c.num_heads)
    yield "k", k
    cos, sin = st.rope_tables(positions, c.d_k, c.rope_base, c.rope_precision, rn32)
    q_rot = st.apply_rope(q, cos, sin, c.rope_layout, c.rope_precision, rn32)
    yield "q_rot", q_rot
    k_rot = st.apply_rope(k, cos, sin, c.rope_layout, c.rope_precision, rn32)
    yield "k_rot", k_rot
    v = st.split_heads(st.linear(x, lp.wv, lp.bv), c.num_heads)
    yield "v", v
    cumulative = c.gram_mode == "cumulative"
    a0 = st.cumulative_density_operator(q_rot) if cumulative else st.density_operator(q_rot)
    yield "A0", a0
    if c.metric_learner != "none":
        a = st.metric_learner(a0, lp, c.metric_learner, c.eps_ln)
        yield "A", a
    if lp.plga is not None:
        a_lm = st.metric_tensor(a, lp.plga.W, lp.plga.b, c.eps_adj)
        yield "A_LM", a_lm
        a_p = st.potential_tensor(a_lm, lp.plga.P)
        yield "A_P", a_p
        g = st.energy_curvature(a_p, lp.plga.a, lp.plga.b_a)
    else:
        g = np.broadcast_to(balls(lp.g_fixed)[None], (x.shape[0], *lp.g_fixed.shape))
    yield "G_LM", g
    scores = st.attention_scores(q_rot, g, k_rot)
    yield "scores", scores
    e = st.masked_softmax(scores, mask, c.mask_mode, c.mask_value, FINFO_MIN_F64)
    yield "E", e
    ctx = st.merge_heads(st.mix_values(e, v))
    yield "ctx", ctx
    st.follow_accuracy(ctx)
    attn_out = st.linear(ctx, lp.wo, lp.bo)
    yield "attn_out", attn_out
    out1 = st.layer_norm(attn_out + x, lp.norm1.gamma, lp.norm1.beta, c.eps_ln)
    yield "out1", out1
    ffn_out = st.glu(out1, lp.ffn)
    yield "ffn_out", ffn_out
    yield "out2", st.layer_norm(ffn_out + out1, lp.norm2.gamma, lp.norm2.beta, c.eps_ln)


def lm_head(params: Params, hidden: np.ndarray) -> np.ndarray:
    """logits = X W_out^T + b_out (spec §2.5), in blocks of :data:`LM_HEAD_BLOCK` vocabulary rows."""
    w = params["final_layer.weight"]
    b = params.get("final_layer.bias")
    parts = [st.linear(hidden, w[i:i + LM_HEAD_BLOCK], None if b is None else b[i:i + LM_HEAD_BLOCK])
             for i in range(0, w.shape[0], LM_HEAD_BLOCK)]
    return np.concatenate(parts, axis=-1)


def check_projection(layer_accuracy: list[float], layers_left: int, start_bits: float) -> None:
    """Raise :class:`NeedPrecisionError` if the accuracy at this layer boundary, minus the largest loss of one
    layer so far times ``layers_left``, ends below :data:`REQUIRED_BITS`.

    ``layer_accuracy`` holds the normwise accuracy (bits) of x0 and of each layer output so far; the error
    suggests the precision that would end at :data:`REQUIRED_BITS` plus a reserve of ``PREC_STEP`` bits.
    """
    if len(layer_accuracy) < 2 or not all(np.isfinite(layer_accuracy)):
        return
    acc = layer_accuracy[-1]
    per_layer = max(0.0, *(a - b for a, b in itertools.pairwise(layer_accuracy)))
    projected = acc - per_layer * layers_left
    if projected < REQUIRED_BITS:
        suggested = start_bits + (REQUIRED_BITS - projected) + PREC_STEP
        raise st.NeedPrecisionError(f"at {acc:.0f} bits after {len(layer_accuracy) - 1} layer(s), losing up to "
                                    f"{per_layer:.0f} per layer: {layers_left} more layer(s) would not certify",
                                    suggested_prec=int(suggested))


def forward_stages(params: Params, ids: np.ndarray, *, start_pos: int, key_padding: np.ndarray | None,
                   final: bool) -> Stages:
    """Yield (name, balls, nonneg, tainted) for every trace entry at the current working precision.

    Unless ``final``, stops with :class:`NeedPrecisionError` when :func:`check_projection` fails between layers.
    """
    c = params.config
    start_bits = float(flint.ctx.prec)
    rn32 = st.Float32Rounder(final)
    positions = list(range(start_pos, start_pos + ids.shape[1]))
    mask = sequence_mask(ids, start_pos, key_padding)
    emb = balls(params["decoder.embedding.weight"][ids]) * embedding_scale(c, rn32)
    yield "embed", emb, False, rn32.undecided > 0
    x = st.layer_norm(emb, params["decoder.layernorm1.weight"], params["decoder.layernorm1.bias"], c.eps_ln)
    yield "x0", x, False, rn32.undecided > 0
    layer_accuracy = [accuracy_bits(x)]
    for i in range(c.num_layers):
        if not final and i > 0:
            layer_accuracy.append(accuracy_bits(x))
            check_projection(layer_accuracy, c.num_layers - i, start_bits)
        for name, val in decoder_layer(params.layer(i), x, c, positions=positions, mask=mask, rn32=rn32):
            yield f"layers.{i}.{name}", val, name in NONNEG_STAGES, rn32.undecided > 0
            if name == "out2":
                x = val
    st.follow_accuracy(x)
    yield "logits", lm_head(params, x), False, rn32.undecided > 0


#: Switches that the arb engine evaluates at one value only, with that value (from the switch table,
#: :mod:`pldr_ref.switches`: the issue-12 emulation switches but pad_source, which is resolved before the engine runs).
ARB_SWITCH_VALUES = pinned_values("arb")


def check_arb_supports(config: PLDRConfig) -> None:
    """``NotImplementedError`` naming each switch the arb engine does not evaluate at the config's value
    (never a silent evaluation at the default; the mpmath engine evaluates them all)."""
    off = {k: getattr(config, k) for k, v in ARB_SWITCH_VALUES.items() if getattr(config, k) != v}
    if off:
        raise NotImplementedError(f"the arb engine evaluates {sorted(off)} only at {ARB_SWITCH_VALUES}; got {off}; "
                                  "use engine='mpmath'")


def forward_certified(params: Params, token_ids: Any, *, start_pos: int = 0, attention_mask: Any = None,
                      pad_masking: bool = True, prec: int | None = None, max_prec: int = DEFAULT_MAX_PREC,
                      on_stage: Callable[[str], None] | None = None, keep_balls: bool = True) -> Certified:
    """Certified arb forward: every trace entry rounded to float64 with a per-value certificate.

    ``prec`` (bits) defaults to :func:`initial_precision`; Ziv's strategy raises it up to ``max_prec``.
    The result carries each value's enclosing ball (:attr:`Certified.balls`, :meth:`Certified.enclosure`)
    unless ``keep_balls=False``.
    """
    if not isinstance(params, Params):
        raise TypeError(f"params must be a pldr_ref.Params, got {type(params).__name__}")
    c = params.config
    check_arb_supports(c)
    ids = validate_token_ids(token_ids, c, start_pos)
    if attention_mask is not None:
        key_padding = validate_attention_mask(attention_mask, ids.shape)
    else:
        key_padding = ids == c.pad_id if pad_masking else None
    p0 = initial_precision(c) if prec is None else prec

    def compute(_prec: int, final: bool) -> Stages:
        return forward_stages(params, ids, start_pos=start_pos, key_padding=key_padding, final=final)

    return certify(compute, prec=p0, max_prec=max(max_prec, p0), total_stages=len(trace_names(c)),
                   on_stage=on_stage, keep_balls=keep_balls)


def forward(params: Params, token_ids: Any, *, start_pos: int = 0, attention_mask: Any = None,
            pad_masking: bool = True, prec: int | None = None, max_prec: int = DEFAULT_MAX_PREC
            ) -> dict[str, np.ndarray]:
    """Exact forward through the arb engine: trace name -> float64 array, every value certified correctly rounded.

    Raises :class:`UncertifiedError` if a value is not decided at ``max_prec`` bits and
    ``FloatingPointError`` if a correctly rounded value overflows float64 (as the mpmath engine does).
    """
    res = forward_certified(params, token_ids, start_pos=start_pos, attention_mask=attention_mask,
                            pad_masking=pad_masking, prec=prec, max_prec=max_prec, keep_balls=False)
    if not res.all_certified:
        raise UncertifiedError(res)
    for name, arr in res.values.items():
        if not np.all(np.isfinite(arr)):
            n_inf = int(np.isinf(arr).sum())
            raise FloatingPointError(f"stage {name!r}: the exact value overflows float64 ({n_inf} inf)")
    return res.values
