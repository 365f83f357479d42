"""Model section ``budget``: the end-to-end perturbation budget PROXY of an operator perturbation Delta G_LM
(paper §5, Appendix D).  A sample-extrema worst-case proxy, not a certificate: every activation range,
variance floor and operator norm below is an extremum over the diagnosed prompt passes only, and entrywise
factors are multiplied as scalars.

Per head (layer l, head h), with A_LM in [m, M] over the prompts, U = max |W A + b| and P the exponent:

* C_G = ||a||_2 * max_ij |P_ij| max(m^(P_ij-1), M^(P_ij-1)) * iSwiGLU'_env(U) * ||W||_2 (sensitivity of
  G_LM to A); C_G_floor uses the architectural floor m = eps_adj;
  iSwiGLU'_env(U) = 2 U sigmoid(U) + U^2 / 4 >= sup_{|u| <= U} |d/du u^2 sigmoid(u)|;
* head factor = max_p ||q~_p|| * ||K~||_2 * ||V||_2 / sqrt(d_k) (sensitivity of the head output to Delta G).

Per layer: LN factors max|gamma| / sqrt(v_min + eps) (v_min the smallest row variance entering the norm),
FFN factor ||W3|| (max|z2| silu'_env(max|z1|) ||W1|| + max|silu(z1)| ||W2||) with
silu'_env(U) = sigmoid(U) + U / 4, attention factor
L_attn = ||W_O|| sqrt(H) ((||W_Q|| G_max K_max + q_max G_max ||W_K||) / sqrt(d_k) V_max + E_max ||W_V||),
layer factor L_layer = L_LN2 (1 + L_FFN) L_LN1 (1 + L_attn).

Assembled coefficient (Delta G entering at the attention output of layer l, through that layer's
post-attention remainder, then every later layer, then the LM head):

    C = sum_l hf_max ||W_O,l|| sqrt(H) L_LN1,l (1 + L_FFN,l) L_LN2,l prod_{j>l} L_layer,j ||W_vocab||.

Compared at the hypothetical single-rounding radius eps_spec = 2^-24 max ||G_LM||_F against half the smallest
greedy margin (decoding section when run, else the prompt pass's final-row margins).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

from pldr_ref.diagnostics.decoding import top2_margin
from pldr_ref.diagnostics.run import ModelRun
from pldr_ref.diagnostics.spectra import summary
from pldr_ref.linear_map import linear

#: Relative radius of one float32 rounding (2^-24), the hypothetical perturbation scale of eps_spec.
FLOAT32_UNIT_ROUNDOFF: float = 2.0**-24


def iswiglu_derivative_envelope(u: np.ndarray) -> np.ndarray:
    """2 U sigmoid(U) + U^2/4 >= sup_{|x| <= U} |iSwiGLU'(x)|, iSwiGLU'(x) = 2 x s(x) + x^2 s(x)(1 - s(x))."""
    u = np.asarray(u, dtype=np.float64)
    return 2.0 * u * expit(u) + u * u / 4.0


def silu_derivative_envelope(u: np.ndarray) -> np.ndarray:
    """sigmoid(U) + U/4 >= sup_{|x| <= U} |silu'(x)|, silu'(x) = s(x) + x s(x)(1 - s(x))."""
    u = np.asarray(u, dtype=np.float64)
    return expit(u) + u / 4.0


#: Matrices with both sides above this size get their norm from the top eigenvalue of the Gram matrix.
GRAM_MIN_SIDE = 256


def spectral_norm(w: np.ndarray) -> np.ndarray:
    """||W||_2 per matrix [..., n, k].

    Stacks of small matrices: the largest singular value from batched LAPACK SVD.  One large matrix (both
    sides > GRAM_MIN_SIDE: the attention, FFN and vocabulary weights): sqrt of the top eigenvalue of the
    smaller Gram matrix (W W^T or W^T W), only that eigenvalue computed (LAPACK ``syevx``); exact to round-off.
    Lanczos and power iteration converge slowly on the flat top spectra of random weights, hence the Gram route.
    """
    w = np.asarray(w, dtype=np.float64)
    if w.ndim == 2 and min(w.shape) > GRAM_MIN_SIDE:
        from scipy.linalg import eigvalsh

        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        n = gram.shape[0]
        return np.asarray(np.sqrt(max(float(eigvalsh(gram, subset_by_index=[n - 1, n - 1], driver="evx")[0]), 0.0)))
    return np.linalg.svd(w, compute_uv=False)[..., 0]


def power_factor(p: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max_ij |P_ij| max(lo^(P_ij-1), hi^(P_ij-1)) per head: sup of |d/dx x^P| on [lo, hi] (monotone in x)."""
    lo = np.asarray(lo)[..., None, None]
    hi = np.asarray(hi)[..., None, None]
    return np.max(np.abs(p) * np.maximum(lo ** (p - 1.0), hi ** (p - 1.0)), axis=(-2, -1))


