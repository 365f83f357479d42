"""Density operator A0 = Q~^T Q~ of the rotated queries (spec §2.4 step 4; paper eq. 3.2, eq. 4.16).

Lean ``DensityOperator`` (symmetry, positive semi-definiteness, rank <= min(S, d_k)).
"""

from __future__ import annotations

import numpy as np


def density_operator(q_rot: np.ndarray) -> np.ndarray:
    """A0 = Q~^T Q~ = sum_s q~_s q~_s^T, the global Gram over every supplied row.

    q_rot: [B, H, S, d_k] -> A0: [B, H, d_k, d_k], symmetric PSD.  No masking and no
    1/S normalisation: future and padding rows are included (spec §7.4).
    The result is symmetrised exactly ((X + X^T)/2) so that it is bitwise symmetric
    whatever order the BLAS accumulates in.
    """
    a0 = np.matmul(np.swapaxes(q_rot, -1, -2), q_rot)
    return 0.5 * (a0 + np.swapaxes(a0, -1, -2))


def cumulative_density_operator(q_rot: np.ndarray) -> np.ndarray:
    """Masked cumulative Gram of paper eq. 4.16: A0_i = sum_{s <= i} q~_s q~_s^T.

    q_rot: [B, H, S, d_k] -> [B, H, S, d_k, d_k]; row i sees only queries 1..i, so the
    resulting operator is causal.  Memory is O(S d_k^2) per head.
    """
    outer = q_rot[..., :, None] * q_rot[..., None, :]
    return np.cumsum(outer, axis=-3)
