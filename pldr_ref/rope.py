"""Rotary position embedding (RoPE) of queries and keys (spec §2.4 step 3, §12; paper §4.1).

Two pairings (``layout``) and two precisions (``precision``) are exposed:

* ``"interleaved"`` (torchtune, PT-v510, HF ``reference_rope=True``): pairs (x_{2i}, x_{2i+1});
* ``"half"`` (keras-nlp rotate_half, TF-v500/v900): pairs (x_i, x_{i + d_k/2});
* ``"exact"``: angles p * omega_i and the rotation in float64;
* ``"float32"``: as torchtune does, omega, p * omega, cos and sin are built in float32,
  and q, k are rounded to float32 and rotated in float32; the result is widened back.

With omega_i = base^(-2i/d_k), i = 0..d_k/2 - 1, each pair is rotated by the angle p * omega_i.
"""

from __future__ import annotations

import numpy as np

LAYOUTS = ("interleaved", "half")
PRECISIONS = ("exact", "float32")


def rope_frequencies(d_k: int, base: float, precision: str = "exact") -> np.ndarray:
    """omega_i = base^(-2i/d_k), i = 0..d_k/2-1, shape [d_k/2] (float32 values if ``precision="float32"``)."""
    if precision == "float32":
        exps = np.arange(0, d_k, 2, dtype=np.float32)[: d_k // 2] / np.float32(d_k)
        # torch's float32 pow is correctly rounded; NumPy's float32 pow is not (1 ulp off for some
        # exponents), so the power is taken in float64 and rounded once to float32.
        powers = np.power(np.float64(base), exps.astype(np.float64)).astype(np.float32)
        return np.float32(1.0) / powers
    if precision != "exact":
        raise ValueError(f"rope precision must be one of {PRECISIONS}, got {precision!r}")
    return np.power(float(base), -np.arange(0, d_k, 2, dtype=np.float64) / d_k)


def rope_angles(
    positions: np.ndarray, d_k: int, base: float, precision: str = "exact"
) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) of phi_{p,i} = p * omega_i, each [..., d_k/2] for ``positions`` of shape [...]."""
    omega = rope_frequencies(d_k, base, precision)
    pos = np.asarray(positions)
    if precision == "float32":
        phi = pos.astype(np.float32)[..., None] * omega
        # cos/sin of the float32 angle, correctly rounded to float32 (platform independent; float32
        # libm/SIMD kernels, torch's included, may differ by 1 ulp: about 6e-8 relative).
        phi64 = phi.astype(np.float64)
        return np.cos(phi64).astype(np.float32), np.sin(phi64).astype(np.float32)
    phi = pos.astype(np.float64)[..., None] * omega
    return np.cos(phi), np.sin(phi)


def _pairs(x: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    half = x.shape[-1] // 2
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    if layout == "half":
        return x[..., :half], x[..., half:]
    raise ValueError(f"rope layout must be one of {LAYOUTS}, got {layout!r}")


def _unpairs(y1: np.ndarray, y2: np.ndarray, layout: str) -> np.ndarray:
    if layout == "interleaved":
        return np.stack([y1, y2], axis=-1).reshape(*y1.shape[:-1], 2 * y1.shape[-1])
    return np.concatenate([y1, y2], axis=-1)


def apply_rope(
    x: np.ndarray,
    positions: np.ndarray,
    *,
    layout: str = "interleaved",
    precision: str = "exact",
    base: float = 10000.0,
) -> np.ndarray:
    """Rotate ``x`` [..., S, d_k] by RoPE at absolute ``positions`` [S] (or broadcastable [..., S]).

    y_a = x_a cos(phi) - x_b sin(phi),  y_b = x_b cos(phi) + x_a sin(phi)
    for each pair (a, b) of ``layout``.  Returns float64 [..., S, d_k].
    Paper: Definition 4.3 (rotated queries/keys); Lean ``RoPE`` file.
    """
    x = np.asarray(x)
    d_k = x.shape[-1]
    if d_k % 2:
        raise ValueError(f"RoPE needs an even last axis, got {d_k}")
    cos, sin = rope_angles(positions, d_k, base, precision)
    if precision == "float32":
        x = x.astype(np.float32)
    x1, x2 = _pairs(x, layout)
    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin
    return _unpairs(y1, y2, layout).astype(np.float64)


def interleave_permutation(d_k: int) -> np.ndarray:
    """pi = [0, 2, ..., d_k-2, 1, 3, ..., d_k-1]: interleaved(x)[pi] == half(x[pi]) (spec §2.4 step 3)."""
    return np.concatenate([np.arange(0, d_k, 2), np.arange(1, d_k, 2)])
