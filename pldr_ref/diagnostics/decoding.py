"""Model section ``decoding``: cached versus recomputed greedy decoding (paper Prop. 5.2(i), Appendix D).

Greedy decoding runs through a cached loop (default the released ``kv+g`` mode: A, A_LM, A_P, G_LM frozen at
the prompt).  At every step t and for every prompt the cached final-row logits l_c are compared with the
logits l_u of a full uncached call on the same prefix:

* dlogit_t = max_v |l_c - l_u|,  margin_t = top-1 minus top-2 of l_c,  argmax agreement;
* eps_G per layer = RMS(G_u - G_c) / RMS(G_u), G_c the cached (prompt) operator, G_u the recomputed one;
* the sufficient criterion for an unchanged greedy choice under a logit perturbation of sup-norm B:
  2 B < margin (the winner may drop by B while the runner-up rises by B), with B = max_t dlogit_t and the
  smallest margin of the prompt.
The continuation follows the cached argmax.
"""

from __future__ import annotations

import numpy as np

from pldr_ref.diagnostics.run import ModelRun, final_row_forward, prompt_state
from pldr_ref.diagnostics.spectra import summary
from pldr_ref.inference.modes import advance, resolve_mode


def top2_margin(logits: np.ndarray) -> np.ndarray:
    """Largest minus second-largest logit per row of [..., V] -> [...]."""
    part = np.partition(logits, -2, axis=-1)
    return part[..., -1] - part[..., -2]


def relative_rms_rows(x: np.ndarray, ref: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """RMS(x - ref) / RMS(ref) over ``axes`` (0 where x == ref)."""
    num = np.sqrt(np.mean((x - ref) ** 2, axis=axes))
    den = np.sqrt(np.mean(ref**2, axis=axes))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(num == 0.0, 0.0, num / den)


def decoding_section(run: ModelRun) -> dict:
    """Per-step and per-prompt records of the cached-vs-recomputed comparison (see module doc)."""
    o = run.options
    mode = resolve_mode(o.decode_mode)
    cached, state = prompt_state(run, mode, o.decode_prompts)
    ids = state.ids
    g_cached = np.stack([t.G_LM[: ids.shape[0]] for t in run.out.layers])  # [L, B, H, d, d]: prompt pass
    dlogit, margin, agree, eps_g = [], [], [], []
    for t in range(o.decode_steps):  # sequential by definition
        recomputed, g_u = final_row_forward(run.params, state.ids)
        dlogit.append(np.max(np.abs(cached - recomputed), axis=-1))
        margin.append(top2_margin(cached))
        agree.append(np.argmax(cached, axis=-1) == np.argmax(recomputed, axis=-1))
        eps_g.append(relative_rms_rows(g_u, np.broadcast_to(g_cached, g_u.shape), (2, 3, 4)))  # [L, B]
        if t + 1 < o.decode_steps:
            tok = np.argmax(cached, axis=-1)[:, None]
            logits, step, state = advance(run.params, state, tok, mode)
            cached = logits[:, -1]
            g_cached = np.stack([x.G_LM for x in step.output.layers])  # the operator the cached call used
    d = np.stack(dlogit, axis=1)  # [B, T]
    m = np.stack(margin, axis=1)
    a = np.stack(agree, axis=1)
    e = np.stack(eps_g, axis=2)  # [L, B, T]
    b_max = d.max(axis=1)
    m_min = m.min(axis=1)
    return {
        "mode": mode.name,
        "steps": o.decode_steps,
        "n_prompts": int(ids.shape[0]),
        "max_dlogit_by_prompt": b_max.tolist(),
        "min_margin_by_prompt": m_min.tolist(),
        "criterion_2B_lt_margin_by_prompt": (2.0 * b_max < m_min).tolist(),
        "n_prompts_criterion_holds": int(np.sum(2.0 * b_max < m_min)),
        "argmax_agreement": float(a.mean()),
        "n_disagreements": int(np.sum(~a)),
        "dlogit": summary(d),
        "margin": summary(m),
        "min_margin": float(m.min()),
        "eps_G_max_by_layer": e.max(axis=(1, 2)).tolist(),
        "eps_G": summary(e),
        "per_step": {"dlogit": d.tolist(), "margin": m.tolist()},
    }
