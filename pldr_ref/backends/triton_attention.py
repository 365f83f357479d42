"""A fused PLGA attention kernel in Triton, and the torch backend that uses it for the attention core.

:func:`plga_attention_kernel` computes, for one (batch, head) and one block of ``BLOCK_M`` query rows,

    Sc = (Q~ G_LM) K~^T / sqrt(d_k)            (scores with the G_LM metric, eq. 3.7)
    logits = mask(Sc)                           (ideal: -inf; additive: Sc + c where masked)
    Z = softmax(logits) V                       (eq. 3.8-3.9)

walking the keys in tiles of ``BLOCK_N`` with an online softmax: a running row maximum m, a running sum
l and an accumulator rescaled by exp(m_old - m_new) whenever the maximum grows (FlashAttention's
recurrence), so E is never materialized for Z.  For the harness the kernel also writes the scores and,
in a second pass over the key tiles, E = exp(logits - m) / l from the final m and l (``WRITE_TRACE``):
a wrong running-max rescaling spoils l and shows in E as well as in Z.

:class:`TritonAttentionBackend` (``pldr_ref.backends.triton_attention:TritonAttentionBackend``) is the
bundled :class:`~pldr_ref.backends.torch_backend.TorchBackend` with its attention core
(:meth:`~pldr_ref.backends.torch_backend.TorchBackend.attention`) replaced by the kernel.  The three fused
stages (``attention_scores``, ``masked_softmax``, ``value_mix``) are not offered in isolation (the kernel
fuses them), so a kernel bug is localized end to end, to the first of them whose output it spoils.  A
cumulative Gram (one G per query row) falls back to the unfused torch code.

Precision: float64 and float32 tiles are loaded and multiplied in their dtype (``input_precision="ieee"``:
no TF32); in bfloat16 / float16 Q~, G, K~ and V are loaded in the 16-bit dtype, the dots accumulate in
float32, P is rounded to the 16-bit dtype before P V (as FlashAttention kernels do) and the scores and Z
are stored in the 16-bit dtype.

Without a GPU, Triton runs the kernel in its interpreter on the CPU: set ``TRITON_INTERPRET=1`` before
``triton`` is imported (the tests do; slow, keep cases small).  ``pip install "pldr-ref[triton]"``.
"""

from __future__ import annotations

import math
from typing import Any

from pldr_ref.backends.torch_backend import TorchBackend

#: Query rows per program and keys per tile (16: the smallest tile ``tl.dot`` accepts when compiled).
BLOCK_M = 16
BLOCK_N = 16

#: Stages the kernel fuses (not offered in isolation).
FUSED_STAGES = ("attention_scores", "masked_softmax", "value_mix")


def import_triton() -> tuple[Any, Any]:
    """(triton, triton.language) or a clear error naming the extra."""
    try:
        import triton
        import triton.language as tl
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError('the Triton backend needs triton: `pip install "pldr-ref[triton]"` '
                          "(run with TRITON_INTERPRET=1 on a machine without a GPU)") from exc
    return triton, tl


