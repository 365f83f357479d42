"""Scores, masks, masked softmax and value mixing (spec §2.4 steps 8-10, §7; paper eqs. 3.7-3.9)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.constants import EXP_ZERO_BELOW, FINFO_MIN_F64, MASK_VALUE
from pldr_ref.row_blocks import for_each_block, row_slices
from pldr_ref.stage_hooks import StageHook, split_hook
from pldr_ref.switches import switch

if TYPE_CHECKING:
    from pldr_ref.ops import Ops

# The values this float64 engine implements, from the switch table (pldr_ref.switches).
MASK_MODES = switch("mask_mode").implemented_by("float64")
MASK_ADD_DTYPES = switch("mask_add_dtype").implemented_by("float64")
SOFTMAX_PRECISIONS = switch("softmax_precision").implemented_by("float64")
MASKED_ROWS = switch("masked_row").implemented_by("float64")


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """[B, S, H*d_k] -> [B, H, S, d_k] (feature f = h*d_k + j, head-major)."""
    b, s, d = x.shape
    return x.reshape(b, s, num_heads, d // num_heads).transpose(0, 2, 1, 3)


def merge_heads(z: np.ndarray) -> np.ndarray:
    """[B, H, S, d_k] -> [B, S, H*d_k]."""
    b, h, s, dk = z.shape
    return z.transpose(0, 2, 1, 3).reshape(b, s, h * dk)


#: Score-scale precisions (``PLDRConfig.score_scale``).
SCORE_SCALES = switch("score_scale").implemented_by("float64")


def score_scale_divisor(d_k: int, scale: str = "exact") -> tuple[str, float]:
    """How Sc is scaled: ("divide", sqrt(d_k)) in float64 (``exact``), ("divide", f32 sqrt(f32 d_k))
    (``float32``: PT-v510 ``Ep / torch.sqrt(dk.to(float32))``, TF ``Ep / tf.math.sqrt(f32 dk)``), or
    ("multiply", RN64(1 / RN64(sqrt(d_k)))) (``reciprocal``: HF ``scaling = 1 / torch.sqrt(dk)``)."""
    if scale == "exact":
        return "divide", float(np.sqrt(np.float64(d_k)))
    if scale == "float32":
        return "divide", float(np.sqrt(np.float32(d_k)))  # IEEE sqrt: correctly rounded in float32
    if scale == "reciprocal":
        return "multiply", float(1.0 / np.sqrt(np.float64(d_k)))
    raise switch("score_scale").error(scale, allowed=SCORE_SCALES)


def attention_scores(
    q_rot: np.ndarray, g_lm: np.ndarray, k_rot: np.ndarray, scale: str = "exact", *, out: np.ndarray | None = None
) -> np.ndarray:
    """Sc = (Q~ G_LM) K~^T / sqrt(d_k) (paper eq. 3.7); Q~ G is formed first.

    q_rot: [B, H, S, d_k]; k_rot: [B, H, T, d_k]; g_lm: [B or 1, H, d_k, d_k] (one operator
    per head) or [B, H, S, d_k, d_k] (cumulative Gram: one operator per query row).
    Returns [B, H, S, T], in ``out`` when given (float64, that shape).  G_LM = I gives scaled dot-product
    attention (Theorem 5.4(i)).  ``scale`` says how 1/sqrt(d_k) is applied (:func:`score_scale_divisor`).
    """
    d_k = q_rot.shape[-1]
    # one operator per head, or (cumulative Gram) one per query row
    qg = np.matmul(q_rot[..., None, :], g_lm)[..., 0, :] if g_lm.ndim == 5 else np.matmul(q_rot, g_lm)
    op, root = score_scale_divisor(d_k, scale)
    k_t = np.swapaxes(k_rot, -1, -2)
    if op == "multiply":
        sc = np.matmul(qg, k_t, out=out)
        sc *= root
        return sc
    if math.frexp(root)[0] == 0.5:
        # sqrt(d_k) = 2^n (d_k = 64 in every release): scaling Q~G by 2^-n before the product is exact and
        # bit-identical to dividing the [S, T] product afterwards (barring subnormals), one pass cheaper
        qg = qg / root
        return np.matmul(qg, k_t, out=out)
    sc = np.matmul(qg, k_t, out=out)
    sc /= root  # in place on the fresh product (same rounding as a division into a new array)
    return sc


def causal_padding_mask(
    query_positions: np.ndarray, key_positions: np.ndarray, key_padding: np.ndarray | None
) -> np.ndarray:
    """M[b, 0, i, j] = look(i, j) or pad(b, j), True where attention is forbidden (spec §7.1).

    look(i, j) = key position > query position; pad(b, j) from ``key_padding`` [B, T]
    (True for a padding key) or None.  Query rows of pad tokens are not masked.
    Returns bool [B or 1, 1, S, T].
    """
    look = np.asarray(key_positions)[None, :] > np.asarray(query_positions)[:, None]
    mask = look[None, None]
    if key_padding is not None:
        mask = mask | np.asarray(key_padding, dtype=bool)[:, None, None, :]
    return mask


def apply_mask(
    scores: np.ndarray,
    mask: np.ndarray | None,
    mode: str,
    mask_value: float = MASK_VALUE,
    add_dtype: str = "float64",
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Masked logits: ``ideal`` -> -inf where masked; ``additive`` -> scores + mask_value * M;
    ``finfo_min`` -> scores + finfo(float64).min where masked (HF eager).

    ``add_dtype="float32"`` (``additive`` only; TF and PT float32 training, ``E = Ep + mask * -1e9`` in
    float32): a masked logit is RN32(RN32(Sc) + RN32(mask_value)), so it is exactly -1e9 whenever
    |Sc| < 32 (half an ulp of 1e9 in float32) and a multiple of 64 otherwise; allowed logits are unchanged.
    ``out`` (float64, the broadcast shape of scores and mask) receives the logits; without it, ``mask=None``
    returns ``scores`` itself and every other call a new array.
    """
    switch("mask_add_dtype").check(add_dtype, allowed=MASK_ADD_DTYPES)
    switch("mask_mode").check(mode, allowed=MASK_MODES)
    if add_dtype == "float32" and mode != "additive":
        raise ValueError(f"mask_add_dtype='float32' needs mask_mode='additive', got {mode!r}")
    if mask is None:
        if out is None:
            return scores
        np.copyto(out, scores)
        return out
    mask = np.asarray(mask).astype(bool, copy=False)  # True = forbidden; 0/1 integer masks mean the same
    if out is None:
        out = np.empty(np.broadcast_shapes(np.shape(scores), np.shape(mask)), dtype=np.float64)
    if mode == "additive" and add_dtype == "float64":
        return np.add(scores, mask_value * mask.astype(np.float64), out=out)
    if mode == "finfo_min":
        return np.add(scores, np.where(mask, FINFO_MIN_F64, 0.0), out=out)
    # ideal, or additive in float32: allowed logits are the scores, masked ones a constant or their float32 sum
    fill = -np.inf if mode == "ideal" else (scores.astype(np.float32) + np.float32(mask_value)).astype(np.float64)
    np.copyto(out, scores)
    np.copyto(out, fill, where=mask)
    return out


