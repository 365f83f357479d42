"""An independent PyTorch PLDR-LLM written in the style of the released v510 code, for the adapter tests (issue 31).

Written here from the equations of ``docs/equations.md`` (spec §2), not copied from any released code base: it
only shares the *style* of the authors' PyTorch v510 model, which is what makes such a model hard to validate --

* its own module names (``tok``, ``in_norm``, ``blocks.{l}.attn.q_lin`` ...), so golden parameter names must be
  mapped onto it;
* queries, keys and values in the ``[B, S, H, d_k]`` layout, a torchtune-style rotary module with a float32
  cos/sin table buffer that rotates in float32;
* the PLGA chain computed inline in one method: ``torch.pow``, the curvature ``a @ A_P + b_a``, the scaled scores
  and ``F.softmax`` are plain function calls, not modules (only a pow/softmax recorder sees them);
* the float32 additive mask ``scores + mask * -1e9`` (``mask`` float, 1 = masked, ``[B, 1, S, T]``);
* ``sqrt(d)`` and ``sqrt(d_k)`` as float32 constants.

``StyleLM(config)`` builds the model for a :class:`pldr_ref.PLDRConfig` (v500 metric learner, learned G, global
Gram: the released architecture); ``model(ids, mask, start_pos=0)`` returns the logits.  :class:`StyleForCausalLM`
puts an HF-style front on it (``input_ids``, ``attention_mask``, ``position_ids``; ``.logits``).  :data:`BUGS` holds the
injected bugs of the tests: each a flag read by exactly one line of the forward map.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the released code's spelling
from torch import nn

#: The injected bugs (``StyleLM(config, bug=NAME)``) and the stage each one spoils.
BUGS = {
    "softmax_axis": "masked_softmax",        # softmax over the query axis instead of the key axis
    "dropped_power": "potential_tensor",     # A_P = A_LM^1 (the learned power P forgotten)
    "shifted_mask": "masked_softmax",        # the mask shifted by one key
    "transposed_curvature_bias": "energy_curvature",  # G_LM = a A_P + b_a^T
    "rope_positions": "rope",                # rotary positions start at 1
}

#: The additive mask value of the released code.
MASK_VALUE = -1e9


class StyleRotary(nn.Module):
    """torchtune-style RoPE on ``[B, S, H, d_k]``: interleaved pairs, a float32 cos/sin table buffer
    ``[max_seq_len, d_k/2, 2]``, the rotation in float32 and the result cast back to the input's dtype."""

    def __init__(self, d_k: int, max_seq_len: int, base: float, shift: int = 0) -> None:
        super().__init__()
        theta = 1.0 / (base ** (torch.arange(0, d_k, 2, dtype=torch.float32)[: d_k // 2] / d_k))
        angles = torch.outer(torch.arange(max_seq_len + 1, dtype=torch.float32), theta)
        self.register_buffer("table", torch.stack([angles.cos(), angles.sin()], dim=-1), persistent=False)
        self.shift = shift

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        s = x.shape[1]
        rows = self.table[start_pos + self.shift: start_pos + self.shift + s].float()  # [S, d_k/2, 2]
        pairs = x.float().reshape(*x.shape[:-1], -1, 2)  # [B, S, H, d_k/2, 2]
        cos, sin = rows[None, :, None, :, 0], rows[None, :, None, :, 1]
        out = torch.stack([pairs[..., 0] * cos - pairs[..., 1] * sin, pairs[..., 1] * cos + pairs[..., 0] * sin], -1)
        return out.flatten(3).type_as(x)


class StyleGLU(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(d_in, hidden), nn.Linear(d_in, hidden), nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class StyleResUnit(nn.Module):
    """One residual unit of the metric learner: ``LN(GLU_D(...GLU_1(A)) + A)`` on ``d_k``-wide rows."""

    def __init__(self, d_k: int, hidden: int, depth: int) -> None:
        super().__init__()
        self.glus = nn.ModuleList(StyleGLU(d_k, hidden, d_k) for _ in range(depth))
        self.norm = nn.LayerNorm(d_k, eps=1e-6)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        y = a
        for glu in self.glus:
            y = glu(y)
        return self.norm(y + a)


class StyleAdjacency(nn.Module):
    """``iSwiGLU(z) + eps_adj`` with ``iSwiGLU(z) = z * silu(z)``: the metric tensor's activation."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z * F.silu(z) + 1e-9


class StylePLGA(nn.Module):
    """Power law graph attention with its PLGA parameters ``W, b, P, a, b_a`` ``[H, d_k, d_k]``; the chain after
    the metric tensor is inline (see the module docstring)."""

    def __init__(self, heads: int, d_k: int, bug: str | None) -> None:
        super().__init__()
        for name in ("W", "b", "P", "a", "ba"):
            self.register_parameter(name, nn.Parameter(torch.empty(heads, d_k, d_k)))
            nn.init.normal_(getattr(self, name), std=0.1)
        self.adj = StyleAdjacency()
        self.d_k, self.bug = d_k, bug

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        a_lm = self.adj(torch.matmul(self.W, a) + self.b)
        a_p = torch.pow(a_lm, torch.ones_like(self.P) if self.bug == "dropped_power" else self.P)
        ba = self.ba.transpose(-1, -2) if self.bug == "transposed_curvature_bias" else self.ba
        g_lm = torch.matmul(self.a, a_p) + ba
        scores = torch.matmul(torch.matmul(q, g_lm), k.transpose(-1, -2)) / torch.sqrt(
            torch.tensor(self.d_k, dtype=torch.float32))
        if mask is not None:
            if self.bug == "shifted_mask":
                mask = torch.roll(mask, 1, dims=-1)
            scores = scores + mask * MASK_VALUE
        e = F.softmax(scores, dim=-2 if self.bug == "softmax_axis" else -1)
        return torch.matmul(e, v)


class StyleAttention(nn.Module):
    """Q, K, V projections, RoPE, the density operator and metric learner, PLGA, the output projection."""

    def __init__(self, config: Any, bug: str | None) -> None:
        super().__init__()
        d, h, dk = config.d_model, config.num_heads, config.d_k
        self.q_lin, self.k_lin, self.v_lin, self.out_lin = (nn.Linear(d, d) for _ in range(4))
        self.rotary = StyleRotary(dk, config.max_seq_len, config.rope_base, shift=int(bug == "rope_positions"))
        self.a_norm = nn.LayerNorm(dk, eps=1e-6)
        self.a_units = nn.ModuleList(StyleResUnit(dk, config.A_dff, config.num_denseA)
                                     for _ in range(config.num_reslayerA))
        self.plga = StylePLGA(h, dk, bug)
        self.heads, self.d_k = h, dk

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, start_pos: int) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_lin(x).view(b, s, self.heads, self.d_k)
        k = self.k_lin(x).view(b, s, self.heads, self.d_k)
        v = self.v_lin(x).view(b, s, self.heads, self.d_k)
        q = self.rotary(q, start_pos).permute(0, 2, 1, 3)
        k = self.rotary(k, start_pos).permute(0, 2, 1, 3)
        a = self.a_norm(torch.matmul(q.transpose(-1, -2), q))  # density operator A0 = Q~^T Q~, then LN
        for unit in self.a_units:
            a = unit(a)
        z = self.plga(q, k, v.permute(0, 2, 1, 3), a, mask)
        return self.out_lin(z.permute(0, 2, 1, 3).reshape(b, s, -1))


class StyleBlock(nn.Module):
    """Post-norm decoder layer: ``O1 = LN(attn(X) + X)``, ``O2 = LN(GLU(O1) + O1)``."""

    def __init__(self, config: Any, bug: str | None) -> None:
        super().__init__()
        self.attn = StyleAttention(config, bug)
        self.norm_a = nn.LayerNorm(config.d_model, eps=1e-6)
        self.mlp = StyleGLU(config.d_model, config.dff, config.d_model)
        self.norm_b = nn.LayerNorm(config.d_model, eps=1e-6)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, start_pos: int = 0) -> torch.Tensor:
        out1 = self.norm_a(self.attn(x, mask, start_pos) + x)
        return self.norm_b(self.mlp(out1) + out1)


class StyleLM(nn.Module):
    """The whole model: embedding times float32 sqrt(d), input LayerNorm, the blocks, the LM head."""

    def __init__(self, config: Any, bug: str | None = None) -> None:
        super().__init__()
        if bug is not None and bug not in BUGS:
            raise ValueError(f"unknown bug {bug!r}; known: {sorted(BUGS)}")
        self.tok = nn.Embedding(config.vocab_size, config.d_model)
        self.in_norm = nn.LayerNorm(config.d_model, eps=1e-6)
        self.blocks = nn.ModuleList(StyleBlock(config, bug) for _ in range(config.num_layers))
        self.head = nn.Linear(config.d_model, config.vocab_size)
        self.d_model = config.d_model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None, start_pos: int = 0) -> torch.Tensor:
        x = self.tok(ids)
        x = x * torch.sqrt(torch.tensor(self.d_model, dtype=torch.float32))
        x = self.in_norm(x)
        for block in self.blocks:
            x = block(x, mask, start_pos)
        return self.head(x)


class StyleOutput:
    """What the HF-style front returns: an object with ``logits``."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits


class StyleForCausalLM(nn.Module):
    """An HF-style front on :class:`StyleLM` (under ``model.``): ``forward(input_ids, attention_mask=None,
    position_ids=None)`` with the HF attention mask ``[B, S]`` (1 = keep) and contiguous per-call positions; builds
    the released-style float mask itself and returns a :class:`StyleOutput`."""

    def __init__(self, config: Any, bug: str | None = None) -> None:
        super().__init__()
        self.model = StyleLM(config, bug)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> StyleOutput:
        s = input_ids.shape[1]
        mask = (1.0 - torch.tril(torch.ones(s, s)))[None, None].expand(input_ids.shape[0], 1, s, s)
        if attention_mask is not None:
            mask = torch.maximum(mask, (attention_mask == 0).float()[:, None, None, :])
        start = 0 if position_ids is None else int(position_ids[0, 0])
        return StyleOutput(self.model(input_ids, mask, start))


def float_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """The released code's mask: float32 ``[B, 1, S, S]``, 1 where a key is in the future or padding."""
    s = ids.shape[1]
    ahead = 1.0 - torch.tril(torch.ones(s, s))
    pad = (ids == pad_id).float()[:, None, None, :]
    return torch.maximum(ahead, pad)


__all__ = ["BUGS", "MASK_VALUE", "StyleForCausalLM", "StyleLM", "StyleOutput", "float_mask"]
