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
(:meth:`~pldr_ref.backends.torch_backend.TorchBackend.attention`) replaced by the kernel.  In isolation the
kernel also runs the ``attention_scores`` stage (its scores) and the ``masked_softmax`` stage (``SCORES_IN``:
mask and online softmax of given scores); ``value_mix`` in isolation is the torch backend's E V, so a bug in
the kernel's P V shows end to end at ``value_mix``.  A cumulative Gram (one G per query row) falls back to the
unfused torch code.

Precision: float64 and float32 tiles are loaded and multiplied in their dtype (``input_precision="ieee"``:
no TF32); in bfloat16 / float16 Q~, G, K~ and V are loaded in the 16-bit dtype, the dots accumulate in
float32, Q~ G and P are rounded to the 16-bit dtype before the next product (as FlashAttention kernels
round P), the scores and the softmax stay float32 and Z is stored in the 16-bit dtype.

Without a GPU, Triton runs the kernel in its interpreter on the CPU: set ``TRITON_INTERPRET=1`` before
``triton`` is imported (the tests do; slow, keep cases small).  ``pip install "pldr-ref[triton]"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pldr_ref.backends.torch_backend import STAGE_RUNNERS, TorchBackend

#: Query rows per program (16: the smallest tile ``tl.dot`` accepts when compiled).
BLOCK_M = 16

#: Keys per tile when compiled (``tl.dot``'s minimum) and in the interpreter, where a small tile makes the
#: golden cases (at most 16 keys) span several key tiles, so the online-softmax recurrence is exercised.
BLOCK_N_COMPILED = 16
BLOCK_N_INTERPRETED = 4

#: The interpreter's tiles for long rows (more than :data:`LONG_ROW_KEYS` keys): the interpreter pays per tile
#: in Python, so 4-key tiles made a 1024-key case run for over 30 minutes; 64 x 64 tiles still split such a row
#: into at least two key tiles (the online recurrence is exercised) and are GPU-sized.
LONG_ROW_KEYS = 64
BLOCK_LONG_INTERPRETED = 64


