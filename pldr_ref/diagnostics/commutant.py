"""The RoPE commutant: eigenbasis, orthogonal projection, residual and fraction (paper Prop. 4.1, Cor. 7.1).

Every RoPE rotation R_p acts on d_k/2 planes (a1, a2): interleaved (2a, 2a+1) or half (a, a + d_k/2),
rotating plane a by p theta_a.  Under nonresonance (distinct nonzero theta_a, no difference frequency in
2 pi Z) the matrices commuting with every R_p are exactly the block-diagonal ones whose 2x2 plane blocks
are c I + s J (J the 90-degree rotation).  The orthogonal (Frobenius) projection Pi onto that commutant
keeps, per plane, c = (B_11 + B_22)/2 and s = (B_21 - B_12)/2 and zeroes everything else; in the complex
eigenbasis U (R_p U = U diag(e^{i omega p})) it keeps the entries with omega_j = omega_k.

    residual(G) = ||G - Pi G||_F / ||G||_F,   fraction(G) = ||Pi G||_F^2 / ||G||_F^2,

so residual^2 + fraction = 1 (Pythagoras: Pi is an orthogonal projection).  A zero operator has neither;
it is reported as NaN.
"""

from __future__ import annotations

import numpy as np

from pldr_ref.diagnostics.twirl import plane_frequencies
from pldr_ref.rope import LAYOUTS


def plane_indices(d_k: int, layout: str = "interleaved") -> tuple[np.ndarray, np.ndarray]:
    """(first, second) coordinate index of every RoPE plane, each [d_k/2], for ``layout`` in LAYOUTS."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if d_k < 2 or d_k % 2:
        raise ValueError(f"d_k must be an even int >= 2, got {d_k!r}")
    half = d_k // 2
    if layout == "interleaved":
        return np.arange(0, d_k, 2), np.arange(1, d_k, 2)
    return np.arange(half), np.arange(half, d_k)


def rope_eigenbasis(d_k: int, base: float, layout: str = "interleaved") -> tuple[np.ndarray, np.ndarray]:
    """(U, omega): unitary U [d_k, d_k] complex and eigenfrequencies omega [d_k] with R_p U = U diag(e^{i omega p}).

    Column 2a is (e_a1 - i e_a2)/sqrt(2) with omega = +theta_a, column 2a+1 is (e_a1 + i e_a2)/sqrt(2) with
    omega = -theta_a (pldr_ref rotates y_a1 = x_a1 cos - x_a2 sin, y_a2 = x_a2 cos + x_a1 sin).
    """
    p1, p2 = plane_indices(d_k, layout)
    th = plane_frequencies(d_k, base)
    u = np.zeros((d_k, d_k), dtype=np.complex128)
    cols = np.arange(0, d_k, 2)
    r = 1.0 / np.sqrt(2.0)
    u[p1, cols] = r
    u[p2, cols] = -1j * r
    u[p1, cols + 1] = r
    u[p2, cols + 1] = 1j * r
    omega = np.empty(d_k)
    omega[cols] = th
    omega[cols + 1] = -th
    return u, omega


def commutant_projection(g: np.ndarray, layout: str = "interleaved") -> np.ndarray:
    """Pi(G) [..., d_k, d_k]: per plane block B -> c I + s J with c = (B_11+B_22)/2, s = (B_21-B_12)/2; rest 0."""
    g = np.asarray(g, dtype=np.float64)
    if g.ndim < 2 or g.shape[-1] != g.shape[-2]:
        raise ValueError(f"commutant projection needs square matrices [..., d_k, d_k], got shape {g.shape}")
    p1, p2 = plane_indices(g.shape[-1], layout)
    c = 0.5 * (g[..., p1, p1] + g[..., p2, p2])
    s = 0.5 * (g[..., p2, p1] - g[..., p1, p2])
    out = np.zeros_like(g)
    out[..., p1, p1] = c
    out[..., p2, p2] = c
    out[..., p2, p1] = s
    out[..., p1, p2] = -s
    return out


def commutant_residual(g: np.ndarray, layout: str = "interleaved") -> np.ndarray:
    """||G - Pi G||_F / ||G||_F over the last two axes, in [0, 1] (NaN for G = 0)."""
    g = np.asarray(g, dtype=np.float64)
    norm = np.linalg.norm(g, axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.linalg.norm(g - commutant_projection(g, layout), axis=(-2, -1)) / norm


def commutant_fraction(g: np.ndarray, layout: str = "interleaved") -> np.ndarray:
    """||Pi G||_F^2 / ||G||_F^2 over the last two axes, in [0, 1] (NaN for G = 0)."""
    g = np.asarray(g, dtype=np.float64)
    norm = np.linalg.norm(g, axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.linalg.norm(commutant_projection(g, layout), axis=(-2, -1)) / norm) ** 2


def eigenbasis_energy(m: np.ndarray, u: np.ndarray) -> np.ndarray:
    """|U^* M U|^2 entrywise [..., d_k, d_k]: the energy of M at each eigenfrequency pair (omega_j, omega_k).

    Two GEMMs over every block at once: Y = M U (rows of all blocks stacked), then (U^* Y)^T = Y^T conj(U).
    """
    m = np.asarray(m, dtype=np.float64)
    d = m.shape[-1]
    y = (m.reshape(-1, d) @ u).reshape(-1, d, d)
    zt = (np.swapaxes(y, -1, -2).reshape(-1, d) @ u.conj()).reshape(-1, d, d)
    e = np.swapaxes(zt.real**2 + zt.imag**2, -1, -2)
    return e.reshape(m.shape)


def same_frequency_mask(omega: np.ndarray) -> np.ndarray:
    """Boolean [d_k, d_k]: omega_j == omega_k (the commutant entries in the eigenbasis, under nonresonance)."""
    return omega[:, None] == omega[None, :]
