"""Exact-tier decoder layer (spec §2.3-§2.4) over nested lists of ``mpf``.

Shapes mirror the float64 trace (:class:`pldr_ref.layer.LayerTrace`): x [B][S][d]; q, k, v,
q_rot, k_rot [B][H][S][d_k]; A0, A, A_LM, A_P, G_LM [B][H][d_k][d_k] (one more [S] level
before the matrix with the cumulative Gram); scores, E [B][H][S][T]; ctx ... out2 [B][S][d].
No cache hooks: the exact tier covers the full-sequence forward.
"""

from __future__ import annotations

from typing import Any

import mpmath
from mpmath import mpf

from pldr_ref.config import PLDRConfig
from pldr_ref.constants import FINFO_MIN_F64
from pldr_ref.exact import plga
from pldr_ref.exact.numbers import mpf_exact, round_to_float32
from pldr_ref.exact.ops import Matrix, affine, glu, layer_norm, masked_logit, softmax_row, vecmat
from pldr_ref.exact.rope import RopeTables, rotate, round_to_float64
from pldr_ref.layer import LAYER_TRACE_NAMES
from pldr_ref.switches import require_engine_support, switch


class LayerConstants:
    """The layer's scalar constants as exact binary64 values (eps, eps_adj, mask values) and 1/sqrt(d_k)."""

    def __init__(self, config: PLDRConfig) -> None:
        require_engine_support("mpmath", config)  # a switch value the table says this tier lacks: refused by name
        self.eps = mpf_exact(config.eps_ln)
        self.eps_adj = mpf_exact(config.eps_adj)
        self.mask_value = mpf_exact(config.mask_value)
        self.finfo_min = mpf_exact(FINFO_MIN_F64)
        self.inv_sqrt_dk = score_scale_factor(config.d_k, config.score_scale)


def score_scale_factor(d_k: int, scale: str) -> mpf:
    """The factor applied to Q~ G K~^T (``PLDRConfig.score_scale``): 1/sqrt(d_k) (``exact``), 1/RN32(sqrt(d_k))
    (``float32``: division by the float32 square root), RN64(1/RN64(sqrt(d_k))) (``reciprocal``: HF)."""
    if scale == "exact":
        return 1 / mpmath.sqrt(d_k)
    if scale == "float32":
        return 1 / round_to_float32(mpmath.sqrt(d_k))
    if scale == "reciprocal":
        return round_to_float64(1 / round_to_float64(mpmath.sqrt(d_k)))
    raise switch("score_scale").error(scale, allowed=switch("score_scale").implemented_by("mpmath"))


def switch_masked_logit(score: mpf, masked: bool, config: PLDRConfig, k: LayerConstants) -> mpf:
    """:func:`masked_logit`, with ``mask_add_dtype="float32"``: RN32(RN32(score) + RN32(mask_value)) when masked."""
    if masked and config.mask_add_dtype == "float32":
        return round_to_float32(round_to_float32(score) + round_to_float32(k.mask_value))
    return masked_logit(score, masked, config.mask_mode, k.mask_value, k.finfo_min)


def switch_softmax_row(logits: list[mpf], masked: list[bool], config: PLDRConfig) -> list[mpf]:
    """E row under ``softmax_precision`` and ``masked_row`` (exact statements of the float64 tier's switches).

    ``float32``: RN32 of the exact softmax of RN32(logits) (an all -inf row is NaN, as torch's softmax);
    ``masked_row`` zeros / uniform / nan replaces a row whose every key is masked.
    ``explicit`` (a user's float32 kernel) has no exact statement: ``NotImplementedError``.
    """
    if config.softmax_precision == "explicit":
        raise NotImplementedError("softmax_precision='explicit' runs a user's float32 kernel, which has no exact "
                                  "statement; the exact tier takes 'float64' or 'float32'")
    if config.softmax_precision == "float32":
        l32 = [round_to_float32(v) for v in logits]
        if all(mpmath.isinf(v) and v < 0 for v in l32):
            row = [mpmath.mpf("nan")] * len(logits)
        else:
            row = [round_to_float32(v) for v in softmax_row(l32)]
    else:
        row = softmax_row(logits)
    if config.masked_row != "arithmetic" and all(masked):
        fill = {"zeros": mpf(0), "uniform": 1 / mpf(len(row)), "nan": mpmath.mpf("nan")}[config.masked_row]
        row = [fill] * len(row)
    return row


def split_heads(rows: Matrix, num_heads: int) -> list[Matrix]:
    """[S][H*d_k] -> [H][S][d_k] (feature f = h d_k + j, head-major)."""
    dk = len(rows[0]) // num_heads
    return [[row[h * dk:(h + 1) * dk] for row in rows] for h in range(num_heads)]


def merge_heads(heads: list[Matrix]) -> Matrix:
    """[H][S][d_k] -> [S][H*d_k]."""
    return [[v for h in range(len(heads)) for v in heads[h][s]] for s in range(len(heads[0]))]


def head_scores(q_rot: Matrix, g: Matrix | list[Matrix], k_rot: Matrix, inv_sqrt_dk: mpf, cumulative: bool) -> Matrix:
    """Sc_{st} = (q~_s G) . k~_t / sqrt(d_k) (paper eq. 3.7); G per query row when ``cumulative``."""
    out = []
    for s, q in enumerate(q_rot):
        qg = vecmat(q, g[s] if cumulative else g)
        out.append([mpmath.fdot(qg, k) * inv_sqrt_dk for k in k_rot])
    return out