def interpreted_blocks(t: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of an interpreted launch over ``t`` keys."""
    if t > LONG_ROW_KEYS:
        return BLOCK_LONG_INTERPRETED, BLOCK_LONG_INTERPRETED
    return BLOCK_M, BLOCK_N_INTERPRETED

#: Fault-injection codes of the kernel's ``FAULT`` constexpr (0 in a correct run; a nonzero code compiles a
#: realistic kernel bug in, for the engine mutants of :mod:`pldr_ref.harness.controls.engine_mutants`).
FAULTS = {"none": 0, "tile_off_by_one": 1, "no_rescale": 2, "mask_ignored": 3, "no_scale": 4, "g_transposed": 5,
          "v_from_k": 6}

#: Stages the kernel fuses: ``attention_scores`` and ``masked_softmax`` are run by the kernel in isolation too
#: (scores only; softmax of given scores); ``value_mix`` in isolation is the torch backend's E V.
FUSED_STAGES = ("attention_scores", "masked_softmax", "value_mix")


try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError('the Triton backend needs triton: `pip install "pldr-ref[triton]"` '
                      "(run with TRITON_INTERPRET=1 on a machine without a GPU)") from exc


@triton.jit
def round_low(x, BF16: tl.constexpr):
    """float32 ``x`` rounded to the 16-bit dtype (nearest, ties to even) and widened back.  bfloat16 by
    integer arithmetic on the bits: Triton's interpreter truncates a float32 -> bfloat16 cast."""
    if BF16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    return x.to(tl.float16).to(tl.float32)


@triton.jit
def plga_attention_kernel(q_ptr, g_ptr, k_ptr, v_ptr, mask_ptr, scores_ptr, e_ptr, ctx_ptr,
                          S, T, D, H, G_BATCH_STRIDE, sqrt_d, mask_const,
                          HAS_MASK: tl.constexpr, IDEAL: tl.constexpr, LOW: tl.constexpr, BF16: tl.constexpr,
                          WRITE_TRACE: tl.constexpr, SCORES_IN: tl.constexpr, FAULT: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Scores, E and Z = softmax(mask((Q~ G) K~^T / sqrt(d))) V for one (batch, head) and BLOCK_M query rows
    (see module docstring); FAULT selects an injected bug (:data:`FAULTS`), 0 for none."""
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
    if FAULT == 5:  # G read with its strides swapped (G^T)
        g = tl.load(g_base + offs_d[None, :] * D + offs_d[:, None], mask=d_ok[:, None] & d_ok[None, :], other=0.0)
    else:
        g = tl.load(g_base + offs_d[:, None] * D + offs_d[None, :], mask=d_ok[:, None] & d_ok[None, :],
                    other=0.0)
    if LOW:  # 16-bit tiles widened exactly: float32 products of 16-bit values, float32 accumulation
        q, g = q.to(tl.float32), g.to(tl.float32)
    qg = tl.dot(q, g, input_precision="ieee")
    if LOW:
        qg = round_low(qg, BF16)  # Q~ G rounded to the 16-bit dtype before the next product
    m_i = tl.full((BLOCK_M,), float("-inf"), q.dtype)
    l_i = tl.zeros((BLOCK_M,), q.dtype)
    acc = tl.zeros((BLOCK_M, BLOCK_D), q.dtype)
    for start_n in range(0, T, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if FAULT == 1:  # fault 1: every key tile starts one key late
            offs_n = offs_n + 1
        col_ok = offs_n < T
        tile = offs_m[:, None] * T + offs_n[None, :]
        ok = row_ok[:, None] & col_ok[None, :]
        if SCORES_IN:  # the masked-softmax stage in isolation: given scores, no Q~ G K~^T
            s = tl.load(scores_ptr + bh * S * T + tile, mask=ok, other=0.0).to(q.dtype)
        else:
            k = tl.load(k_ptr + bh * T * D + offs_n[:, None] * D + offs_d[None, :],
                        mask=col_ok[:, None] & d_ok[None, :], other=0.0).to(q.dtype)
            s = tl.dot(qg, tl.trans(k), input_precision="ieee")
            if FAULT != 4:  # fault 4: no 1/sqrt(d_k)
                s = s / sqrt_d
            if WRITE_TRACE:
                tl.store(scores_ptr + bh * S * T + tile, s.to(scores_ptr.dtype.element_ty), mask=ok)
        if HAS_MASK and FAULT != 3:  # fault 3: the mask is never applied
            mk = tl.load(mask_ptr + b * S * T + tile, mask=ok, other=0) != 0
            if IDEAL:  # noqa: SIM108 - a compile-time branch of the kernel
                s = tl.where(mk, float("-inf"), s)
            else:
                s = tl.where(mk, s + mask_const, s)
        s = tl.where(col_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: keep 0, not NaN
        if FAULT == 2:  # noqa: SIM108 - fault 2: the accumulator and sum are not rescaled when the max grows
            alpha = tl.where(m_i == float("-inf"), 0.0, 1.0)
        else:
            alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v_base = v_ptr
        if FAULT == 6:  # fault 6: V read from K's buffer
            v_base = k_ptr
        v = tl.load(v_base + bh * T * D + offs_n[:, None] * D + offs_d[None, :],
                    mask=col_ok[:, None] & d_ok[None, :], other=0.0).to(q.dtype)
        pv = round_low(p, BF16) if LOW else p  # P rounded to the 16-bit dtype for P V
        acc = acc * alpha[:, None] + tl.dot(pv, v, input_precision="ieee")
        m_i = m_new
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = tl.where(l_i[:, None] > 0, acc / l_safe[:, None], 0.0)
    if LOW:
        out = round_low(out, BF16)  # Z stored in the 16-bit dtype
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
            if HAS_MASK and FAULT != 3:
                mk = tl.load(mask_ptr + b * S * T + tile, mask=ok, other=0) != 0
                if IDEAL:  # noqa: SIM108 - a compile-time branch of the kernel
                    s = tl.where(mk, float("-inf"), s)
                else:
                    s = tl.where(mk, s + mask_const, s)
            s = tl.where(col_ok[None, :], s, float("-inf"))  # keys past T: exp gives 0, never overflows
            e = tl.where(l_i[:, None] > 0, tl.exp(s - m_fin[:, None]) / l_safe[:, None], 0.0)
            tl.store(e_ptr + bh * S * T + tile, e.to(e_ptr.dtype.element_ty), mask=ok)


def _fused_scores(b: TritonAttentionBackend, w: Any, c: Any, extra: Any, q_rot: Any, g_lm: Any,
                  k_rot: Any) -> tuple[Any]:
    """The ``attention_scores`` stage by the kernel (a cumulative Gram's per-row G: the unfused torch code)."""
    if g_lm.dim() == 5:
        return STAGE_RUNNERS["attention_scores"](b, w, c, extra, q_rot, g_lm, k_rot)
    scores, _, _ = b.launch(q_rot, g_lm, k_rot, torch_zeros_like(k_rot), None, c)
    return (scores,)


def _fused_softmax(b: TritonAttentionBackend, w: Any, c: Any, extra: Any, sc: Any) -> tuple[Any]:
    """The ``masked_softmax`` stage by the kernel on given scores (Q~, G, K~ only give shapes)."""
    bb, h, s, t = sc.shape
    shape_q = sc.new_zeros((bb, h, s, 1))
    shape_k = sc.new_zeros((bb, h, t, 1))
    _, e, _ = b.launch(shape_q, sc.new_zeros((1, h, 1, 1)), shape_k, shape_k, extra.mask(), c, scores_in=sc)
    return (e,)


class TritonAttentionBackend(TorchBackend):
    """The torch backend with the fused Triton PLGA attention kernel (see module docstring)."""

    name = "torch+triton-attention"

    #: Fault-injection code passed to the kernel (:data:`FAULTS`); only engine mutants change it.
    fault = "none"

    #: The torch backend's stage table with ``attention_scores`` and ``masked_softmax`` run by the kernel.
    stage_runners: Mapping[str, Any] = {**STAGE_RUNNERS, "attention_scores": _fused_scores,
                                        "masked_softmax": _fused_softmax}

    def __init__(self, device: str | None = None, num_threads: int | None = None) -> None:
        import os

        from pldr_ref.env_vars import read_env

        interpret = os.environ.get("TRITON_INTERPRET") == "1"
        if device is None and not read_env("PLDR_REF_TORCH_DEVICE"):
            device = "cpu" if interpret else "cuda"
        super().__init__(device=device, num_threads=num_threads)
        if self.device.type == "cpu" and not interpret:
            raise ValueError("the Triton kernel runs on a GPU, or on the CPU in Triton's interpreter: set "
                             "TRITON_INTERPRET=1 before starting Python")
        if self.device.type == "cuda" and not self.torch.cuda.is_available():
            raise ValueError("no CUDA device for the compiled Triton kernel; set TRITON_INTERPRET=1 to run it on "
                             "the CPU in Triton's interpreter")
        self.kernel = plga_attention_kernel
        self.interpreted = interpret

    def attention(self, q_rot: Any, g_lm: Any, k_rot: Any, v: Any, mask: Any, config: Any) -> tuple[Any, Any, Any]:
        """(scores, E, Z) from the fused kernel (a cumulative Gram's per-row G: the unfused torch code)."""
        if g_lm.dim() == 5:
            return super().attention(q_rot, g_lm, k_rot, v, mask, config)
        return self.launch(q_rot, g_lm, k_rot, v, mask, config)

    def launch(self, q_rot: Any, g_lm: Any, k_rot: Any, v: Any, mask: Any, config: Any,
               scores_in: Any = None) -> tuple[Any, Any, Any]:
        """Run the kernel; (scores, E, Z) in the compute dtype.  ``scores_in`` [B, H, S, T]: the masked-softmax
        stage alone on given scores (``q_rot``, ``g_lm``, ``k_rot`` then only give shapes)."""
        torch = self.torch
        compute = q_rot.dtype
        low = self._mm is not None and compute == torch.float32
        kdt = self._mm if low else compute  # the dtype the kernel loads Q~, G, K~, V in
        b, h, s, d = q_rot.shape
        t = k_rot.shape[2]
        q, k, vv = (x.to(kdt).contiguous() for x in (q_rot, k_rot, v))
        g = g_lm.to(kdt).contiguous()
        g_batch_stride = 0 if g.shape[0] == 1 else h * d * d
        if scores_in is None:
            scores = torch.zeros((b, h, s, t), dtype=compute, device=q.device)  # float32 in 16-bit runs
        else:
            scores = scores_in.to(kdt).to(compute).contiguous()  # the stored (16-bit) scores
        e = torch.zeros((b, h, s, t), dtype=compute, device=q.device)
        ctx = torch.zeros((b, h, s, d), dtype=compute, device=q.device)
        if mask is not None:
            mask_i8 = mask.expand(b, 1, s, t).to(torch.int8).contiguous()
        else:
            mask_i8 = torch.zeros((1,), dtype=torch.int8, device=q.device)
        ideal = config.mask_mode == "ideal"
        const = 0.0 if ideal else self.mask_constant(config, torch.float32 if low else compute)
        block_d = max(16, 1 << (d - 1).bit_length())
        block_m, block_n = interpreted_blocks(t) if self.interpreted else (BLOCK_M, BLOCK_N_COMPILED)
        grid = (triton_cdiv(s, block_m), b * h)
        self.kernel[grid](q, g, k, vv, mask_i8, scores, e, ctx, s, t, d, h, g_batch_stride, math.sqrt(d), const,
                          HAS_MASK=mask is not None, IDEAL=ideal, LOW=low, BF16=kdt == torch.bfloat16,
                          WRITE_TRACE=True, SCORES_IN=scores_in is not None, FAULT=FAULTS[self.fault],
                          BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d)
        return scores, e, ctx


def torch_zeros_like(t: Any) -> Any:
    """Zeros shaped like ``t`` (the values of a scores-only launch)."""
    return t.new_zeros(t.shape)


def triton_cdiv(a: int, b: int) -> int:
    """ceil(a / b) for the launch grid."""
    return -(-int(a) // int(b))


__all__ = ["BLOCK_M", "FAULTS", "FUSED_STAGES", "TritonAttentionBackend", "plga_attention_kernel", "round_low"]
