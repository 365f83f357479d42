"""The RoPE torus as matrices built from the real ``pldr_ref.rope`` operators: rotations, the commutant
projection, difference frequencies, C_Theta, the twirl average and its exact per-frequency multiplier
(paper Prop. 4.1, Lem. 5.9, Cor. 7.1; catalog section 1).  Interleaved planes (2a, 2a+1) throughout.
"""

from __future__ import annotations

import numpy as np

from pldr_ref.rope import apply_rope, rope_frequencies

J2 = np.array([[0.0, -1.0], [1.0, 0.0]])


def rope_rotation(positions: np.ndarray, d_k: int, base: float = 10000.0) -> np.ndarray:
    """R_p with R_p x = apply_rope(x, p) (interleaved, exact), for every p: [P] -> [P, d_k, d_k].

    Built by rotating the identity rows with the real ``apply_rope``: row i of the result is R_p e_i,
    so R_p is its transpose.
    """
    pos = np.atleast_1d(np.asarray(positions, dtype=np.float64))
    eye = np.broadcast_to(np.eye(d_k), (pos.size, d_k, d_k))
    rows = apply_rope(eye, np.broadcast_to(pos[:, None], (pos.size, d_k)), base=base)
    return np.swapaxes(rows, -1, -2)


def rot(theta: float | np.ndarray) -> np.ndarray:
    """2x2 rotation by theta from the real ``apply_rope`` with d_k = 2 (omega_0 = base^0 = 1)."""
    return rope_rotation(np.atleast_1d(theta), 2)[0] if np.ndim(theta) == 0 else rope_rotation(theta, 2)


def commutant_projection(g: np.ndarray) -> np.ndarray:
    """Pi(G): each diagonal 2x2 block B -> ((B00+B11)/2) I + ((B10-B01)/2) J, off-diagonal blocks -> 0.

    The orthogonal (Frobenius) projection onto the commutant of the torus under nonresonance; g [..., d, d].
    """
    g = np.asarray(g, dtype=np.float64)
    d = g.shape[-1]
    a = np.arange(0, d, 2)
    c = 0.5 * (g[..., a, a] + g[..., a + 1, a + 1])
    s = 0.5 * (g[..., a + 1, a] - g[..., a, a + 1])
    out = np.zeros_like(g)
    out[..., a, a] = c
    out[..., a + 1, a + 1] = c
    out[..., a + 1, a] = s
    out[..., a, a + 1] = -s
    return out


def commutant_residual(g: np.ndarray) -> np.ndarray:
    """||G - Pi G||_F / ||G||_F over the last two axes."""
    return np.linalg.norm(g - commutant_projection(g), axis=(-2, -1)) / np.linalg.norm(g, axis=(-2, -1))


def plane_frequencies(d_k: int, base: float = 10000.0) -> np.ndarray:
    """theta_a = base^(-2a/d_k), a = 0..d_k/2-1 (the real ``rope_frequencies``)."""
    return rope_frequencies(d_k, base)


def difference_frequencies(d_k: int, base: float = 10000.0) -> np.ndarray:
    """{2 theta_a} and {|theta_a - theta_b|, theta_a + theta_b : a != b} over ordered pairs (2016 at d_k = 64)."""
    th = plane_frequencies(d_k, base)
    a, b = np.meshgrid(np.arange(th.size), np.arange(th.size), indexing="ij")
    off = a != b
    return np.concatenate([2 * th, np.abs(th[a] - th[b])[off], (th[a] + th[b])[off]])


def c_theta(freqs: np.ndarray) -> float:
    """C_Theta = max over the (nonresonant) difference frequencies of 1 / |sin(omega / 2)|."""
    return float(np.max(1.0 / np.abs(np.sin(np.asarray(freqs) / 2))))


def twirl_multiplier(omega: np.ndarray, s: int) -> np.ndarray:
    """mult(omega, S) = |sin(S omega / 2)| / (S |sin(omega / 2)|), the exact modulus of (1/S) sum e^{i omega n}."""
    omega = np.asarray(omega, dtype=np.float64)
    return np.abs(np.sin(s * omega / 2)) / (s * np.abs(np.sin(omega / 2)))


def twirl_average(m: np.ndarray, s: int, d_k: int, base: float = 10000.0) -> np.ndarray:
    """T_S(M) = (1/S) sum_{n=1..S} R_n M R_n^T with the real RoPE rotations; m [..., d_k, d_k]."""
    r = rope_rotation(np.arange(1, s + 1), d_k, base)  # [S, d, d]
    m = np.asarray(m, dtype=np.float64)
    conj = np.matmul(np.matmul(r, m[..., None, :, :]), np.swapaxes(r, -1, -2))  # [..., S, d, d]
    return conj.sum(axis=-3) / s


def eigenbasis(d_k: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """(U, omega): unitary U whose columns diagonalize every R_n (interleaved), R_n U = U diag(e^{i omega n})."""
    th = plane_frequencies(d_k, base)
    u = np.zeros((d_k, d_k), dtype=np.complex128)
    a = np.arange(0, d_k, 2)
    u[a, a] = 1 / np.sqrt(2)
    u[a + 1, a] = -1j / np.sqrt(2)
    u[a, a + 1] = 1 / np.sqrt(2)
    u[a + 1, a + 1] = 1j / np.sqrt(2)
    omega = np.empty(d_k)
    omega[a] = th
    omega[a + 1] = -th
    return u, omega
