"""The ordered list of forward-map stages: one place that names each equation, its function,
the trace entries it produces and its paper / Lean reference.

Used by ``docs/equations.md``, by the fixture-coverage test (every stage must have a
golden case) and by the validation harness (stage localisation walks this order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pldr_ref import activations, attention, density, glu, layer, metric_learner, model, norms, plga, rope


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of the forward map.

    name: stable identifier; function: the pldr_ref function computing it; outputs: trace
    names it produces (per layer unless ``per_layer`` is False); equation: the math;
    paper: section/equation; lean: Lean file(s) whose lemmas constrain it.
    """

    name: str
    function: Callable[..., object]
    outputs: tuple[str, ...]
    equation: str
    paper: str
    lean: str = ""
    per_layer: bool = True


#: Structure checked exactly by the harness before the numeric stages (not trace entries of the golden cases):
#: positions and the causal + padding mask of a model call.  A mask off by one, or ignored, fails at any precision.
STRUCTURE_STAGES: tuple[Stage, ...] = (
    Stage("sequence_mask", model.sequence_mask, ("positions", "mask"),
          "positions = start_pos + [0..S); M[b,0,i,j] = j > i or key j padding (exact)", "spec §7.1-§7.2",
          per_layer=False),
)

FORWARD_STAGES: tuple[Stage, ...] = (
    Stage("embedding", model.embed, ("embed",), "X0 = E[x] * sqrt(d)", "spec §2.1", per_layer=False),
    Stage("input_norm", norms.layer_norm, ("x0",), "X0 <- LN(X0), eps = 1e-6", "spec §2.2", "LayerNorm",
          per_layer=False),
    Stage("qkv_projection", glu.linear, ("q", "k", "v"), "Q = X Wq^T + bq (same for K, V), split heads",
          "spec §2.4.1-2"),
    Stage("rope", rope.apply_rope, ("q_rot", "k_rot"), "y = R_p x (interleaved or half pairs)",
          "Def. 4.3, spec §2.4.3", "RoPE"),
    Stage("density_operator", density.density_operator, ("A0",), "A0 = Q~^T Q~", "eq. 3.2",
          "DensityOperator"),
    Stage("metric_learner", metric_learner.metric_learner, ("A",), "A = Res_R(...Res_1(LN(A0)))", "eq. 3.3, Prop. 3.11",
          "LayerNorm, Contraction"),
    Stage("metric_tensor", plga.metric_tensor, ("A_LM",), "A_LM = iSwiGLU(W A + b) + eps_adj", "eq. 3.4, Prop. 3.7",
          "ISwiGLU, HadamardPower"),
    Stage("potential_tensor", plga.potential_tensor, ("A_P",), "A_P = A_LM^(o P)", "eq. 3.5", "HadamardPower"),
    Stage("energy_curvature", plga.energy_curvature, ("G_LM",), "G_LM = a A_P + b_a", "eq. 3.6", "RankOne"),
    Stage("attention_scores", attention.attention_scores, ("scores",), "Sc = Q~ G_LM K~^T / sqrt(d_k)", "eq. 3.7",
          "RoPE (commutant)"),
    Stage("masked_softmax", attention.masked_softmax, ("E",), "E = softmax_j(Sc + mask)", "eq. 3.8", "Softmax"),
    Stage("value_mix", attention.mix_values, ("ctx",), "Z = E V, merge heads", "eq. 3.9"),
    Stage("output_projection", glu.linear, ("attn_out",), "Y = Z Wo^T + bo", "spec §2.4.10"),
    Stage("post_attention_norm", norms.layer_norm, ("out1",), "O1 = LN1(Y + X)", "spec §2.3", "LayerNorm"),
    Stage("ffn", glu.glu, ("ffn_out",), "FFN = W3(silu(W1 z + b1) * (W2 z + b2)) + b3", "spec §2.3"),
    Stage("post_ffn_norm", norms.layer_norm, ("out2",), "O2 = LN2(FFN(O1) + O1)", "spec §2.3", "LayerNorm"),
    Stage("lm_head", model.lm_head, ("logits",), "logits = X^L Wout^T + bout", "spec §2.5", per_layer=False),
)

#: Public elementwise / building-block functions that have op-level fixtures of their own.
OP_FUNCTIONS: dict[str, Callable[..., object]] = {
    "sigmoid": activations.sigmoid,
    "silu": activations.silu,
    "iswiglu": activations.iswiglu,
    "layer_norm": norms.layer_norm,
    "linear": glu.linear,
    "glu": glu.glu,
    "apply_rope": rope.apply_rope,
    "density_operator": density.density_operator,
    "cumulative_density_operator": density.cumulative_density_operator,
    "residual_unit": metric_learner.residual_unit,
    "metric_learner_v500": metric_learner.metric_learner_v500,
    "metric_learner_v900": metric_learner.metric_learner_v900,
    "metric_tensor": plga.metric_tensor,
    "potential_tensor": plga.potential_tensor,
    "energy_curvature": plga.energy_curvature,
    "attention_scores": attention.attention_scores,
    "causal_padding_mask": attention.causal_padding_mask,
    "apply_mask": attention.apply_mask,
    "masked_softmax": attention.masked_softmax,
    "mix_values": attention.mix_values,
    "decoder_layer": layer.decoder_layer,
    "forward": model.forward,
}


def stage_of_output(trace_name: str) -> Stage:
    """The stage producing trace entry ``trace_name`` (``layers.{l}.X`` or a top-level name)."""
    leaf = trace_name.rsplit(".", 1)[-1]
    for stage in FORWARD_STAGES:
        if leaf in stage.outputs:
            return stage
    if leaf == "x":
        return next(s for s in FORWARD_STAGES if s.name == "input_norm")
    raise KeyError(f"no stage produces trace entry {trace_name!r}")
