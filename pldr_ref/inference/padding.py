"""Padding at the Gram boundary (paper §4.5; spec §7.4).

With ``gram_mode="global"`` the density operator sums over every supplied query row, padding rows
included, so appended right padding changes the final real row even when the attention mask hides
the padding keys; with the cumulative Gram (paper eq. 4.16) it does not.  Stripping the padding
restores the unpadded call bit for bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pldr_ref.attention import SoftmaxKernel
from pldr_ref.constants import PAD_ID
from pldr_ref.inference.explicit import ExplicitInputs
from pldr_ref.model import forward
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable


def append_right_padding(token_ids: np.ndarray, pad_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids + pad_tokens, HF attention mask with 1 on the real tokens and 0 on the appended ones).

    token_ids [B, S]; pad_tokens [B, P] or [P] (any content: HF masks padding by position, not id).
    """
    ids = np.asarray(token_ids)
    pads = np.asarray(pad_tokens)
    if pads.ndim == 1:
        pads = np.broadcast_to(pads, (ids.shape[0], pads.size))
    if ids.ndim != 2 or pads.shape[0] != ids.shape[0]:
        raise ValueError(f"token_ids [B, S] and pad_tokens [B, P] must share B, got {ids.shape} and {pads.shape}")
    mask = np.concatenate([np.ones(ids.shape, dtype=np.int64), np.zeros(pads.shape, dtype=np.int64)], axis=1)
    return np.concatenate([ids, pads], axis=1).astype(np.int64), mask


@dataclasses.dataclass(frozen=True)
class PaddingEffect:
    """Change of the final real row's logits caused by appended padding: max |diff| and relative 2-norm."""

    max_abs: float
    relative: float


def final_real_row_effect(
    params: Params,
    token_ids: np.ndarray,
    pad_tokens: np.ndarray,
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> PaddingEffect:
    """Compare the unpadded call's final row with row S-1 of the right-padded call (padding masked by
    an attention mask, so only the Gram sees it).  Zero exactly when padding has no effect.  The explicit
    inputs are the unpadded ids'; the appended pads get mask 0 and continue each row's positions."""
    ids = np.asarray(token_ids)
    padded, mask = append_right_padding(ids, pad_tokens)
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    x.check_length(ids.shape[1])
    xp = x.extended(padded.shape[1] - ids.shape[1], mask_value=0)
    if xp.attention_mask is None:
        xp = dataclasses.replace(xp, attention_mask=mask)
    a = forward(params, ids, **x.forward_kwargs()).logits[:, -1]
    b = forward(params, padded, **xp.forward_kwargs()).logits[:, ids.shape[1] - 1]
    diff = float(np.max(np.abs(a - b)))
    rel = 0.0 if diff == 0.0 else float(np.linalg.norm(a - b) / np.linalg.norm(a))
    return PaddingEffect(diff, rel)


def real_lengths(token_ids: np.ndarray, attention_mask: np.ndarray | None = None, pad_id: int = PAD_ID) -> np.ndarray:
    """Number of real tokens per row [B] of a right-padded batch; ``ValueError`` if padding is not on the right."""
    ids = np.asarray(token_ids)
    if ids.ndim != 2:
        raise ValueError(f"token_ids must be [B, S], got shape {ids.shape}")
    keep = ids != pad_id if attention_mask is None else np.asarray(attention_mask).astype(bool)
    if keep.shape != ids.shape:
        raise ValueError(f"attention_mask has shape {keep.shape}, expected {ids.shape}")
    lengths = keep.sum(axis=1)
    # right padding means the kept positions are exactly the first `length` ones
    if not np.array_equal(keep, np.arange(ids.shape[1])[None] < lengths[:, None]):
        bad = int(np.argmax(np.any(keep != (np.arange(ids.shape[1])[None] < lengths[:, None]), axis=1)))
        raise ValueError(f"row {bad} is not right-padded (a real token follows padding)")
    if np.any(lengths == 0):
        raise ValueError(f"row {int(np.argmin(lengths))} holds no real token")
    return lengths


def strip_right_padding(
    token_ids: np.ndarray, attention_mask: np.ndarray | None = None, pad_id: int = PAD_ID
) -> list[np.ndarray]:
    """The real tokens of each row of a right-padded batch, as a list of [1, n_b] arrays (unpadded calls)."""
    ids = np.asarray(token_ids)
    lengths = real_lengths(ids, attention_mask, pad_id)
    return [ids[b : b + 1, : int(n)] for b, n in enumerate(lengths)]


def stripped_logits(
    params: Params,
    token_ids: np.ndarray,
    attention_mask: np.ndarray | None = None,
    pad_id: int = PAD_ID,
    *,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> list[np.ndarray]:
    """Logits [n_b, V] of each row scored as its own unpadded call (the deployed S = t interface); the explicit
    inputs are the padded batch's (each row takes its real tokens' positions)."""
    ids = np.asarray(token_ids)
    x = ExplicitInputs(None, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    x.check_length(ids.shape[1])
    rows = strip_right_padding(ids, attention_mask, pad_id)
    # one call per row: rows of different lengths cannot share a call without padding the Gram
    return [forward(params, row, **x.row(b).prefix(row.shape[1]).forward_kwargs()).logits[0]
            for b, row in enumerate(rows)]
