"""PLDR-LLM in float32 NumPy (``pldr_ref.backends.numpy32:Numpy32Backend``).

The structure of the float64 reference (spec §2) evaluated in float32: parameters and inputs are
rounded to float32 and every operation (matmuls through float32 BLAS, LayerNorm, softmax, the power
law) runs in float32.  The RoPE table follows ``rope_precision`` (``exact``: built in float64 and
rounded; ``float32``: torchtune's float32 table).  It declares what it implements -- float32 only,
the ``forward`` and ``decoder_layer`` kinds, no isolated stages, no cache-generation kind -- so
the harness reports everything else as unsupported instead of skipping it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.protocol import Capabilities, Unsupported
from pldr_ref.layer import LAYER_TRACE_NAMES
from pldr_ref.model import resolve_pad_masking
from pldr_ref.params import FIXED_G_KEY, Params
from pldr_ref.registry import ALL_STAGES, op_kinds
from pldr_ref.switches import declared_switches, switch

F32 = np.float32

#: The fixture kinds this backend runs (its capabilities' kinds).
KINDS = ("forward", "decoder_layer")

#: Registry ops (fixture kinds) this backend does not run: name -> why, by category (it runs whole layers and
#: models only; its equations are exercised through them).
UNSUPPORTED_KINDS: dict[str, str] = {
    **{name: "numpy32 runs whole layers and models: its op-level equations are checked through forward and "
       "decoder_layer" for name in op_kinds("op")},
    **{name: "numpy32 has no cache-generation driver (its layer takes the KV / G cache hooks)"
       for name in op_kinds("cache")},
    **{name: "numpy32 has no scoring driver" for name in op_kinds("scoring")},
}

#: Registry stages this backend does not run in isolation: name -> why (it has no ``run_stage``).
UNSUPPORTED_STAGES: dict[str, str] = {
    s.name: "numpy32 has no isolated-stage entry (run_stage); a wrong stage shows in the layer trace it spoils"
    for s in ALL_STAGES}


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """y = x W^T + b in float32."""
    y = np.matmul(x, w.T)
    return y if b is None else y + b


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)) in float32 (exp overflow gives the correct limit 0)."""
    with np.errstate(over="ignore"):
        return (F32(1) / (F32(1) + np.exp(-z))).astype(F32)


def glu(x: np.ndarray, P: Mapping[str, np.ndarray], prefix: str) -> np.ndarray:
    """W3 (silu(W1 x + b1) * (W2 x + b2)) + b3."""
    h1 = linear(x, P[f"{prefix}gluw1.weight"], P.get(f"{prefix}gluw1.bias"))
    h2 = linear(x, P[f"{prefix}gluw2.weight"], P.get(f"{prefix}gluw2.bias"))
    return linear(h1 * sigmoid(h1) * h2, P[f"{prefix}gluw3.weight"], P.get(f"{prefix}gluw3.bias"))


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis, float32."""
    mu = x.mean(axis=-1, keepdims=True, dtype=F32)
    xc = x - mu
    var = np.mean(xc * xc, axis=-1, keepdims=True, dtype=F32)
    return xc / np.sqrt(var + F32(eps)) * gamma + beta


def rope(x: np.ndarray, positions: np.ndarray, layout: str, precision: str, base: float) -> np.ndarray:
    """RoPE of x [B, H, S, d_k] in float32 (table per ``precision``), pairs per ``layout``; ``positions`` [S], or
    [B, S] per row (HF ``position_ids``)."""
    dk = x.shape[-1]
    if precision == "float32":
        omega = F32(1) / np.power(F32(base), np.arange(0, dk, 2, dtype=F32) / F32(dk))
        phi = np.asarray(positions).astype(F32)[..., None] * omega
    else:
        phi = np.asarray(positions, dtype=np.float64)[..., None] * np.power(float(base), -np.arange(0, dk, 2) / dk)
    cos, sin = np.cos(phi).astype(F32), np.sin(phi).astype(F32)
    if np.ndim(positions) == 2:  # [B, S, d_k/2] -> [B, 1, S, d_k/2]: one table per row, every head
        cos, sin = cos[:, None], sin[:, None]
    if layout == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = x[..., : dk // 2], x[..., dk // 2:]
    y1, y2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    if layout == "interleaved":
        return np.stack([y1, y2], axis=-1).reshape(x.shape)
    return np.concatenate([y1, y2], axis=-1)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax in float32 with max subtraction; an all -inf row gives zeros, a row holding NaN NaN."""
    m = np.max(logits, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, F32(0))
    e = np.exp(logits - m)
    z = np.sum(e, axis=-1, keepdims=True, dtype=F32)
    return np.divide(e, z, out=np.zeros_like(e), where=z != 0)


