"""One stage of the float64 reference, run from given upstream values (the same interface as a
backend's ``run_stage``).  The harness uses it to measure the naive low-precision baseline of an
isolated stage: upstream values and parameters rounded to the dtype, this function in float64,
the output rounded (the FlashAttention rule applied per stage)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from pldr_ref import attention, glu, metric_learner, model, norms, plga, rope
from pldr_ref.config import PLDRConfig
from pldr_ref.density import cumulative_density_operator, density_operator
from pldr_ref.params import Params


def reference_stage(stage: str, layer: int | None, config: PLDRConfig, params: Params,
                    inputs: Mapping[str, np.ndarray],
                    round_to: Callable[[np.ndarray], np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Outputs (by leaf name) of ``stage`` of layer ``layer`` from upstream ``inputs`` (see
    :class:`pldr_ref.harness.protocol.StageRequest`), computed by the float64 reference functions.
    ``round_to`` (naive low-precision runs) rounds the masked logits inside ``masked_softmax``, as the
    naive layer run does: a ``-1e9 + score`` that the dtype cannot resolve is absorbed there too."""
    c = config
    i = inputs
    lp = params.layer(layer) if layer is not None else None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if stage == "sequence_mask":
            am = i.get("attention_mask")
            positions, mask = model.sequence_mask(c, np.asarray(i["token_ids"]), start_pos=int(i.get("start_pos", 0)),
                                                  attention_mask=am, pad_masking=bool(i.get("pad_masking", True)))
            if "position_ids" in i:  # per-row RoPE positions (issue 12); the mask keeps the sequence index
                positions = model.validate_position_ids(i["position_ids"], np.shape(i["token_ids"]), c)
            return {"positions": positions, "mask": mask}
        if stage == "embedding":
            return {"embed": model.embed(params, i["token_ids"])}
        if stage == "input_norm":
            return {"x0": norms.layer_norm(i["embed"], params["decoder.layernorm1.weight"],
                                           params["decoder.layernorm1.bias"], c.eps_ln)}
        if stage == "lm_head":
            return {"logits": model.lm_head(params, i["hidden"])}
        if lp is None:
            raise ValueError(f"stage {stage!r} needs a layer index")
        if stage == "qkv_projection":
            h = c.num_heads
            return {"q": attention.split_heads(glu.linear(i["x"], lp.wq, lp.bq), h),
                    "k": attention.split_heads(glu.linear(i["x"], lp.wk, lp.bk), h),
                    "v": attention.split_heads(glu.linear(i["x"], lp.wv, lp.bv), h)}
        if stage == "rope":
            table = rope.RopeTable(i["rope_cos"], i["rope_sin"]) if "rope_cos" in i else None
            kw = dict(layout=c.rope_layout, base=c.rope_base, table=c.rope_table_source,
                      arithmetic=c.rope_arithmetic_dtype, explicit=table)
            return {"q_rot": rope.apply_rope(i["q"], i["positions"], **kw),
                    "k_rot": rope.apply_rope(i["k"], i["positions"], **kw)}
        if stage == "density_operator":
            if c.gram_mode == "cumulative":
                a0 = cumulative_density_operator(i["q_rot"])
                if "gram_offset" in i:
                    a0 = a0 + i["gram_offset"][:, :, None]
                return {"A0": a0}
            return {"A0": density_operator(i["q_rot"])}
        if stage == "metric_learner":
            return {"A": metric_learner.metric_learner(i["A0"], lp, c.metric_learner, c.eps_ln)}
        if stage == "metric_tensor":
            return {"A_LM": plga.metric_tensor(i["A"], lp.plga.W, lp.plga.b, c.eps_adj)}
        if stage == "potential_tensor":
            return {"A_P": plga.potential_tensor(i["A_LM"], lp.plga.P)}
        if stage == "energy_curvature":
            return {"G_LM": plga.energy_curvature(i["A_P"], lp.plga.a, lp.plga.b_a)}
        if stage == "attention_scores":
            return {"scores": attention.attention_scores(i["q_rot"], i["G_LM"], i["k_rot"], c.score_scale)}
        if stage == "masked_softmax":
            logits = attention.apply_mask(i["scores"], i.get("mask"), c.mask_mode, c.mask_value, c.mask_add_dtype)
            if round_to is not None:
                logits = round_to(logits)
            return {"E": attention.attention_weights(logits, i.get("mask"), precision=c.softmax_precision,
                                                     masked_row=c.masked_row)}
        if stage == "value_mix":
            return {"ctx": attention.merge_heads(attention.mix_values(i["E"], i["v"]))}
        if stage == "output_projection":
            return {"attn_out": glu.linear(i["ctx"], lp.wo, lp.bo)}
        if stage == "post_attention_norm":
            return {"out1": norms.layer_norm(i["attn_out"] + i["x"], lp.norm1.gamma, lp.norm1.beta, c.eps_ln)}
        if stage == "ffn":
            return {"ffn_out": glu.glu(i["out1"], lp.ffn)}
        if stage == "post_ffn_norm":
            return {"out2": norms.layer_norm(i["ffn_out"] + i["out1"], lp.norm2.gamma, lp.norm2.beta, c.eps_ln)}
    raise ValueError(f"unknown stage {stage!r}")
