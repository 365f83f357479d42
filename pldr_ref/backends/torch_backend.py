"""An independent PyTorch implementation of PLDR-LLM, validated by the harness.

Backend name for the harness: ``pldr_ref.backends.torch_backend:TorchBackend``.

Written from the spec (``equations.md`` §2, §7, §8, §11-§12), not by calling the float64
NumPy reference: every equation is re-implemented with torch operations.  Only data plumbing
is shared (parameter names of :func:`pldr_ref.params.param_shapes`, the case format).

* dtypes: float64 and float32 (parameters and inputs rounded to the dtype, every op in it; the RoPE
  angle table in float64 for ``rope_precision="exact"``); bfloat16 and float16 in the mixed-precision
  style of real GPU code (torch autocast): parameters and inputs stored in the 16-bit dtype, every
  matrix product takes 16-bit inputs, accumulates in float32 and returns its result rounded to the
  16-bit dtype, every elementwise op (LayerNorm, RoPE, softmax, PLGA powers, residuals) runs in float32
  (:meth:`TorchBackend.matmul`);
* device: ``TorchBackend(device=...)``, else ``$PLDR_REF_TORCH_DEVICE``, else CUDA when present,
  else CPU;
* every switch of :class:`~pldr_ref.config.PLDRConfig` (RoPE layouts and precisions, mask
  modes, metric learners v500/v900, G modes, global and cumulative Gram);
* caches: KV (rotated keys, values, frozen A or running Gram) and G (A_LM, A_P, G_LM) with the
  semantics of :func:`pldr_ref.inference.cached_forward`.

Every step of the model is a method, so a variant can override exactly one equation (the
mutation suite in :mod:`pldr_ref.harness.mutants` does this).  PyTorch is an optional
dependency (``pip install "pldr-ref[torch]"``); it is imported when the backend is created.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from pldr_ref.harness.protocol import Capabilities, StageRequest, Unsupported
from pldr_ref.params import FIXED_G_KEY, Params
from pldr_ref.registry import ALL_STAGES, op_kinds

#: Every op kind of the fixture suite that this backend runs (plus ``decoder_layer``, ``forward``).
OP_KINDS = op_kinds("op")

#: The scoring semantics of paper §4.5 (fixture kinds).
SCORING_KINDS = op_kinds("scoring")

#: HF cross-entropy ignore label.
HF_IGNORE_INDEX = -100

STAGE_NAMES = tuple(s.name for s in ALL_STAGES)

#: Number of (parameters, dtype) conversions kept on the device.
PARAMS_CACHE_SIZE = 4

#: Cache modes of the ``cached_generation`` kind (spec §8.1-§8.2):
#: name -> (KV cache, G cache, cached-step mask, HF cache_first_G, padding from token id).
GENERATION_MODES = {
    "kv+g": (True, True, "none", False, True),
    "kv": (True, False, "none", False, True),
    "g": (False, True, "none", False, True),
    "none": (False, False, "none", False, True),
    "hf": (True, True, "causal", False, False),
    "hf-first-G": (True, True, "causal", True, False),
}

#: Trace entries of one layer, in forward order (the golden names ``layers.{l}.{entry}``).
LAYER_ENTRIES = ("x", "q", "k", "q_rot", "k_rot", "v", "A0", "A", "A_LM", "A_P", "G_LM", "scores", "E", "ctx",
                 "attn_out", "out1", "ffn_out", "out2")


def import_torch() -> Any:
    """``import torch`` with a clear error when the optional extra is missing."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the torch backend needs PyTorch: install it with `pip install \"pldr-ref[torch]\"` or `pip install torch`"
        ) from exc
    return torch