#: The ``masked_row`` values this backend implements for a query row whose every key is masked (as the reference's
#: :func:`pldr_ref.attention.attention_weights`: what the arithmetic gives, or zeros, 1/T or NaN forced).
MASKED_ROWS = switch("masked_row").concrete


def masked_rows(e: np.ndarray, mask: np.ndarray | None, masked_row: str) -> np.ndarray:
    """``e`` [B, H, S, T] with every fully masked query row (``mask`` all True) set as ``masked_row`` says:
    ``arithmetic`` keeps it, ``zeros`` 0, ``uniform`` 1/T, ``nan`` NaN."""
    if masked_row not in MASKED_ROWS:
        raise Unsupported(f"numpy32 does not implement masked_row={masked_row!r}")
    if masked_row == "arithmetic" or mask is None:
        return e
    dead = np.all(mask, axis=-1, keepdims=True)
    fill = {"zeros": F32(0), "uniform": F32(1.0 / e.shape[-1]), "nan": F32(np.nan)}[masked_row]
    return np.where(dead, fill, e).astype(F32) if dead.any() else e


def _per_head(t: np.ndarray, like: np.ndarray) -> np.ndarray:
    return t.reshape(t.shape[0], *([1] * (like.ndim - 4)), *t.shape[-2:])


class Numpy32Backend:
    """float32 NumPy backend (see module docstring)."""

    name = "numpy32"
    #: the ``masked_row`` values it implements (:func:`masked_rows`)
    MASKED_ROWS = MASKED_ROWS

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Params, dict[str, np.ndarray]]] = {}

    def capabilities(self) -> Capabilities:
        """float32; forward and decoder_layer cases; KV/G hooks of layer cases; no isolated stages."""
        return Capabilities(dtypes=("float32",), kinds=KINDS, caches=("kv", "g"),
                            switches=declared_switches("numpy32"), position_ids=True)

    def params(self, params: Params) -> dict[str, np.ndarray]:
        """Every parameter rounded to float32 (cached per Params object)."""
        hit = self._cache.get(id(params))
        if hit is None or hit[0] is not params:
            hit = (params, {k: np.asarray(v, dtype=F32) for k, v in params.items()})
            self._cache[id(params)] = hit
        return hit[1]

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        if dtype != "float32":
            raise Unsupported(f"numpy32 computes in float32 only, not {dtype}")
        if case.kind not in KINDS:
            raise Unsupported(f"numpy32 does not implement case kind {case.kind!r}")
        P = self.params(case.params)
        c = case.params.config
        inp = case.inputs
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if case.kind == "forward":
                out = self.forward(P, c, inp["token_ids"], int(case.args.get("start_pos", 0)),
                                   inp.get("attention_mask"), resolve_pad_masking(c, case.args.get("pad_masking")),
                                   inp.get("position_ids"))
            elif case.kind == "decoder_layer":
                li = int(case.args["layer"])

                def opt(n: str) -> np.ndarray | None:
                    return np.asarray(inp[n], dtype=F32) if n in inp else None

                frozen = (opt("frozen_A_LM"), opt("frozen_A_P"), opt("frozen_G_LM")) if "frozen_G_LM" in inp else None
                t = self.layer(P, c, li, np.asarray(inp["x"], dtype=F32), inp["positions"], inp.get("mask"),
                               opt("past_k"), opt("past_v"), opt("frozen_A"), frozen, opt("gram_offset"))
                out = {f"layers.{li}.{k}": v for k, v in t.items()}
            else:
                raise Unsupported(f"numpy32 does not implement case kind {case.kind!r}")
        return {k: np.asarray(v, dtype=np.float64) if v.dtype != np.bool_ else v for k, v in out.items()}

    def layer(self, P: Mapping[str, np.ndarray], c: Any, li: int, x: np.ndarray, positions: np.ndarray,
              mask: np.ndarray | None, past_k: np.ndarray | None = None, past_v: np.ndarray | None = None,
              frozen_A: np.ndarray | None = None, frozen_G: tuple | None = None,
              gram_offset: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """One decoder layer in float32 with the cache hooks of ``pldr_ref.layer.decoder_layer``."""
        pre, h, dk = f"decoder.dec_layers.{li}.", c.num_heads, c.d_k
        m = f"{pre}mha1."
        b, s, _ = x.shape

        def heads(w: str) -> np.ndarray:
            return linear(x, P[f"{m}{w}.weight"], P.get(f"{m}{w}.bias")).reshape(b, s, h, dk).transpose(0, 2, 1, 3)

        q, k, v = heads("wq"), heads("wk"), heads("wv")
        q_rot = rope(q, positions, c.rope_layout, c.rope_precision, c.rope_base)
        k_rot = rope(k, positions, c.rope_layout, c.rope_precision, c.rope_base)
        if past_k is not None:
            k_rot, v = np.concatenate([past_k, k_rot], axis=2), np.concatenate([past_v, v], axis=2)
        a0 = a = None
        if frozen_A is not None:
            a = frozen_A
        elif frozen_G is None or c.metric_learner != "none":
            if c.gram_mode == "cumulative":
                a0 = np.cumsum(q_rot[..., :, None] * q_rot[..., None, :], axis=-3)
                if gram_offset is not None:
                    a0 = a0 + gram_offset[:, :, None]
            else:
                a0 = np.matmul(np.swapaxes(q_rot, -1, -2), q_rot)
                a0 = F32(0.5) * (a0 + np.swapaxes(a0, -1, -2))
            if c.metric_learner != "none":
                a = self.metric_learner(P, c, m, a0)
        if frozen_G is not None:
            a_lm, a_p, g_lm = frozen_G
        elif c.g_mode == "learned":
            g = f"{m}plgatt_layer."
            z = np.matmul(_per_head(P[f"{g}Wlst"], a), a) + _per_head(P[f"{g}blst"], a)
            a_lm = z * (z * sigmoid(z)) + F32(c.eps_adj)
            a_p = np.power(a_lm, _per_head(P[f"{g}pwlst"], a_lm))
            g_lm = np.matmul(_per_head(P[f"{g}alst"], a_p), a_p) + _per_head(P[f"{g}balst"], a_p)
        else:
            a_lm = a_p = None
            g_lm = np.broadcast_to(P[FIXED_G_KEY][li, 2, 0], (b, h, dk, dk)).copy()
        qg = np.matmul(q_rot[..., None, :], g_lm)[..., 0, :] if g_lm.ndim == 5 else np.matmul(q_rot, g_lm)
        scores = np.matmul(qg, np.swapaxes(k_rot, -1, -2)) / F32(np.sqrt(dk))
        logits = scores
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if c.mask_mode == "ideal":
                logits = np.where(mask, F32(-np.inf), scores)
            else:
                const = F32(np.finfo(F32).min) if c.mask_mode == "finfo_min" else F32(c.mask_value)
                logits = np.where(mask, scores + const, scores)
        e = masked_rows(softmax(logits), mask, c.masked_row)
        ctx = np.matmul(e, v).transpose(0, 2, 1, 3).reshape(b, s, h * dk)
        attn_out = linear(ctx, P[f"{m}dense.weight"], P.get(f"{m}dense.bias"))
        out1 = layer_norm(attn_out + x, P[f"{pre}layernorm1.weight"], P[f"{pre}layernorm1.bias"], c.eps_ln)
        ffn_out = glu(out1, P, f"{pre}ffn.")
        out2 = layer_norm(ffn_out + out1, P[f"{pre}layernorm2.weight"], P[f"{pre}layernorm2.bias"], c.eps_ln)
        vals = {"x": x, "q": q, "k": k, "q_rot": q_rot, "k_rot": k_rot, "v": v, "A0": a0, "A": a, "A_LM": a_lm,
                "A_P": a_p, "G_LM": g_lm, "scores": scores, "E": e, "ctx": ctx, "attn_out": attn_out, "out1": out1,
                "ffn_out": ffn_out, "out2": out2}
        return {n: vals[n] for n in LAYER_TRACE_NAMES if vals.get(n) is not None}

    def metric_learner(self, P: Mapping[str, np.ndarray], c: Any, m: str, a0: np.ndarray) -> np.ndarray:
        """v500: Res_R(...Res_1(LN(A0))); v900: LN2(Dense(Res_R(...LN1(Dense(A0)))))."""
        if c.metric_learner == "v900":
            a = layer_norm(linear(a0, P[f"{m}A_dff_dense1.weight"], P[f"{m}A_dff_dense1.bias"]),
                           P[f"{m}layernorm1.weight"], P[f"{m}layernorm1.bias"], c.eps_ln)
        else:
            a = layer_norm(a0, P[f"{m}layernorm1.weight"], P[f"{m}layernorm1.bias"], c.eps_ln)
        for r in range(c.num_reslayerA):
            unit = f"{m}reslayerAs.{r}."
            hdn = a
            for j in range(c.num_denseA):
                hdn = glu(hdn, P, f"{unit}denseAs.{j}.")
            a = layer_norm(hdn + a, P[f"{unit}layernormA.weight"], P[f"{unit}layernormA.bias"], c.eps_ln)
        if c.metric_learner == "v900":
            a = layer_norm(linear(a, P[f"{m}A_dff_dense2.weight"], P[f"{m}A_dff_dense2.bias"]),
                           P[f"{m}layernorm2.weight"], P[f"{m}layernorm2.bias"], c.eps_ln)
        return a

    def forward(self, P: Mapping[str, np.ndarray], c: Any, token_ids: np.ndarray, start_pos: int,
                attention_mask: np.ndarray | None, pad_masking: bool,
                position_ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Full forward trace in float32 with the golden names; ``position_ids`` [B, S] (HF) replaces the RoPE
        positions per row (the causal mask follows the sequence index)."""
        ids = np.asarray(token_ids)
        s = ids.shape[1]
        positions = np.arange(start_pos, start_pos + s)
        if attention_mask is not None:
            pad = np.asarray(attention_mask) == 0
        else:
            pad = ids == c.pad_id if pad_masking else np.zeros(ids.shape, dtype=bool)
        mask = (positions[None, :] > positions[:, None])[None, None] | pad[:, None, None, :]
        scale = F32(np.sqrt(F32(c.d_model))) if c.embed_scale_precision == "float32" else F32(np.sqrt(c.d_model))
        emb = P["decoder.embedding.weight"][ids] * scale
        x = layer_norm(emb, P["decoder.layernorm1.weight"], P["decoder.layernorm1.bias"], c.eps_ln)
        out = {"embed": emb, "x0": x}
        for li in range(c.num_layers):
            t = self.layer(P, c, li, x, positions if position_ids is None else np.asarray(position_ids), mask)
            out.update({f"layers.{li}.{k}": v for k, v in t.items()})
            x = t["out2"]
        out["logits"] = linear(x, P["final_layer.weight"], P.get("final_layer.bias"))
        return out