def head_constants(run: ModelRun) -> dict[str, np.ndarray]:
    """Per (layer, head) [L, H]: C_G, C_G_floor, head factor and their ingredients (extrema over prompts):
    U, A_LM range, ||G||_2, ||G||_F, max ||q~_p||, ||K~||_2, ||V||_2, ||E||_2."""
    c = run.config
    names = ("C_G", "C_G_floor", "head_factor", "U", "A_LM_min", "A_LM_max", "G_2", "G_F", "q_max", "K_2", "V_2", "E_2")
    rows = {k: [] for k in names}
    for i, t in enumerate(run.out.layers):  # layers have different weights
        lp = run.params.layer(i)
        rows["G_2"].append(spectral_norm(t.G_LM).max(axis=0))
        rows["G_F"].append(np.linalg.norm(t.G_LM, axis=(-2, -1)).max(axis=0))
        for key, x in (("K_2", t.k_rot), ("V_2", t.v), ("E_2", t.E)):
            rows[key].append(spectral_norm(x).max(axis=0))
        rows["q_max"].append(np.linalg.norm(t.q_rot, axis=-1).max(axis=(0, 2)))
        rows["head_factor"].append(rows["q_max"][-1] * rows["K_2"][-1] * rows["V_2"][-1] / math.sqrt(c.d_k))
        if lp.plga is None:
            for k in ("C_G", "C_G_floor", "U", "A_LM_min", "A_LM_max"):
                rows[k].append(np.full(c.num_heads, np.nan))
            continue
        pre = np.matmul(lp.plga.W, t.A) + lp.plga.b  # [B, H, d, d]
        u = np.abs(pre).max(axis=(0, 2, 3))
        lo, hi = t.A_LM.min(axis=(0, 2, 3)), t.A_LM.max(axis=(0, 2, 3))
        base = spectral_norm(lp.plga.a) * iswiglu_derivative_envelope(u) * spectral_norm(lp.plga.W)
        rows["C_G"].append(base * power_factor(lp.plga.P, lo, hi))
        rows["C_G_floor"].append(base * power_factor(lp.plga.P, np.full_like(lo, c.eps_adj), hi))
        rows["U"].append(u)
        rows["A_LM_min"].append(lo)
        rows["A_LM_max"].append(hi)
    return {k: np.stack(v) for k, v in rows.items()}