def decoder_layer(lp: Any, x: list[Matrix], config: PLDRConfig, *, positions: list[int] | list[list[int]],
                  mask: list[list[list[bool]]] | None, tables: RopeTables, k: LayerConstants) -> dict[str, Any]:
    """Y = MHA_PLGA(X); O1 = LN1(Y + X); O2 = LN2(FFN(O1) + O1) for exact ``lp`` and x [B][S][d].

    ``positions``: RoPE positions [S], or [B][S] per row (``position_ids``).
    ``mask[b][i][j]`` is True where key j is forbidden for query i; returns the trace dict
    in :data:`pldr_ref.layer.LAYER_TRACE_NAMES` order (A/A_LM/A_P and an optional stage's outputs omitted when
    they do not exist).
    """
    c = config
    nh = c.num_heads
    cumulative = c.gram_mode == "cumulative"
    t: dict[str, list] = {name: [] for name in LAYER_TRACE_NAMES}
    t["x"] = x
    for b, xb in enumerate(x):
        q = split_heads([affine(r, lp.wq, lp.bq) for r in xb], nh)
        kk = split_heads([affine(r, lp.wk, lp.bk) for r in xb], nh)
        v = split_heads([affine(r, lp.wv, lp.bv) for r in xb], nh)
        rope = (c.rope_layout, c.rope_arithmetic_dtype)
        pos_b = positions[b] if positions and isinstance(positions[0], list) else positions  # per-row ids
        q_rot = [[rotate(r, *tables(p), *rope) for r, p in zip(qh, pos_b, strict=True)] for qh in q]
        k_rot = [[rotate(r, *tables(p), *rope) for r, p in zip(kh, pos_b, strict=True)] for kh in kk]
        heads = {name: [] for name in ("A0", "A", "A_LM", "A_P", "G_LM", "scores", "E", "ctx")}
        for h in range(nh):
            a0 = plga.cumulative_density_operator(q_rot[h]) if cumulative else plga.density_operator(q_rot[h])
            ops = a0 if cumulative else [a0]  # one operator per query row, or one per head
            a = None
            if c.metric_learner != "none":
                a = [plga.metric_learner(op, lp, c.metric_learner, k.eps) for op in ops]
            if lp.plga is not None:
                a_lm = [plga.metric_tensor(op, lp.plga.W[h], lp.plga.b[h], k.eps_adj) for op in a]
                a_p = [plga.potential_tensor(op, lp.plga.P[h]) for op in a_lm]
                g = [plga.energy_curvature(op, lp.plga.a[h], lp.plga.b_a[h]) for op in a_p]
            else:
                a_lm = a_p = None
                g = [lp.g_fixed[h]] * len(ops) if cumulative else [lp.g_fixed[h]]
            scores = head_scores(q_rot[h], g if cumulative else g[0], k_rot[h], k.inv_sqrt_dk, cumulative)
            e = []
            for i, row in enumerate(scores):
                m_row = mask[b][i] if mask is not None else [False] * len(row)
                logits = [switch_masked_logit(s, mm, c, k) for s, mm in zip(row, m_row, strict=True)]
                e.append(switch_softmax_row(logits, m_row, c))
            vt = [list(col) for col in zip(*v[h], strict=True)]
            heads["ctx"].append([[mpmath.fdot(er, col) for col in vt] for er in e])
            unwrap = (lambda ms: ms) if cumulative else (lambda ms: ms[0])
            heads["A0"].append(a0)
            heads["A"].append(None if a is None else unwrap(a))
            heads["A_LM"].append(None if a_lm is None else unwrap(a_lm))
            heads["A_P"].append(None if a_p is None else unwrap(a_p))
            heads["G_LM"].append(unwrap(g))
            heads["scores"].append(scores)
            heads["E"].append(e)
        ctx = merge_heads(heads.pop("ctx"))
        attn_out = [affine(r, lp.wo, lp.bo) for r in ctx]
        out1 = [layer_norm([u + w for u, w in zip(ra, rx, strict=True)], lp.norm1.gamma, lp.norm1.beta, k.eps)
                for ra, rx in zip(attn_out, xb, strict=True)]
        ffn_out = [glu(r, lp.ffn.w1, lp.ffn.b1, lp.ffn.w2, lp.ffn.b2, lp.ffn.w3, lp.ffn.b3) for r in out1]
        out2 = [layer_norm([u + w for u, w in zip(rf, r1, strict=True)], lp.norm2.gamma, lp.norm2.beta, k.eps)
                for rf, r1 in zip(ffn_out, out1, strict=True)]
        for name, val in (("q", q), ("k", kk), ("v", v), ("q_rot", q_rot), ("k_rot", k_rot), ("ctx", ctx),
                          ("attn_out", attn_out), ("out1", out1), ("ffn_out", ffn_out), ("out2", out2)):
            t[name].append(val)
        for name, val in heads.items():
            t[name].append(val)
    optional = ("A", "A_LM", "A_P")  # absent without a metric learner / with a fixed G
    return {name: val for name, val in t.items() if val and not (name in optional and val[0][0] is None)}