def masked_softmax(logits: np.ndarray, *, overwrite_input: bool = False) -> np.ndarray:
    """Row softmax over the last axis with max subtraction (paper eq. 3.8; Lean ``Softmax``).

    E_ij = exp(l_ij - m_i) / sum_j exp(l_ij - m_i) with m_i = max_j l_ij.
    -inf entries get exactly 0.  A row that is entirely -inf (every key masked in
    ``ideal`` mode) is defined as all zeros, the FlashAttention convention, instead of NaN;
    a NaN logit makes its whole row NaN.
    ``overwrite_input=True`` lets the function reuse the float64 ``logits`` buffer for the
    result (the values are identical; it only saves one [B, H, S, T] allocation).
    """
    logits = np.asarray(logits, dtype=np.float64)
    m = np.max(logits, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.subtract(logits, m, out=logits if overwrite_input else None)
    # exp(e) is exactly 0.0 for e <= EXP_ZERO_BELOW (masked keys: -inf or ~ -1e9), where NumPy's SIMD exp is
    # slow: those entries are set to 0.0 and the rest, NaN included (NaN <= x is False), go through exp.
    # Bit-identical to np.exp(e) everywhere.
    zero = np.less_equal(e, EXP_ZERO_BELOW)
    np.exp(e, out=e, where=~zero)
    np.copyto(e, 0.0, where=zero)
    z = np.sum(e, axis=-1, keepdims=True)
    # z == 0 only when every exp in the row is 0 (fully masked): dividing by 1 leaves that row at zeros;
    # a NaN anywhere in the row makes z NaN and the whole row NaN (never a silent zero row)
    np.divide(e, np.where(z == 0, 1.0, z), out=e)
    return e


def softmax_float32(logits: np.ndarray) -> np.ndarray:
    """The correctly rounded float32 softmax of RN32(logits), widened to float64 [..., T].

    l32 = RN32(l) (so finfo(float64).min and -1e300 become -inf), m = max_j l32, then
    E = RN32(exp(l32 - m) / sum_j exp(l32 - m)) with the inner arithmetic in float64 (one final rounding to
    float32).  A row of -inf gives NaN (-inf - -inf), as torch's softmax does; a NaN makes its row NaN.
    torch's float32 kernel (HF eager ``F.softmax(l, dim=-1, dtype=float32)``) is not correctly rounded: on
    1000 x 9 logits it differs in about 77 % of the entries, by up to 18 float32 ulps (``docs/equations.md``);
    to reproduce it, pass it as a :class:`SoftmaxKernel` with ``softmax_precision="explicit"``.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        l32 = np.asarray(logits, dtype=np.float64).astype(np.float32).astype(np.float64)
        m = np.max(l32, axis=-1, keepdims=True)
        e = np.exp(l32 - m)
        out = e / np.sum(e, axis=-1, keepdims=True)
    return out.astype(np.float32).astype(np.float64)


class SoftmaxKernel:
    """An explicit float32 softmax kernel given by the user, used with ``softmax_precision="explicit"`` (as
    :class:`pldr_ref.rope.RopeTable` is for RoPE): replays a framework's float32 softmax bit for bit.

    ``fn`` maps float32 logits [..., T] (RN32 of the float64 logits: finfo(float64).min becomes -inf, as a cast
    to float32 does) to float32 weights of the same shape, softmax over the last axis, row by row (it is called
    on blocks of query rows, possibly from several threads).  For HF eager::

        SoftmaxKernel(lambda l32: torch.softmax(torch.from_numpy(l32), dim=-1).numpy(), name="torch")

    (``F.softmax(x, dim=-1, dtype=torch.float32)`` casts x to float32 first, so it gets the same input).
    The result is checked: same shape, dtype float32, else ``ValueError``.  NaN rows are passed through.
    """

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray], name: str = "user") -> None:
        if not callable(fn):
            raise TypeError(f"SoftmaxKernel needs a callable float32 logits -> float32 weights, got "
                            f"{type(fn).__name__}")
        self.fn = fn
        self.name = str(name)

    def __repr__(self) -> str:
        return f"SoftmaxKernel({self.name!r})"

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        """E = fn(RN32(logits)) widened to float64 [..., T]."""
        with np.errstate(over="ignore"):
            l32 = np.ascontiguousarray(np.asarray(logits, dtype=np.float64).astype(np.float32))
        out = np.asarray(self.fn(l32))
        if out.shape != l32.shape or out.dtype != np.float32:
            raise ValueError(f"SoftmaxKernel {self.name!r} must return float32 weights of shape {l32.shape}, got "
                             f"{out.dtype} {out.shape}")
        return out.astype(np.float64)


def check_kernel_used(precision: str, kernel: SoftmaxKernel | None) -> None:
    """Refuse a :class:`SoftmaxKernel` given while ``precision`` (PLDRConfig.softmax_precision) is not
    ``"explicit"`` (it would be silently ignored), and ``"explicit"`` without one."""
    if kernel is not None and precision != "explicit":
        raise ValueError(f"a SoftmaxKernel was given but softmax_precision={precision!r}: the kernel would be "
                         "ignored; set softmax_precision='explicit' to use it, or do not pass it")
    if kernel is None and precision == "explicit":
        raise ValueError("softmax_precision='explicit' needs a SoftmaxKernel (argument softmax_kernel=...)")
    if kernel is not None and not isinstance(kernel, SoftmaxKernel):
        raise TypeError(f"softmax_kernel must be a pldr_ref.attention.SoftmaxKernel, got {type(kernel).__name__}")


def attention_weights(
    logits: np.ndarray,
    mask: np.ndarray | None,
    *,
    precision: str = "float64",
    masked_row: str = "arithmetic",
    overwrite_input: bool = False,
    kernel: SoftmaxKernel | None = None,
) -> np.ndarray:
    """E = softmax(logits) in ``precision`` (``float64``: :func:`masked_softmax`; ``float32``:
    :func:`softmax_float32`; ``explicit``: the user's float32 ``kernel``), then rows whose every key is masked
    (``mask`` [B|1, 1, S, T], True = forbidden) set as ``masked_row`` says: ``arithmetic`` leaves what the
    arithmetic gave; ``zeros``, ``uniform`` (1/T) or ``nan`` override them.  Returns [B, H, S, T]."""
    switch("softmax_precision").check(precision, allowed=SOFTMAX_PRECISIONS)
    switch("masked_row").check(masked_row, allowed=MASKED_ROWS)
    check_kernel_used(precision, kernel)
    if precision == "explicit":
        e = kernel(logits)
    elif precision == "float32":
        e = softmax_float32(logits)
    else:
        e = masked_softmax(logits, overwrite_input=overwrite_input)
    if masked_row == "arithmetic" or mask is None:
        return e
    dead = np.all(mask, axis=-1, keepdims=True)  # [B|1, 1, S, 1]
    if not dead.any():
        return e
    fill = {"zeros": 0.0, "uniform": 1.0 / e.shape[-1], "nan": np.nan}[masked_row]
    return np.where(dead, fill, e)


def _identity(name: str, a: np.ndarray) -> np.ndarray:
    return a


def masked_attention_weights(
    scores: np.ndarray,
    mask: np.ndarray | None,
    *,
    mask_mode: str,
    mask_value: float = MASK_VALUE,
    mask_add_dtype: str = "float64",
    precision: str = "float64",
    masked_row: str = "arithmetic",
    on_stage: StageHook | None = None,
    in_place: bool = False,
    softmax_kernel: SoftmaxKernel | None = None,
    ops: Ops | None = None,
) -> np.ndarray:
    """E = attention_weights(apply_mask(Sc, M)) (paper eqs. 3.7-3.8), evaluated on blocks of query rows.

    ``softmax_kernel``: the kernel of ``precision="explicit"`` (:class:`SoftmaxKernel`; refused otherwise).
    ``ops``: the arithmetic of the softmax, ``ops.attention_weights`` (:class:`pldr_ref.ops.Ops`; None: this module's
    :func:`attention_weights`), handed to the worker threads with the blocks.

    scores: [B, H, S, T]; mask: [B|1, 1, S|1, T] bool or None.  The math is that of :func:`apply_mask` and
    :func:`attention_weights`, applied to one block of query rows at a time on the threads of
    :mod:`pldr_ref.row_blocks`, so that the softmax's passes run from cache and on every free core.  Both are
    row-wise, so E is bit-identical to the unblocked composition.

    ``on_stage`` (:mod:`pldr_ref.stage_hooks`): its value-changing part (a naive low-precision run's rounding) is
    applied to each block's masked logits (``"masked_logits"``) and E (``"E"``), so it must be elementwise; its
    ``finite_only`` part (the finiteness check) is called, from the calling thread, as ``("scores", ...)`` and then
    ``("E", E)`` only when the sum of some block of that array, taken while the block is in cache, is not finite; a
    finite sum proves every entry finite (NaN and inf propagate through addition), so a finite array is never
    re-read.  It gets the whole scores, or in place (where E overwrites them) a copy of every block of rows whose
    scores were not finite, taken before the overwrite, so counts of NaN and inf are those of the scores.

    ``in_place=False`` leaves the scores untouched and returns a new E; ``in_place=True`` writes E over the
    scores (float64, C-contiguous) and returns them: no [B, H, S, T] allocation, half the memory traffic.

    Bit-identical means: to the composition on C-contiguous scores (the layout every caller here produces; on
    another layout NumPy's row sums may add in another order).  The hook must return float64 arrays.
    """
    if scores.ndim != 4:
        raise ValueError(f"scores must be [B, H, S, T], got shape {scores.shape}")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.ndim > 4:
            raise ValueError(f"mask must broadcast against [B, H, S, T], got shape {mask.shape}")
        mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)  # NumPy broadcasting prepends the missing axes
    check_kernel_used(precision, softmax_kernel)
    if in_place and (scores.dtype != np.float64 or not scores.flags.c_contiguous or not scores.flags.writeable):
        raise ValueError("in_place=True needs writable, C-contiguous float64 scores")
    transform, check = split_hook(on_stage)
    r = transform if transform is not None else _identity
    weights_of = attention_weights if ops is None else ops.attention_weights
    b, h, s, t = scores.shape
    e = scores if in_place else np.empty(scores.shape, dtype=np.float64)
    per_row_mask = mask is not None and mask.shape[2] == s and s > 1
    blocks = row_slices(s, b * h * t * scores.itemsize)
    finite = np.ones((len(blocks), 2), dtype=bool)  # per block: sum of scores, sum of E finite
    bad_scores: dict[int, np.ndarray] = {}  # in place: the non-finite blocks of scores, before E overwrites them

    def block(i: int) -> None:
        rows = blocks[i]
        m = mask[:, :, rows] if per_row_mask else mask
        sc, out = scores[:, :, rows], e[:, :, rows]
        if check is not None and not np.isfinite(np.sum(sc)):
            finite[i, 0] = False
            if in_place:
                bad_scores[i] = sc.copy()
        # the logits go straight into E's rows, and the softmax runs there in place (rounding may copy)
        logits = r("masked_logits", apply_mask(sc, m, mask_mode, mask_value, mask_add_dtype, out=out))
        weights = r("E", weights_of(logits, m, precision=precision, masked_row=masked_row,
                                    overwrite_input=True, kernel=softmax_kernel))
        if weights is not out:
            out[...] = weights
        if check is not None:
            finite[i, 1] = np.isfinite(np.sum(out))

    for_each_block(block, range(len(blocks)), scores.nbytes)
    if check is not None:
        if not finite[:, 0].all():
            check("scores", np.concatenate([bad_scores[i] for i in sorted(bad_scores)], axis=2) if in_place
                  else scores)
        if not finite[:, 1].all():
            check("E", e)
    return e


def configured_attention_weights(scores: np.ndarray, mask: np.ndarray | None, config: PLDRConfig, *,
                                 on_stage: StageHook | None = None, in_place: bool = False,
                                 softmax_kernel: SoftmaxKernel | None = None, ops: Ops | None = None) -> np.ndarray:
    """E = softmax_j(Sc + mask) with every mask and softmax option ``config`` sets (``mask_mode``, ``mask_value``,
    ``mask_add_dtype``, ``softmax_precision``, ``masked_row``): :func:`masked_attention_weights` in the arithmetic
    ``ops`` (None: float64), [B, H, S, T].

    The one place that maps a config to the attention weights' options, so a switch of the mask or the softmax
    is read here and nowhere else (``docs/adding_a_switch.md``)."""
    c = config
    return masked_attention_weights(scores, mask, mask_mode=c.mask_mode, mask_value=c.mask_value,
                                    mask_add_dtype=c.mask_add_dtype, precision=c.softmax_precision,
                                    masked_row=c.masked_row, on_stage=on_stage, in_place=in_place,
                                    softmax_kernel=softmax_kernel, ops=ops)


def mix_values(e: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Z = E V per head: [B, H, S, T] x [B, H, T, d_k] -> [B, H, S, d_k] (paper eq. 3.9; V unrotated)."""
    return np.matmul(e, v)