def layer_factors(run: ModelRun, heads: dict[str, np.ndarray]) -> list[dict[str, float]]:
    """Per-layer Lipschitz factors (module doc) from the prompt pass, the per-head extrema of
    :func:`head_constants` and the weights."""
    c = run.config
    out = []
    for i, t in enumerate(run.out.layers):  # layers have different weights
        lp = run.params.layer(i)
        wo, wq, wk, wv = (float(spectral_norm(w)) for w in (lp.wo, lp.wq, lp.wk, lp.wv))
        qm, km, vm, em, gm = (float(heads[k][i].max()) for k in ("q_max", "K_2", "V_2", "E_2", "G_2"))
        l_attn = wo * math.sqrt(c.num_heads) * (((wq * gm * km + qm * gm * wk) / math.sqrt(c.d_k)) * vm + em * wv)
        z1 = linear(t.out1, lp.ffn.w1, lp.ffn.b1)
        z2 = linear(t.out1, lp.ffn.w2, lp.ffn.b2)
        act = z1 * expit(z1)
        w1, w2, w3 = (float(spectral_norm(w)) for w in (lp.ffn.w1, lp.ffn.w2, lp.ffn.w3))
        u1 = float(np.abs(z1).max())
        z2_max, act_max = float(np.abs(z2).max()), float(np.abs(act).max())
        l_ffn = w3 * (z2_max * float(silu_derivative_envelope(u1)) * w1 + act_max * w2)
        v1 = float(np.var(t.attn_out + t.x, axis=-1).min())
        v2 = float(np.var(t.ffn_out + t.out1, axis=-1).min())
        l_ln1 = float(np.abs(lp.norm1.gamma).max()) / math.sqrt(v1 + c.eps_ln)
        l_ln2 = float(np.abs(lp.norm2.gamma).max()) / math.sqrt(v2 + c.eps_ln)
        out.append({"W_O": wo, "W_Q": wq, "W_K": wk, "W_V": wv, "G_max": gm, "L_attn": l_attn, "L_ffn": l_ffn,
                    "L_LN1": l_ln1, "L_LN2": l_ln2, "v_min_LN1": v1, "v_min_LN2": v2,
                    "L_layer": l_ln2 * (1.0 + l_ffn) * l_ln1 * (1.0 + l_attn)})
    return out


def assemble_coefficient(layers: list[dict[str, float]], head_factor_max: float, num_heads: int,
                         w_vocab: float) -> float:
    """C = sum_l hf_max ||W_O,l|| sqrt(H) L_LN1,l (1 + L_FFN,l) L_LN2,l prod_{j>l} L_layer,j ||W_vocab||."""
    total = 0.0
    for i, rec in enumerate(layers):  # a sum over injection layers
        after = math.prod(r["L_layer"] for r in layers[i + 1:])
        post = rec["L_LN1"] * (1.0 + rec["L_ffn"]) * rec["L_LN2"]
        total += head_factor_max * rec["W_O"] * math.sqrt(num_heads) * post * after * w_vocab
    return total


def budget_section(run: ModelRun, decoding: dict | None = None) -> dict:
    """Per-head constants, per-layer factors, the assembled coefficient and its comparison with the margin."""
    heads = head_constants(run)
    layers = layer_factors(run, heads)
    w_vocab = float(spectral_norm(run.params["final_layer.weight"]))
    coeff = assemble_coefficient(layers, float(np.max(heads["head_factor"])), run.config.num_heads, w_vocab)
    eps_spec = FLOAT32_UNIT_ROUNDOFF * float(np.max(heads["G_F"]))
    if decoding is not None:
        margin, source = float(decoding["min_margin"]), "decoding section (cached greedy steps)"
    else:
        margin, source = float(np.min(top2_margin(run.out.logits[:, -1]))), "prompt pass final rows"
    bound = coeff * eps_spec
    return {
        "label": "sample-extrema worst-case PROXY, not a certificate (see docs/diagnostics.md)",
        "C_G": summary(heads["C_G"]),
        "C_G_floor": summary(heads["C_G_floor"]),
        "C_G_by_layer_head": heads["C_G"].tolist(),
        "head_factor": summary(heads["head_factor"]),
        "U": summary(heads["U"]),
        "A_LM_range": [float(np.nanmin(heads["A_LM_min"])), float(np.nanmax(heads["A_LM_max"]))],
        "per_layer": layers,
        "W_vocab": w_vocab,
        "end_to_end_coefficient": coeff,
        "eps_spec": {"value": eps_spec, "formula": "2^-24 * max ||G_LM||_F (hypothetical single-rounding radius)"},
        "bound_at_eps_spec": bound,
        "min_margin": margin,
        "margin_source": source,
        "proxy_below_half_margin": bool(bound < margin / 2.0),
        "log10_bound_over_half_margin": math.log10(bound / (margin / 2.0)) if bound > 0 and margin > 0 else None,
    }
