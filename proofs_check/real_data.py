"""The trained G_LM tensors of PLDR-LLM-v51-110M-1 ([5, 14, 64, 64]), bundled in ``pldr_ref.resources``."""

from __future__ import annotations

import numpy as np

from pldr_ref.resources import TRAINED_D_K, TRAINED_ROPE_BASE, trained_g_lm


def real_g_lm() -> np.ndarray:
    """G_LM [layer=5, head=14, d_k=64, d_k=64] widened exactly to float64 (read-only)."""
    return trained_g_lm()


#: RoPE base and head width of the checkpoint the tensors come from (interleaved planes).
REAL_ROPE_BASE: float = TRAINED_ROPE_BASE
REAL_D_K: int = TRAINED_D_K
