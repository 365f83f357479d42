"""Validation of user inputs (token ids, positions, padding masks) with messages that name the problem."""

from __future__ import annotations

import numpy as np

from pldr_ref.config import PLDRConfig


def validate_start_pos(start_pos: object, name: str = "start_pos") -> int:
    """``start_pos`` as a Python int >= 0, else ``TypeError`` (not an int: float, str, bool, None) or ``ValueError``."""
    if isinstance(start_pos, (bool, np.bool_)) or not isinstance(start_pos, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 0, got {start_pos!r} of type {type(start_pos).__name__}")
    if start_pos < 0:
        raise ValueError(f"start position must be >= 0, got {start_pos}")
    return int(start_pos)


def validate_token_ids(token_ids: object, config: PLDRConfig, start_pos: int = 0) -> np.ndarray:
    """Return ``token_ids`` as int64 [B, S] or raise ``ValueError``/``TypeError`` saying why.

    Accepts any integer array of rank 2 (bool is rejected); every id must be in
    [0, vocab_size), ``start_pos`` an int >= 0 (:func:`validate_start_pos`) and start_pos + S must not
    exceed ``max_seq_len``.
    """
    arr = np.asarray(token_ids)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"token_ids must be an integer array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"token_ids must have rank 2 [B, S], got shape {arr.shape}")
    b, s = arr.shape
    if b == 0 or s == 0:
        raise ValueError(f"token_ids must be non-empty, got shape {arr.shape}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= config.vocab_size:
        bad = lo if lo < 0 else hi
        idx = tuple(int(i) for i in np.argwhere(arr == bad)[0])
        raise ValueError(f"token id {bad} at index {idx} is outside [0, vocab_size={config.vocab_size})")
    start_pos = validate_start_pos(start_pos)
    if start_pos + s > config.max_seq_len:
        raise ValueError(
            f"sequence of length {s} at start position {start_pos} exceeds max_seq_len={config.max_seq_len}"
        )
    return arr.astype(np.int64)


def validate_attention_mask(attention_mask: object, shape: tuple[int, int]) -> np.ndarray:
    """HF-style 0/1 attention mask [B, T] -> bool key_padding [B, T] (True = padding key)."""
    m = np.asarray(attention_mask)
    if m.shape != shape:
        raise ValueError(f"attention_mask has shape {m.shape}, expected {shape}")
    if not (m.dtype == bool or np.issubdtype(m.dtype, np.integer)):
        raise TypeError(f"attention_mask must be bool or integer 0/1, got dtype {m.dtype}")
    if m.dtype != bool and not np.isin(m, (0, 1)).all():
        raise ValueError("attention_mask must contain only 0 and 1")
    return ~m.astype(bool)