def build_kernel(tile_offset: int = 0, rescale: bool = True) -> Any:
    """The jitted kernel.  ``tile_offset`` (0) and ``rescale`` (True) exist only so that an engine mutant
    (:mod:`pldr_ref.harness.engine_mutants`) can build the kernel with a tile boundary off by one or without
    the running-max rescaling; a correct kernel never changes them."""
    triton, tl = import_triton()

    @triton.jit
    def plga_attention_kernel(q_ptr, g_ptr, k_ptr, v_ptr, mask_ptr, scores_ptr, e_ptr, ctx_ptr,
                              S, T, D, H, G_BATCH_STRIDE, sqrt_d, mask_const,
                              HAS_MASK: tl.constexpr, IDEAL: tl.constexpr, LOW: tl.constexpr,
                              WRITE_TRACE: tl.constexpr, TILE_OFFSET: tl.constexpr, RESCALE: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
        pid_m = tl.program_id(0)
        bh = tl.program_id(1)  # batch * H + head; Q, K, V, E, scores, ctx are contiguous [B, H, rows, cols]
        b = bh // H
        head = bh % H
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        row_ok = offs_m < S
        d_ok = offs_d < D
        q = tl.load(q_ptr + bh * S * D + offs_m[:, None] * D + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :],
                    other=0.0)
        g_base = g_ptr + (b * G_BATCH_STRIDE) + head * D * D
        g = tl.load(g_base + offs_d[:, None] * D + offs_d[None, :], mask=d_ok[:, None] & d_ok[None, :], other=0.0)
        qg = tl.dot(q, g, input_precision="ieee")  # accumulates in float32 (16-bit inputs) or the dtype
        if LOW:
            qg = qg.to(q.dtype)  # Q~ G is stored in the 16-bit dtype before the next product, as unfused code does
        m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32 if LOW else q.dtype)
        l_i = tl.zeros((BLOCK_M,), tl.float32 if LOW else q.dtype)
        acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32 if LOW else q.dtype)
        for start_n in range(0, T, BLOCK_N):
            offs_n = start_n + TILE_OFFSET + tl.arange(0, BLOCK_N)
            col_ok = offs_n < T
            k = tl.load(k_ptr + bh * T * D + offs_n[:, None] * D + offs_d[None, :],
                        mask=col_ok[:, None] & d_ok[None, :], other=0.0)
            s = tl.dot(qg, tl.trans(k), input_precision="ieee") / sqrt_d
            tile = offs_m[:, None] * T + offs_n[None, :]
            ok = row_ok[:, None] & col_ok[None, :]
            if WRITE_TRACE:
                tl.store(scores_ptr + bh * S * T + tile, s.to(scores_ptr.dtype.element_ty), mask=ok)
            if LOW:
                s = s.to(q.dtype).to(tl.float32)  # the scores as stored
            if HAS_MASK:
                mk = tl.load(mask_ptr + b * S * T + tile, mask=ok, other=0) != 0
                if IDEAL:
                    s = tl.where(mk, float("-inf"), s)
                else:
                    s = tl.where(mk, s + mask_const, s)
            s = tl.where(col_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: keep 0, not NaN
            alpha = tl.exp(m_i - m_safe) if RESCALE else tl.where(m_i == float("-inf"), 0.0, 1.0)
            p = tl.exp(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + bh * T * D + offs_n[:, None] * D + offs_d[None, :],
                        mask=col_ok[:, None] & d_ok[None, :], other=0.0)
            pv = p.to(v.dtype) if LOW else p
            acc = acc * alpha[:, None] + tl.dot(pv, v, input_precision="ieee")
            m_i = m_new
        l_safe = tl.where(l_i > 0, l_i, 1.0)
        out = tl.where(l_i[:, None] > 0, acc / l_safe[:, None], 0.0)
        tl.store(ctx_ptr + bh * S * D + offs_m[:, None] * D + offs_d[None, :], out.to(ctx_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & d_ok[None, :])
        if WRITE_TRACE:  # second pass: E from the final running max and sum
            m_fin = tl.where(m_i == float("-inf"), 0.0, m_i)
            for start_n in range(0, T, BLOCK_N):
                offs_n = start_n + tl.arange(0, BLOCK_N)
                col_ok = offs_n < T
                tile = offs_m[:, None] * T + offs_n[None, :]
                ok = row_ok[:, None] & col_ok[None, :]
                s = tl.load(scores_ptr + bh * S * T + tile, mask=ok, other=0.0).to(m_fin.dtype)
                if HAS_MASK:
                    mk = tl.load(mask_ptr + b * S * T + tile, mask=ok, other=0) != 0
                    if IDEAL:
                        s = tl.where(mk, float("-inf"), s)
                    else:
                        s = tl.where(mk, s + mask_const, s)
                e = tl.where(l_i[:, None] > 0, tl.exp(s - m_fin[:, None]) / l_safe[:, None], 0.0)
                tl.store(e_ptr + bh * S * T + tile, e.to(e_ptr.dtype.element_ty), mask=ok)

    return plga_attention_kernel


class TritonAttentionBackend(TorchBackend):
    """The torch backend with the fused Triton PLGA attention kernel (see module docstring)."""

    name = "torch+triton-attention"

    #: Kernel build switches (see :func:`build_kernel`); only engine mutants change them.
    tile_offset = 0
    rescale = True

    def __init__(self, device: str | None = None, num_threads: int | None = None) -> None:
        import os

        if device is None and not os.environ.get("PLDR_REF_TORCH_DEVICE"):
            triton, _ = import_triton()
            interpret = os.environ.get("TRITON_INTERPRET") == "1"
            device = "cpu" if interpret else "cuda"
        super().__init__(device=device, num_threads=num_threads)
        self.kernel = build_kernel(self.tile_offset, self.rescale)

    def capabilities(self) -> Any:
        """The torch backend's, less the three stages the kernel fuses."""
        import dataclasses

        caps = super().capabilities()
        return dataclasses.replace(caps, stages=tuple(s for s in caps.stages if s not in FUSED_STAGES))

    def attention(self, q_rot: Any, g_lm: Any, k_rot: Any, v: Any, mask: Any, config: Any) -> tuple[Any, Any, Any]:
        """(scores, E, Z) from the fused kernel (a cumulative Gram's per-row G: the unfused torch code)."""
        torch = self.torch
        if g_lm.dim() == 5:
            return super().attention(q_rot, g_lm, k_rot, v, mask, config)
        compute = q_rot.dtype
        low = self._mm is not None and compute == torch.float32
        kdt = self._mm if low else compute  # the dtype the kernel loads Q~, G, K~, V in
        b, h, s, d = q_rot.shape
        t = k_rot.shape[2]
        q, k, vv = (x.to(kdt).contiguous() for x in (q_rot, k_rot, v))
        g = g_lm.to(kdt).contiguous()
        g_batch_stride = 0 if g.shape[0] == 1 else h * d * d
        scores = torch.empty((b, h, s, t), dtype=kdt, device=q.device)
        e = torch.empty((b, h, s, t), dtype=compute, device=q.device)
        ctx = torch.empty((b, h, s, d), dtype=kdt, device=q.device)
        if mask is not None:
            mask_i8 = mask.expand(b, 1, s, t).to(torch.int8).contiguous()
        else:
            mask_i8 = torch.zeros((1,), dtype=torch.int8, device=q.device)
        ideal = config.mask_mode == "ideal"
        const = 0.0 if ideal else self.mask_constant(config, torch.float32 if low else compute)
        block_d = max(16, 1 << (d - 1).bit_length())
        grid = (triton_cdiv(s, BLOCK_M), b * h)
        self.kernel[grid](q, g, k, vv, mask_i8, scores, e, ctx, s, t, d, h, g_batch_stride, math.sqrt(d), const,
                          HAS_MASK=mask is not None, IDEAL=ideal, LOW=low, WRITE_TRACE=True,
                          TILE_OFFSET=self.tile_offset, RESCALE=self.rescale, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                          BLOCK_D=block_d)
        return scores.to(compute), e, ctx.to(compute)


def triton_cdiv(a: int, b: int) -> int:
    """ceil(a / b) for the launch grid."""
    return -(-int(a) // int(b))


__all__ = ["BLOCK_M", "BLOCK_N", "FUSED_STAGES", "TritonAttentionBackend", "build_kernel"]
