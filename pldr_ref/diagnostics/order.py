"""Model section ``order-parameter``: the order-parameter protocol of paper Definition 5.1 / Prop. 5.2(ii).

Per prompt, two continuations are sampled (temperature 1, no filtering, ``pldr_ref.inference.generation``'s
seeded CDF inversion) with two fixed seeds through the KV+G-cached decoding loop (``prefill`` state taken
from the traced prompt pass, then ``advance`` one token per call);
both full sequences are then recomputed by an uncached forward call and each
deductive tensor T in (A, A_LM, A_P, G_LM) is compared between the two recomputations, per prompt and layer:

* RMS statistic: m = RMS(T1 - T2) / ((RMS(T1) + RMS(T2)) / 2) (``pldr_ref.order_parameter``, 0/0 = 0);
* signed statistic: RMS(T1 - T2) / ((|mean T1| + |mean T2|) / 2), a symmetrised signed-mean normalisation
  (0 when T1 == T2, +inf when the means cancel with T1 != T2).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pldr_ref.diagnostics.run import ModelRun, layer_pass, prompt_state
from pldr_ref.diagnostics.spectra import summary
from pldr_ref.inference import SamplingConfig
from pldr_ref.inference.generation import choose_tokens, make_rng
from pldr_ref.inference.modes import advance, resolve_mode
from pldr_ref.order_parameter import DEDUCTIVE_TENSORS, relative_rms_fluctuation, rms


def signed_mean_fluctuation(t1: np.ndarray, t2: np.ndarray) -> float:
    """RMS(T1 - T2) / ((|mean T1| + |mean T2|) / 2); 0 when T1 == T2, +inf when the means cancel otherwise."""
    num = rms(np.asarray(t1, dtype=np.float64) - np.asarray(t2, dtype=np.float64))
    if num == 0.0:
        return 0.0
    den = 0.5 * (abs(float(np.mean(t1))) + abs(float(np.mean(t2))))
    return num / den if den > 0.0 else float("inf")


def order_parameter_section(run: ModelRun) -> dict:
    """Per tensor type: RMS and signed statistics per [prompt][layer] and their summaries."""
    o = run.options
    sampling = SamplingConfig(strategy="sample")
    mode = resolve_mode("kv+g")
    seqs = []
    for seed in o.op_seeds:  # two independent continuations
        logits, state = prompt_state(run, mode, o.op_prompts)
        rng = make_rng(seed)
        for i in range(o.op_steps):  # sequential: each sampled token feeds the next cached call
            tok = choose_tokens(logits, sampling, rng)[:, None]
            if i + 1 < o.op_steps:
                new, _, state = advance(run.params, state, tok, mode)
                logits = new[:, -1]
            else:
                state = dataclasses.replace(state, ids=np.concatenate([state.ids, tok], axis=1))
        seqs.append(state.ids)
    outs = [layer_pass(run.params, s)[0] for s in seqs]  # the uncached recomputation's traces (no LM head needed)
    rep: dict = {"seeds": list(o.op_seeds), "continuation_tokens": o.op_steps, "sampling_mode": "kv+g",
                 "n_prompts": int(seqs[0].shape[0]),
                 "n_prompts_with_distinct_continuations": int(np.sum(np.any(seqs[0] != seqs[1], axis=1)))}
    for name in DEDUCTIVE_TENSORS:
        pairs = [(getattr(a, name), getattr(b, name)) for a, b in zip(outs[0], outs[1], strict=True)]
        if any(x is None for pair in pairs for x in pair):
            continue
        # [B][L] scalar statistics: a loop over prompts and layers of whole-tensor reductions
        r = np.array([[relative_rms_fluctuation(x[b], y[b]) for x, y in pairs] for b in range(seqs[0].shape[0])])
        s = np.array([[signed_mean_fluctuation(x[b], y[b]) for x, y in pairs] for b in range(seqs[0].shape[0])])
        rep[name] = {"rms": summary(r), "signed": summary(s), "rms_by_prompt_layer": r.tolist(),
                     "rms_median_by_layer": np.median(r, axis=0).tolist()}
    return rep