class TorchBackend:
    """PLDR-LLM in PyTorch (see module docstring).

    ``device``: "cpu", "cuda", "cuda:1", ... or None (``$PLDR_REF_TORCH_DEVICE``, else CUDA when present,
    else CPU).  ``num_threads`` (or ``$PLDR_REF_TORCH_THREADS``): calls ``torch.set_num_threads`` --
    process-wide; 1 is much faster for the small fixture tensors on a busy CPU.
    """

    name = "torch"

    def __init__(self, device: str | None = None, num_threads: int | None = None) -> None:
        torch = import_torch()
        self.torch = torch
        dev = device or os.environ.get("PLDR_REF_TORCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(dev)
        threads = num_threads if num_threads is not None else os.environ.get("PLDR_REF_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self._params_cache: dict[tuple[int, str], tuple[Params, dict[str, Any]]] = {}
        self._mm: Any = None  # the 16-bit storage / matmul-input dtype of the current call (None: no mixing)

    # ------------------------------------------------------------------ protocol
    def capabilities(self) -> Capabilities:
        """All dtypes, every fixture kind, every stage in isolation, KV and G caches, every switch."""
        return Capabilities(
            dtypes=("float64", "float32", "bfloat16", "float16"),
            kinds=(*OP_KINDS, "decoder_layer", "forward", "cached_generation", *SCORING_KINDS),
            stages=STAGE_NAMES,
            caches=("kv", "g"),
        )

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """Outputs of a fixture case (golden names) computed in ``dtype``."""
        dt = self.dtype(dtype)
        kind = case.kind
        inputs = {k: np.asarray(v) for k, v in case.inputs.items()}
        args = dict(case.args or {})
        if kind == "forward":
            P = self.params(case.params, dt)
            trace = self.forward(P, case.params.config, inputs["token_ids"], start_pos=int(args.get("start_pos", 0)),
                                 attention_mask=inputs.get("attention_mask"),
                                 pad_masking=bool(args.get("pad_masking", True)))
            return self.numpy_dict(trace)
        if kind == "decoder_layer":
            return self.numpy_dict(self._run_layer_case(case.params, args, inputs, dt))
        if kind == "cached_generation":
            return self.numpy_dict(self._run_cached_generation(case, args, inputs, dt))
        if kind in SCORING_KINDS:
            return self.numpy_dict(self._run_scoring(kind, case, args, inputs, dt))
        if kind in OP_KINDS:
            return self.numpy_dict(self._run_op(kind, case.params, args, inputs, dt))
        raise Unsupported(f"case kind {kind!r} is not implemented by the torch backend")

    def run_stage(self, request: StageRequest) -> dict[str, np.ndarray]:
        """One stage from golden upstream values (see :class:`~pldr_ref.harness.protocol.StageRequest`)."""
        dt = self.dtype(request.dtype)
        c = request.config
        P = self.params(request.params, dt)
        i = request.inputs
        pre = None if request.layer is None else f"decoder.dec_layers.{request.layer}."

        def t(name: str) -> Any:
            return self.tensor(i[name], dt)

        s = request.stage
        if s == "sequence_mask":
            ids = self.tensor(i["token_ids"])
            start = int(i["start_pos"]) if "start_pos" in i else 0
            positions = self.call_positions(start, ids.shape[1])
            pad = self.key_padding(ids, c, i.get("attention_mask"), bool(i["pad_masking"]) if "pad_masking" in i
                                   else True)
            out = {"positions": positions, "mask": self.causal_padding_mask(positions, positions, pad)}
        elif s == "embedding":
            out = {"embed": self.embed(P, c, self.tensor(i["token_ids"]))}
        elif s == "input_norm":
            out = {"x0": self.layer_norm(t("embed"), P["decoder.layernorm1.weight"], P["decoder.layernorm1.bias"],
                                         c.eps_ln)}
        elif s == "qkv_projection":
            x = t("x")
            out = {n: self.split_heads(self.linear(x, P[f"{pre}mha1.{w}.weight"], P.get(f"{pre}mha1.{w}.bias")),
                                       c.num_heads) for n, w in (("q", "wq"), ("k", "wk"), ("v", "wv"))}
        elif s == "rope":
            pos = self.tensor(i["positions"])
            out = {"q_rot": self.rope(t("q"), pos, c), "k_rot": self.rope(t("k"), pos, c)}
        elif s == "density_operator":
            q_rot = t("q_rot")
            k_new = t("k_rot")[:, :, -q_rot.shape[2]:] if "k_rot" in i else None
            out = {"A0": self.gram(self.gram_rows(q_rot, k_new), c, t("gram_offset") if "gram_offset" in i else None)}
        elif s == "metric_learner":
            out = {"A": self.metric_learner(P, pre, t("A0"), c)}
        elif s == "metric_tensor":
            out = {"A_LM": self.metric_tensor(t("A"), P[f"{pre}mha1.plgatt_layer.Wlst"],
                                              P[f"{pre}mha1.plgatt_layer.blst"], c.eps_adj)}
        elif s == "potential_tensor":
            out = {"A_P": self.potential_tensor(t("A_LM"), P[f"{pre}mha1.plgatt_layer.pwlst"])}
        elif s == "energy_curvature":
            out = {"G_LM": self.energy_curvature(t("A_P"), P[f"{pre}mha1.plgatt_layer.alst"],
                                                 P[f"{pre}mha1.plgatt_layer.balst"])}
        elif s == "attention_scores":
            out = {"scores": self.attention_scores(t("q_rot"), t("G_LM"), t("k_rot"))}
        elif s == "masked_softmax":
            mask = self.tensor(i["mask"]).bool() if "mask" in i else None
            out = {"E": self.softmax(self.apply_mask(t("scores"), mask, c))}
        elif s == "value_mix":
            out = {"ctx": self.merge_heads(self.mix_values(t("E"), t("v")))}
        elif s == "output_projection":
            out = {"attn_out": self.linear(t("ctx"), P[f"{pre}mha1.dense.weight"], P.get(f"{pre}mha1.dense.bias"))}
        elif s == "post_attention_norm":
            out = {"out1": self.layer_norm(self.residual(t("attn_out"), t("x")), P[f"{pre}layernorm1.weight"],
                                           P[f"{pre}layernorm1.bias"], c.eps_ln)}
        elif s == "ffn":
            out = {"ffn_out": self.glu(t("out1"), P, f"{pre}ffn.")}
        elif s == "post_ffn_norm":
            out = {"out2": self.layer_norm(self.residual(t("ffn_out"), t("out1")), P[f"{pre}layernorm2.weight"],
                                           P[f"{pre}layernorm2.bias"], c.eps_ln)}
        elif s == "lm_head":
            out = {"logits": self.lm_head(P, t("hidden"))}
        else:
            raise Unsupported(f"stage {s!r} is not known to the torch backend")
        return self.numpy_dict(out)

    # ------------------------------------------------------------------ data plumbing
    def dtype(self, name: str) -> Any:
        """torch compute dtype of a harness dtype name (float32 for bfloat16 / float16, whose 16-bit dtype becomes
        the storage and matmul-input dtype of the call, :meth:`matmul`)."""
        torch = self.torch
        table = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
                 "float16": torch.float16}
        if name not in table:
            raise Unsupported(f"dtype {name!r} is not supported by the torch backend")
        self._mm = table[name] if name in ("bfloat16", "float16") else None
        return torch.float32 if self._mm is not None else table[name]

    def storage_dtype(self, dt: Any) -> Any:
        """The dtype values are stored in: the 16-bit dtype of a mixed-precision call, else ``dt``."""
        return self._mm if self._mm is not None else dt

    def tensor(self, arr: Any, dt: Any = None) -> Any:
        """NumPy array -> torch tensor on the device; floats go to ``dt`` (rounded through the 16-bit storage dtype
        in a mixed-precision call), ints to int64, bools stay (always a private copy)."""
        a = np.asarray(arr)
        if a.dtype == np.bool_:
            return self.torch.as_tensor(np.array(a, copy=True), device=self.device)
        if np.issubdtype(a.dtype, np.integer):
            return self.torch.as_tensor(a.astype(np.int64), device=self.device)
        t = self.torch.as_tensor(a.astype(np.float64), device=self.device)
        if dt is None:
            return t
        if self._mm is not None and dt == self.torch.float32:
            return self.storage_round(t).to(dt)
        return t.to(dt)

    def storage_round(self, t: Any) -> Any:
        """``t`` rounded to the 16-bit storage dtype, except values that dtype cannot hold as normal numbers
        (eps_adj-sized A_LM, huge A_P in float16), which stay float32 as in real mixed-precision code."""
        torch = self.torch
        info = torch.finfo(self._mm)
        low = t.to(self._mm).to(torch.float32)
        mag = t.abs()
        outside = torch.isfinite(t) & ((mag > info.max) | ((mag > 0) & (mag < info.tiny)))
        return torch.where(outside, t.to(torch.float32), low)

    def matmul(self, a: Any, b: Any) -> Any:
        """a @ b; in a mixed-precision call both inputs are rounded to the 16-bit dtype, the products are
        accumulated in float32 and the result is rounded to the 16-bit dtype (autocast semantics)."""
        torch = self.torch
        if self._mm is None or a.dtype != torch.float32:  # a float64 / pure 16-bit call: no mixing
            return torch.matmul(a, b)
        return self.storage_round(torch.matmul(self.storage_round(a), self.storage_round(b)))

    def numpy_dict(self, out: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """torch tensors -> NumPy float64 (bool stays bool); exact widening of every dtype."""
        res = {}
        for k, v in out.items():
            if v is None:
                continue
            v = v.detach().to("cpu")
            if v.dtype == self.torch.bool:
                res[k] = v.numpy()
            elif not v.dtype.is_floating_point:
                res[k] = v.to(self.torch.int64).numpy()
            else:
                res[k] = v.to(self.torch.float64).numpy()
        return res

    def params(self, params: Params, dt: Any) -> dict[str, Any]:
        """Every parameter as a torch tensor in ``dt`` (cached per Params object and dtype)."""
        key = (id(params), f"{dt}/{self._mm if dt == self.torch.float32 else None}")
        hit = self._params_cache.get(key)
        if hit is not None and hit[0] is params:
            return hit[1]
        tensors = {name: self.tensor(arr, dt) for name, arr in params.items()}
        if len(self._params_cache) >= PARAMS_CACHE_SIZE:  # a suite holds many models: keep the recent ones
            self._params_cache.pop(next(iter(self._params_cache)))
        self._params_cache[key] = (params, tensors)
        return tensors

    # ------------------------------------------------------------------ building blocks
    def linear(self, x: Any, w: Any, b: Any | None) -> Any:
        """y = x W^T + b (W is [out, in])."""
        y = self.matmul(x, w.transpose(0, 1))
        return y if b is None else y + b

    def sigmoid(self, z: Any) -> Any:
        """sigma(z) = 1 / (1 + exp(-z))."""
        return self.torch.sigmoid(z)

    def silu(self, z: Any) -> Any:
        """silu(z) = z sigma(z)."""
        return z * self.sigmoid(z)

    def iswiglu(self, z: Any) -> Any:
        """iSwiGLU(z) = z * silu(z) = z^2 sigma(z)."""
        return z * (z * self.sigmoid(z))

    def glu(self, x: Any, P: Mapping[str, Any], prefix: str) -> Any:
        """W3 (silu(W1 x + b1) * (W2 x + b2)) + b3 with weights ``{prefix}gluw{1,2,3}``."""
        h1 = self.linear(x, P[f"{prefix}gluw1.weight"], P.get(f"{prefix}gluw1.bias"))
        h2 = self.linear(x, P[f"{prefix}gluw2.weight"], P.get(f"{prefix}gluw2.bias"))
        return self.linear(self.silu(h1) * h2, P[f"{prefix}gluw3.weight"], P.get(f"{prefix}gluw3.bias"))

    def layer_norm(self, x: Any, gamma: Any, beta: Any, eps: float) -> Any:
        """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance)."""
        return self.torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, eps)

    def a0_norm(self, a0: Any, gamma: Any, beta: Any, eps: float) -> Any:
        """The first LayerNorm of the v500 metric learner, over the last axis of A0 (each row)."""
        return self.layer_norm(a0, gamma, beta, eps)

    def split_heads(self, x: Any, num_heads: int) -> Any:
        """[B, S, H d_k] -> [B, H, S, d_k] (head-major features)."""
        b, s, d = x.shape
        return x.reshape(b, s, num_heads, d // num_heads).transpose(1, 2)

    def merge_heads(self, z: Any) -> Any:
        """[B, H, S, d_k] -> [B, S, H d_k]."""
        b, h, s, dk = z.shape
        return z.transpose(1, 2).reshape(b, s, h * dk)

    # ------------------------------------------------------------------ RoPE
    def rope_table(self, positions: Any, d_k: int, base: float, precision: str) -> tuple[Any, Any]:
        """(cos, sin) of p * base^(-2i/d_k), [S, d_k/2]: float64 (``exact``) or torchtune's float32 table.

        float32: omega and p * omega in float32 as torchtune; cos and sin are the correctly rounded
        float32 values of that angle (what NumPy's float32 cos/sin give, and the golden values use).
        """
        torch = self.torch
        if precision == "float32":
            exps = torch.arange(0, d_k, 2, dtype=torch.float32, device=self.device)[: d_k // 2] / float(d_k)
            omega = 1.0 / torch.pow(torch.tensor(base, dtype=torch.float32, device=self.device), exps)
            phi = positions.to(torch.float32)[..., None] * omega
            # cos/sin of the float32 angle correctly rounded to float32 (torch's float32 cos can be 1 ulp off)
            phi64 = phi.to(torch.float64)
            return torch.cos(phi64).to(torch.float32), torch.sin(phi64).to(torch.float32)
        else:
            exps = torch.arange(0, d_k, 2, dtype=torch.float64, device=self.device) / d_k
            omega = torch.pow(torch.tensor(float(base), dtype=torch.float64, device=self.device), -exps)
            phi = positions.to(torch.float64)[..., None] * omega
        return torch.cos(phi), torch.sin(phi)

    def rope_pairs(self, x: Any, layout: str) -> tuple[Any, Any]:
        """The two halves of every rotated pair: (x_{2i}, x_{2i+1}) interleaved, (x_i, x_{i+d/2}) half."""
        if layout == "interleaved":
            return x[..., 0::2], x[..., 1::2]
        half = x.shape[-1] // 2
        return x[..., :half], x[..., half:]

    def rope_unpairs(self, y1: Any, y2: Any, layout: str) -> Any:
        """Inverse of :meth:`rope_pairs`."""
        if layout == "interleaved":
            return self.torch.stack([y1, y2], dim=-1).flatten(-2)
        return self.torch.cat([y1, y2], dim=-1)

    def rope(self, x: Any, positions: Any, config: Any) -> Any:
        """y_a = x_a cos(phi) - x_b sin(phi), y_b = x_b cos(phi) + x_a sin(phi) for each pair (a, b).

        ``float32`` precision (torchtune): x is rounded to float32 and rotated in float32.
        """
        dt = x.dtype
        cos, sin = self.rope_table(positions, x.shape[-1], config.rope_base, config.rope_precision)
        work = self.torch.float32 if config.rope_precision == "float32" else dt
        xw = x.to(work)
        cos, sin = cos.to(work), sin.to(work)
        x1, x2 = self.rope_pairs(xw, config.rope_layout)
        y1 = x1 * cos - x2 * sin
        y2 = x2 * cos + x1 * sin
        return self.rope_unpairs(y1, y2, config.rope_layout).to(dt)

    def call_positions(self, start_pos: int, num: int) -> Any:
        """Absolute positions of the rows of an uncached call: start_pos .. start_pos + S - 1."""
        return self.torch.arange(start_pos, start_pos + num, device=self.device)

    def cached_positions(self, cache_length: int, num_new: int) -> Any:
        """Absolute positions of the new rows of a cached step: cache_length .. cache_length + S - 1."""
        return self.torch.arange(cache_length, cache_length + num_new, device=self.device)

    # ------------------------------------------------------------------ density operator, metric learner
    def density(self, q_rot: Any) -> Any:
        """A0 = Q~^T Q~ per (batch, head), symmetrised: [B, H, S, d_k] -> [B, H, d_k, d_k]."""
        a0 = self.matmul(q_rot.transpose(-1, -2), q_rot)
        return 0.5 * (a0 + a0.transpose(-1, -2))

    def cumulative_density(self, q_rot: Any) -> Any:
        """A0_i = sum_{s <= i} q~_s q~_s^T: [B, H, S, d_k] -> [B, H, S, d_k, d_k]."""
        return self.torch.cumsum(q_rot[..., :, None] * q_rot[..., None, :], dim=-3)

    def gram_rows(self, q_rot: Any, k_rot: Any) -> Any:
        """The rows the density operator sums: the rotated queries of the current input (not the keys)."""
        return q_rot

    def gram(self, q_rot: Any, config: Any, offset: Any | None = None) -> Any:
        """The Gram of the configured ``gram_mode`` (cumulative: plus the cached running Gram)."""
        if config.gram_mode == "cumulative":
            a0 = self.cumulative_density(q_rot)
            return a0 if offset is None else a0 + offset[:, :, None]
        return self.density(q_rot)

    def residual_unit(self, a: Any, P: Mapping[str, Any], prefix: str, num_dense: int, eps: float) -> Any:
        """A <- LN(GLU_D(... GLU_1(A)) + A) for the unit at ``prefix`` (``...reslayerAs.{r}.``)."""
        h = a
        for j in range(num_dense):
            h = self.glu(h, P, f"{prefix}denseAs.{j}.")
        return self.layer_norm(h + a, P[f"{prefix}layernormA.weight"], P[f"{prefix}layernormA.bias"], eps)

    def metric_learner(self, P: Mapping[str, Any], pre: str, a0: Any, config: Any) -> Any:
        """v500: Res_R(... Res_1(LN(A0))); v900: LN2(Dense(Res_R(... LN1(Dense(A0)))))."""
        c = config
        m = f"{pre}mha1."
        if c.metric_learner == "v500":
            a = self.a0_norm(a0, P[f"{m}layernorm1.weight"], P[f"{m}layernorm1.bias"], c.eps_ln)
        elif c.metric_learner == "v900":
            lifted = self.linear(a0, P[f"{m}A_dff_dense1.weight"], P[f"{m}A_dff_dense1.bias"])
            a = self.layer_norm(lifted, P[f"{m}layernorm1.weight"], P[f"{m}layernorm1.bias"], c.eps_ln)
        else:
            raise Unsupported("metric_learner='none' computes no A")
        for r in range(c.num_reslayerA):
            a = self.residual_unit(a, P, f"{m}reslayerAs.{r}.", c.num_denseA, c.eps_ln)
        if c.metric_learner == "v900":
            dropped = self.linear(a, P[f"{m}A_dff_dense2.weight"], P[f"{m}A_dff_dense2.bias"])
            a = self.layer_norm(dropped, P[f"{m}layernorm2.weight"], P[f"{m}layernorm2.bias"], c.eps_ln)
        return a

    # ------------------------------------------------------------------ PLGA
    def per_head(self, t: Any, like: Any) -> Any:
        """[H, d, d] viewed to broadcast against [B, H, (S,) d, d]."""
        return t.reshape(t.shape[0], *([1] * (like.dim() - 4)), *t.shape[-2:])

    def plga_dtype(self, dt: Any) -> Any:
        """Work dtype of A_LM and A_P: float32 for float16, whose range cannot hold eps_adj = 1e-9 (A_LM would
        underflow to 0 and A_LM^P with P < 0 overflow); the dtype itself otherwise."""
        return self.torch.float32 if dt == self.torch.float16 else dt

    def metric_tensor(self, a: Any, W: Any, b: Any, eps_adj: float) -> Any:
        """A_LM = iSwiGLU(W A + b) + eps_adj (W A: matrix product per head); in :meth:`plga_dtype`."""
        z = self.matmul(self.per_head(W, a), a) + self.per_head(b, a)
        return self.iswiglu(z.to(self.plga_dtype(z.dtype))) + eps_adj

    def potential_tensor(self, a_lm: Any, P: Any) -> Any:
        """A_P = A_LM ** P elementwise; in :meth:`plga_dtype` of the exponent's dtype."""
        work = self.plga_dtype(P.dtype)
        return self.torch.pow(a_lm.to(work), self.per_head(P, a_lm).to(work))

    def energy_curvature(self, a_p: Any, a: Any, b_a: Any) -> Any:
        """G_LM = a A_P + b_a (a A_P: matrix product per head), returned in the parameters' dtype."""
        g = self.matmul(self.per_head(a, a_p).to(a_p.dtype), a_p) + self.per_head(b_a, a_p).to(a_p.dtype)
        return g.to(a.dtype)

    # ------------------------------------------------------------------ attention
    def attention_scores(self, q_rot: Any, g_lm: Any, k_rot: Any) -> Any:
        """Sc = (Q~ G) K~^T / sqrt(d_k); G per head [B|1, H, d, d] or per row [B, H, S, d, d]."""
        # one operator per head, or (cumulative Gram) one per query row
        qg = self.matmul(q_rot[..., None, :], g_lm)[..., 0, :] if g_lm.dim() == 5 else self.matmul(q_rot, g_lm)
        return self.matmul(qg, k_rot.transpose(-1, -2)) / math.sqrt(q_rot.shape[-1])

    def mask_constant(self, config: Any, dt: Any) -> float:
        """The additive mask constant in the compute dtype, clamped to its finite range so that it never
        becomes -inf (float16 cannot hold -1e9): mask_value (``additive``) or finfo(dtype).min (``finfo_min``)."""
        lowest = float(self.torch.finfo(dt).min)
        if config.mask_mode == "finfo_min":
            return lowest
        return max(float(config.mask_value), lowest)

    def apply_mask(self, scores: Any, mask: Any | None, config: Any) -> Any:
        """Masked logits: -inf (``ideal``) or scores + constant (``additive``, ``finfo_min``) where masked."""
        if mask is None:
            return scores
        if config.mask_mode == "ideal":
            return scores.masked_fill(mask, -math.inf)
        return self.torch.where(mask, scores + self.mask_constant(config, scores.dtype), scores)

    def softmax_dtype(self, dt: Any) -> Any:
        """Softmax work dtype: float32 for 16-bit dtypes (HF eager), else the dtype itself."""
        return self.torch.float32 if dt in (self.torch.bfloat16, self.torch.float16) else dt

    def softmax(self, logits: Any) -> Any:
        """Row softmax over the last axis with max subtraction; an all -inf row gives zeros."""
        torch = self.torch
        x = logits.to(self.softmax_dtype(logits.dtype))
        m = torch.amax(x, dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(x - m)
        z = torch.sum(e, dim=-1, keepdim=True)
        out = torch.where(z > 0, e / torch.where(z > 0, z, torch.ones_like(z)), torch.zeros_like(e))
        return out.to(logits.dtype)

    def mix_values(self, e: Any, v: Any) -> Any:
        """Z = E V per head."""
        return self.matmul(e, v)

    def causal_padding_mask(self, query_positions: Any, key_positions: Any, key_padding: Any | None) -> Any:
        """M[b, 0, i, j] = key position > query position, or key j is padding (True = forbidden)."""
        look = key_positions[None, :] > query_positions[:, None]
        mask = look[None, None]
        if key_padding is not None:
            mask = mask | key_padding.bool()[:, None, None, :]
        return mask

    # ------------------------------------------------------------------ layer and model
    def residual(self, y: Any, x: Any) -> Any:
        """The residual sum y + x before a post-norm."""
        return y + x

    def value_rows(self, v: Any, positions: Any, config: Any) -> Any:
        """The values V as projected (no rotation: RoPE acts on queries and keys only)."""
        return v

    def frozen_g(self, g_cache: list[tuple[Any, Any, Any]] | None, layer: int,
                 cached_step: bool) -> tuple[Any, Any, Any] | None:
        """The G-cache entry (A_LM, A_P, G_LM) a call uses for ``layer`` (None without a G cache).

        ``cached_step`` is True for every call after the prompt pass.
        """
        return None if g_cache is None else g_cache[layer]

    def decoder_layer(self, P: Mapping[str, Any], layer: int, x: Any, config: Any, *, positions: Any, mask: Any,
                      past_k: Any = None, past_v: Any = None, frozen_A: Any = None,
                      frozen_G: tuple[Any, Any, Any] | None = None, gram_offset: Any = None) -> dict[str, Any]:
        """Y = MHA_PLGA(X); O1 = LN1(Y + X); O2 = LN2(FFN(O1) + O1), with the cache hooks of the spec §8.

        Returns the trace entries of :data:`LAYER_ENTRIES` (those that exist) as torch tensors.
        """
        c = config
        pre = f"decoder.dec_layers.{layer}."
        m = f"{pre}mha1."
        h = c.num_heads
        q = self.split_heads(self.linear(x, P[f"{m}wq.weight"], P.get(f"{m}wq.bias")), h)
        k = self.split_heads(self.linear(x, P[f"{m}wk.weight"], P.get(f"{m}wk.bias")), h)
        v = self.value_rows(self.split_heads(self.linear(x, P[f"{m}wv.weight"], P.get(f"{m}wv.bias")), h), positions, c)
        q_rot = self.rope(q, positions, c)
        k_rot = k_new = self.rope(k, positions, c)
        if past_k is not None:
            k_rot = self.torch.cat([past_k, k_rot], dim=2)
            v = self.torch.cat([past_v, v], dim=2)
        a0 = a = None
        if frozen_A is not None:
            a = frozen_A
        elif frozen_G is None or c.metric_learner != "none":
            a0 = self.gram(self.gram_rows(q_rot, k_new), c, gram_offset)
            if c.metric_learner != "none":
                a = self.metric_learner(P, pre, a0, c)
        if frozen_G is not None:
            a_lm, a_p, g_lm = frozen_G
        elif c.g_mode == "learned":
            g = f"{m}plgatt_layer."
            a_lm = self.metric_tensor(a, P[f"{g}Wlst"], P[f"{g}blst"], c.eps_adj)
            a_p = self.potential_tensor(a_lm, P[f"{g}pwlst"])
            g_lm = self.energy_curvature(a_p, P[f"{g}alst"], P[f"{g}balst"])
        else:
            a_lm = a_p = None
            fixed = P[FIXED_G_KEY][layer, 2, 0]
            g_lm = fixed.expand(x.shape[0], *fixed.shape).clone()
        scores = self.attention_scores(q_rot, g_lm, k_rot)
        e = self.softmax(self.apply_mask(scores, mask, c))
        ctx = self.merge_heads(self.mix_values(e, v))
        attn_out = self.linear(ctx, P[f"{m}dense.weight"], P.get(f"{m}dense.bias"))
        out1 = self.layer_norm(self.residual(attn_out, x), P[f"{pre}layernorm1.weight"], P[f"{pre}layernorm1.bias"],
                               c.eps_ln)
        ffn_out = self.glu(out1, P, f"{pre}ffn.")
        out2 = self.layer_norm(self.residual(ffn_out, out1), P[f"{pre}layernorm2.weight"], P[f"{pre}layernorm2.bias"],
                               c.eps_ln)
        values = (x, q, k, q_rot, k_rot, v, a0, a, a_lm, a_p, g_lm, scores, e, ctx, attn_out, out1, ffn_out, out2)
        return {n: t for n, t in zip(LAYER_ENTRIES, values, strict=True) if t is not None}

    def embedding_scale(self, config: Any) -> float:
        """sqrt(d): exact, or rounded to float32 (PT-v510 / TF)."""
        if config.embed_scale_precision == "float32":
            return float(self.torch.sqrt(self.torch.tensor(float(config.d_model), dtype=self.torch.float32)))
        return math.sqrt(config.d_model)

    def embed(self, P: Mapping[str, Any], config: Any, ids: Any) -> Any:
        """X0 = E[x] * sqrt(d)."""
        return P["decoder.embedding.weight"][ids] * self.embedding_scale(config)

    def lm_head(self, P: Mapping[str, Any], hidden: Any) -> Any:
        """logits = X W_out^T + b_out."""
        return self.linear(hidden, P["final_layer.weight"], P.get("final_layer.bias"))

    def key_padding(self, ids: Any, config: Any, attention_mask: Any | None, pad_masking: bool) -> Any:
        """Padding keys [B, S]: from the HF attention_mask (1 = keep), else token id pad_id, else none."""
        if attention_mask is not None:
            return self.tensor(attention_mask) == 0
        if pad_masking:
            return ids == config.pad_id
        return self.torch.zeros(ids.shape, dtype=self.torch.bool, device=self.device)

    def forward(self, P: Mapping[str, Any], config: Any, token_ids: np.ndarray, *, start_pos: int = 0,
                attention_mask: np.ndarray | None = None, pad_masking: bool = True) -> dict[str, Any]:
        """Full forward: trace with the golden names (``embed``, ``x0``, ``layers.{l}.*``, ``logits``)."""
        trace, _, _ = self.step(P, config, token_ids, start_pos=start_pos, attention_mask=attention_mask,
                                pad_masking=pad_masking)
        return trace

    def step(self, P: Mapping[str, Any], config: Any, token_ids: np.ndarray, *, kv: dict | None = None,
             g_cache: list | None = None, start_pos: int = 0, attention_mask: np.ndarray | None = None,
             pad_masking: bool = True, cached_mask: str = "none",
             cached_step: bool = False) -> tuple[dict[str, Any], dict, list | None]:
        """A (possibly cached) forward of new tokens; returns (trace, new KV cache, new G cache).

        KV cache: ``{"layers": [{"k_rot", "v", "A", "gram"}], "key_padding": [B, T]}``; G cache: per layer
        (A_LM, A_P, G_LM).  Semantics of :func:`pldr_ref.inference.cached_forward` (spec §8): new rows at
        positions T0.., cached keys prepended, A frozen (global Gram) or the running Gram added
        (cumulative), a G cache replaces PLGA, cached mask None (native) or causal + padding (HF).
        """
        torch = self.torch
        c = config
        ids = self.tensor(np.asarray(token_ids))
        s = ids.shape[1]
        cumulative = c.gram_mode == "cumulative"
        if kv is None:
            positions = self.call_positions(start_pos, s)
        else:
            positions = self.cached_positions(int(kv["layers"][0]["k_rot"].shape[2]), s)
        pad = self.key_padding(ids, c, attention_mask, pad_masking)
        if kv is None:
            mask = self.causal_padding_mask(positions, positions, pad)
        elif cached_mask == "none":
            mask = None
        else:
            t_all = int(kv["layers"][0]["k_rot"].shape[2]) + s
            keys = torch.arange(t_all, device=self.device)
            mask = self.causal_padding_mask(positions, keys, torch.cat([kv["key_padding"], pad], dim=1))
        trace: dict[str, Any] = {}
        x = self.embed(P, c, ids)
        trace["embed"] = x
        x = self.layer_norm(x, P["decoder.layernorm1.weight"], P["decoder.layernorm1.bias"], c.eps_ln)
        trace["x0"] = x
        new_layers = []
        new_g = []
        for i in range(c.num_layers):  # depth is sequential
            lk = None if kv is None else kv["layers"][i]
            t = self.decoder_layer(
                P, i, x, c, positions=positions, mask=mask,
                past_k=None if lk is None else lk["k_rot"], past_v=None if lk is None else lk["v"],
                frozen_A=None if lk is None or cumulative else lk["A"],
                frozen_G=self.frozen_g(g_cache, i, cached_step),
                gram_offset=None if lk is None or not cumulative else lk["gram"],
            )
            trace.update({f"layers.{i}.{n}": v for n, v in t.items()})
            new_layers.append({"k_rot": t["k_rot"], "v": t["v"], "A": None if cumulative else t.get("A"),
                               "gram": t["A0"][:, :, -1] if cumulative else None})
            new_g.append((t.get("A_LM"), t.get("A_P"), t["G_LM"]))
            x = t["out2"]
        trace["logits"] = self.lm_head(P, x)
        all_pad = pad if kv is None else torch.cat([kv["key_padding"], pad], dim=1)
        new_kv = {"layers": new_layers, "key_padding": all_pad}
        out_g = None if cumulative else (g_cache if g_cache is not None else new_g)
        return trace, new_kv, out_g

    # ------------------------------------------------------------------ case runners
    def _run_layer_case(self, params: Params, args: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                        dt: Any) -> dict[str, Any]:
        c = params.config
        P = self.params(params, dt)
        li = int(args["layer"])

        def opt(name: str) -> Any:
            return self.tensor(inputs[name], dt) if name in inputs else None

        frozen = None
        if "frozen_G_LM" in inputs:
            frozen = (opt("frozen_A_LM"), opt("frozen_A_P"), opt("frozen_G_LM"))
        mask = self.tensor(inputs["mask"]).bool() if "mask" in inputs else None
        t = self.decoder_layer(P, li, self.tensor(inputs["x"], dt), c, positions=self.tensor(inputs["positions"]),
                               mask=mask, past_k=opt("past_k"), past_v=opt("past_v"), frozen_A=opt("frozen_A"),
                               frozen_G=frozen, gram_offset=opt("gram_offset"))
        return {f"layers.{li}.{n}": v for n, v in t.items()}

    def decode(self, P: Mapping[str, Any], config: Any, prompt: np.ndarray, chunks: list[np.ndarray], mode: str,
               full_mask: np.ndarray | None = None,
               initial_g: Any = None) -> tuple[dict, list, dict | None, list | None]:
        """Prefill on ``prompt`` then one call per chunk of new tokens in cache ``mode`` (spec §8.1-§8.2).

        Returns (prefill trace, [(step trace, logits of the new rows)], final KV cache, final G cache).
        ``initial_g`` [L, H, d_k, d_k] is a PT-v510 ``Gcachelst_init`` used from the prompt pass on.
        """
        if mode not in GENERATION_MODES:
            raise Unsupported(f"cache mode {mode!r} is not implemented by the torch backend")
        kv_on, g_on, cached_mask, first_g, pad_from_token = GENERATION_MODES[mode]
        t = prompt.shape[1]
        init = None if initial_g is None else [(None, None, initial_g[i][None]) for i in range(config.num_layers)]
        trace, kv, g = self.step(P, config, prompt, g_cache=init, pad_masking=pad_from_token,
                                 attention_mask=None if full_mask is None else full_mask[:, :t])
        prefill_trace = trace
        if init is not None:
            g = init
        elif g_on:
            g = [tuple(None if a is None else a[:1] for a in lg) for lg in g] if first_g else g
        else:
            g = None
        kv = kv if kv_on else None
        ids = prompt
        steps = []
        for chunk in chunks:
            ids = np.concatenate([ids, chunk], axis=1)
            mask = None if full_mask is None else np.asarray(full_mask)[:, : ids.shape[1]]
            if kv_on:
                trace, kv, _ = self.step(P, config, chunk, kv=kv, g_cache=g, cached_mask=cached_mask,
                                         attention_mask=None if mask is None else mask[:, -chunk.shape[1]:],
                                         pad_masking=pad_from_token, cached_step=True)
                logits = trace["logits"]
            else:
                trace, _, _ = self.step(P, config, ids, g_cache=g, attention_mask=mask, pad_masking=pad_from_token,
                                        cached_step=True)
                logits = trace["logits"][:, -chunk.shape[1]:]
            steps.append((trace, logits))
        return prefill_trace, steps, kv, g

    def _run_cached_generation(self, case: Any, args: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                               dt: Any) -> dict[str, Any]:
        """The fixture kind ``cached_generation``: prefill on ``prompt_ids``, then cached steps over ``new_ids``
        in chunks ``args.step_sizes`` in mode ``args.mode``; traces, new logits and the final caches."""
        c = case.params.config
        P = self.params(case.params, dt)
        prompt, new = np.asarray(inputs["prompt_ids"]), np.asarray(inputs["new_ids"])
        bounds = np.cumsum([0, *[int(n) for n in args["step_sizes"]]])
        chunks = [new[:, a:b] for a, b in itertools.pairwise(bounds)]
        init = self.tensor(inputs["initial_G_LM"], dt) if "initial_G_LM" in inputs else None
        prefill, steps, kv, g = self.decode(P, c, prompt, chunks, args["mode"], inputs.get("attention_mask"), init)
        out = {f"prefill.{k}": v for k, v in prefill.items()}
        for j, (trace, logits) in enumerate(steps):
            out.update({f"steps.{j}.{k}": v for k, v in trace.items()})
            out[f"steps.{j}.new_logits"] = logits
        if kv is not None:
            out["kv_cache.key_padding"] = kv["key_padding"]
            for i, lk in enumerate(kv["layers"]):
                out.update({f"kv_cache.layers.{i}.{n}": v for n, v in lk.items() if v is not None})
        if g is not None:
            for i, lg in enumerate(g):
                out.update({f"g_cache.layers.{i}.{n}": v for n, v in zip(("A_LM", "A_P", "G_LM"), lg, strict=True)
                            if v is not None})
        return out

    # ------------------------------------------------------------------ scoring (paper §4.5)
    def log_softmax(self, logits: Any) -> Any:
        """log p over the last axis (float32 work dtype for 16-bit logits)."""
        return self.torch.log_softmax(logits.to(self.softmax_dtype(logits.dtype)), dim=-1)

    def token_nll(self, logits: Any, targets: Any) -> Any:
        """CE = logsumexp(z) - z[y] per row: logits [B, T, V], targets [B, T] -> [B, T]."""
        return -self.torch.gather(self.log_softmax(logits), -1, targets[..., None])[..., 0]

    def final_rows(self, P: Mapping[str, Any], config: Any, ids: np.ndarray, start: int) -> Any:
        """[B, T-start+1, V]: row j is the last row of the forward on ids[:, :start+j] (one call per prefix)."""
        rows = [self.forward(P, config, ids[:, :t])["logits"][:, -1] for t in range(start, ids.shape[1] + 1)]
        return self.torch.stack(rows, dim=1)

    def _scores(self, nll: Any, mask: Any) -> dict[str, Any]:
        total = self.torch.where(mask, nll, self.torch.zeros_like(nll)).sum().reshape(1)
        return {"nll": nll, "mask": mask, "total": total, "mean": total / mask.sum()}

    def _run_scoring(self, kind: str, case: Any, args: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                     dt: Any) -> dict[str, Any]:
        """The five scoring semantics of paper §4.5 (fixture kinds ``scoring_*``)."""
        torch = self.torch
        c = case.params.config
        P = self.params(case.params, dt)
        if kind in ("scoring_blockwise", "scoring_sequential"):
            ids = np.asarray(inputs["token_ids"])
            targets = self.tensor(ids[:, 1:])
            if kind == "scoring_blockwise":
                logits = self.forward(P, c, ids[:, :-1])["logits"]
            else:
                logits = self.final_rows(P, c, ids[:, :-1], 1)
            out = self._scores(self.token_nll(logits, targets), targets != int(args["pad_id"]))
            out["logits"] = logits
            return out
        if kind == "scoring_blockwise_hf":
            ids = np.asarray(inputs["input_ids"])
            logits = self.forward(P, c, ids, attention_mask=inputs.get("attention_mask"), pad_masking=False)["logits"]
            labels = self.tensor(inputs["labels"])[:, 1:]
            keep = labels != HF_IGNORE_INDEX
            nll = self.token_nll(logits[:, :-1], torch.where(keep, labels, torch.zeros_like(labels)))
            return self._scores(torch.where(keep, nll, torch.zeros_like(nll)), keep)
        if kind == "scoring_one_pass":
            ctx = np.asarray(inputs["context"]).reshape(-1)
            n = ctx.size
            one, seq = [], []
            for row, length in zip(inputs["candidates"], inputs["candidate_lengths"], strict=True):
                cand = np.asarray(row[: int(length)])
                ids = np.concatenate([ctx, cand])[None]
                idx = self.tensor(cand)
                lp = self.log_softmax(self.forward(P, c, ids)["logits"][0, n - 1:-1])
                one.append(lp[torch.arange(cand.size, device=self.device), idx].sum())
                lp = self.log_softmax(self.final_rows(P, c, ids[:, :-1], n)[0])
                seq.append(lp[torch.arange(cand.size, device=self.device), idx].sum())
            return {"scores": torch.stack(one), "sequential_scores": torch.stack(seq)}
        if kind == "scoring_prompt_frozen":
            prompt, cont = np.asarray(inputs["prompt_ids"]), np.asarray(inputs["continuation"])
            chunks = [cont[:, j:j + 1] for j in range(cont.shape[1] - 1)]
            prefill, steps, _, _ = self.decode(P, c, prompt, chunks, args["mode"])
            logits = torch.stack([prefill["logits"][:, -1], *[lg[:, -1] for _, lg in steps]], dim=1)
            return {"logprobs": -self.token_nll(logits, self.tensor(cont))}
        raise Unsupported(f"scoring kind {kind!r} is not implemented by the torch backend")

    def _run_op(self, kind: str, params: Params | None, args: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                dt: Any) -> dict[str, Any]:
        """Op-level cases with the input names of :mod:`pldr_ref.fixtures.runners`."""
        def t(name: str) -> Any:
            return self.tensor(inputs[name], dt)

        def opt(name: str) -> Any:
            return t(name) if name in inputs else None

        if kind in ("sigmoid", "silu", "iswiglu"):
            return {"out": getattr(self, kind)(t("z"))}
        if kind == "layer_norm":
            return {"out": self.layer_norm(t("x"), t("gamma"), t("beta"), float(args["eps"]))}
        if kind == "linear":
            return {"out": self.linear(t("x"), t("weight"), opt("bias"))}
        if kind == "glu":
            P = {f"gluw{j}.weight": t(f"w{j}") for j in (1, 2, 3)}
            P.update({f"gluw{j}.bias": opt(f"b{j}") for j in (1, 2, 3) if f"b{j}" in inputs})
            return {"out": self.glu(t("x"), P, "")}
        if kind == "apply_rope":
            cfg = _RopeConfig(args["layout"], args["precision"], float(args["base"]))
            return {"out": self.rope(t("x"), self.tensor(inputs["positions"]), cfg)}
        if kind == "density_operator":
            return {"out": self.density(t("q_rot"))}
        if kind == "cumulative_density_operator":
            return {"out": self.cumulative_density(t("q_rot"))}
        if kind == "metric_tensor":
            return {"out": self.metric_tensor(t("a"), t("W"), t("b"), float(args["eps_adj"]))}
        if kind == "potential_tensor":
            return {"out": self.potential_tensor(t("a_lm"), t("P"))}
        if kind == "energy_curvature":
            return {"out": self.energy_curvature(t("a_p"), t("a"), t("b_a"))}
        if kind == "attention_scores":
            return {"out": self.attention_scores(t("q_rot"), t("g_lm"), t("k_rot"))}
        if kind == "causal_padding_mask":
            pad = self.tensor(inputs["key_padding"]).bool() if "key_padding" in inputs else None
            return {"out": self.causal_padding_mask(self.tensor(inputs["query_positions"]),
                                                    self.tensor(inputs["key_positions"]), pad)}
        if kind == "apply_mask":
            cfg = _MaskConfig(args["mode"], float(args["mask_value"]))
            return {"out": self.apply_mask(t("scores"), self.tensor(inputs["mask"]).bool(), cfg)}
        if kind == "masked_softmax":
            return {"out": self.softmax(t("logits"))}
        if kind == "mix_values":
            return {"out": self.mix_values(t("e"), t("v"))}
        if params is None:
            raise Unsupported(f"op kind {kind!r} needs model parameters")
        c = params.config
        P = self.params(params, dt)
        if kind == "embedding":
            return {"out": self.embed(P, c, self.tensor(inputs["token_ids"]))}
        if kind == "lm_head":
            return {"out": self.lm_head(P, t("hidden"))}
        pre = f"decoder.dec_layers.{int(args['layer'])}."
        if kind == "residual_unit":
            unit = f"{pre}mha1.reslayerAs.{int(args['unit'])}."
            return {"out": self.residual_unit(t("a"), P, unit, c.num_denseA, c.eps_ln)}
        if kind in ("metric_learner_v500", "metric_learner_v900"):
            return {"out": self.metric_learner(P, pre, t("a0"), c.replace(metric_learner=kind[-4:]))}
        if kind == "metric_learner":
            return {"out": self.metric_learner(P, pre, t("a0"), c)}
        raise Unsupported(f"op kind {kind!r} is not implemented by the torch backend")


class _RopeConfig:
    """The three RoPE fields of a config, for op cases that give them as arguments."""

    def __init__(self, layout: str, precision: str, base: float) -> None:
        self.rope_layout, self.rope_precision, self.rope_base = layout, precision, base


class _MaskConfig:
    """The two mask fields of a config, for op cases that give them as arguments."""

    def __init__(self, mode: str, value: float) -> None:
        self.mask_mode, self.mask_value = mode, value
