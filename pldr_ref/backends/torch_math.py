"""The equations of the torch backend (:class:`~pldr_ref.backends.torch_backend.TorchBackend`): building
blocks, RoPE, density operator and metric learner, PLGA and attention, one method per equation so that a
mutant (:mod:`pldr_ref.harness.controls.mutants`) overrides exactly one.  A mixin: ``self.torch``, ``self.device``
and :meth:`~pldr_ref.backends.torch_backend.TorchBackend.matmul` come from the backend class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pldr_ref.harness.protocol import Unsupported


class TorchMath:
    """Building blocks, RoPE, density operator, metric learner, PLGA, attention (see module docstring)."""

    torch: Any
    device: Any

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
