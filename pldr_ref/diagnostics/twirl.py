"""Analytic twirl multipliers of the RoPE torus (paper Lemma 5.9, Corollary 7.1; Lean ``TwirlBound``).

Averaging a d_k x d_k operator M over the rotations R_1..R_S, T_S(M) = (1/S) sum_n R_n M R_n^T, multiplies
each entry of M in the RoPE eigenbasis by (1/S) sum_{n=1..S} e^{i omega n}, where omega is the difference of
the two eigenfrequencies of the entry.  Its modulus is the multiplier

    m(omega, S) = |sin(S omega / 2)| / (S |sin(omega / 2)|)  <=  min(1, C_Theta / S),

with C_Theta = max_omega 1 / |sin(omega / 2)| over the nonzero difference frequencies (the nonresonant
spectrum).  The difference frequencies of RoPE planes with frequencies theta_a are the in-plane 2 theta_a
(a = 0..d_k/2-1) and, for every ordered pair a != b, |theta_a - theta_b| and theta_a + theta_b
(d_k/2 + d_k (d_k/2 - 1) entries, 2016 at d_k = 64; duplicates kept).  Everything here is analytic:
no weights are read.
"""

from __future__ import annotations

import numpy as np

from pldr_ref.constants import ROPE_BASE
from pldr_ref.rope import rope_frequencies

#: Default sequence lengths of the twirl table (the paper's Appendix D lengths).
DEFAULT_SEQ_LENS: tuple[int, ...] = (64, 256, 1024)
#: Thresholds of the "fraction of frequencies damped below" columns.
DAMPING_THRESHOLDS: tuple[float, ...] = (0.1, 0.01)


def _check_d_k(d_k: int) -> int:
    if isinstance(d_k, bool) or not isinstance(d_k, (int, np.integer)) or d_k < 2 or d_k % 2:
        raise ValueError(f"d_k must be an even int >= 2, got {d_k!r}")
    return int(d_k)


def _check_base(base: float) -> float:
    b = float(base)
    if not np.isfinite(b) or b <= 1.0:
        raise ValueError(f"rope_base must be a finite float > 1, got {base!r}")
    return b


def plane_frequencies(d_k: int, base: float = ROPE_BASE) -> np.ndarray:
    """theta_a = base^(-2a/d_k), a = 0..d_k/2-1, float64 [d_k/2] (``pldr_ref.rope.rope_frequencies``, exact)."""
    return rope_frequencies(_check_d_k(d_k), _check_base(base))


def difference_frequencies(d_k: int, base: float = ROPE_BASE) -> np.ndarray:
    """The twirl difference-frequency multiset [d_k/2 + d_k (d_k/2 - 1)]: in-plane 2 theta_a first, then
    |theta_a - theta_b| and theta_a + theta_b over ordered pairs a != b (row-major in (a, b))."""
    th = plane_frequencies(d_k, base)
    a, b = np.nonzero(~np.eye(th.size, dtype=bool))
    return np.concatenate([2.0 * th, np.abs(th[a] - th[b]), th[a] + th[b]])


def c_theta(freqs: np.ndarray) -> float:
    """C_Theta = max over ``freqs`` of 1 / |sin(omega / 2)|; ``ValueError`` on a resonant (sin = 0) frequency."""
    s = np.abs(np.sin(np.asarray(freqs, dtype=np.float64) / 2.0))
    if s.size == 0 or np.any(s == 0.0):
        raise ValueError("C_Theta needs a nonempty nonresonant spectrum (sin(omega/2) != 0 for every omega)")
    return float(np.max(1.0 / s))


def twirl_multiplier(omega: np.ndarray, seq_len: int) -> np.ndarray:
    """m(omega, S) = |sin(S omega / 2)| / (S |sin(omega / 2)|), elementwise over ``omega`` (float64).

    The exact modulus of (1/S) sum_{n=1..S} e^{i omega n}; 1 at S = 1; needs sin(omega/2) != 0.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
        raise ValueError(f"seq_len must be an int >= 1, got {seq_len!r}")
    w = np.asarray(omega, dtype=np.float64)
    return np.abs(np.sin(seq_len * w / 2.0)) / (seq_len * np.abs(np.sin(w / 2.0)))


def twirl_table(d_k: int = 64, base: float = ROPE_BASE, seq_lens: tuple[int, ...] = DEFAULT_SEQ_LENS) -> dict:
    """The analytic twirl report: C_Theta, the frequency count and per S the multiplier statistics.

    ``by_seq_len[str(S)]`` = {worst, median, frac_lt_0_1, frac_lt_0_01, slowest_in_plane, uniform_bound}:
    max and median of m(omega, S) over the multiset, the fractions below 0.1 and 0.01, m at the slowest
    in-plane frequency 2 theta_{d_k/2-1}, and the uniform bound C_Theta / S.
    """
    if not seq_lens:
        raise ValueError("seq_lens must name at least one sequence length")
    freqs = difference_frequencies(d_k, base)
    ct = c_theta(freqs)
    slowest = 2.0 * plane_frequencies(d_k, base)[-1]
    by_s = {}
    for s in seq_lens:
        m = twirl_multiplier(freqs, s)
        by_s[str(int(s))] = {
            "worst": float(np.max(m)),
            "median": float(np.median(m)),
            "frac_lt_0_1": float(np.mean(m < DAMPING_THRESHOLDS[0])),
            "frac_lt_0_01": float(np.mean(m < DAMPING_THRESHOLDS[1])),
            "slowest_in_plane": float(twirl_multiplier(np.array([slowest]), s)[0]),
            "uniform_bound": ct / s,
        }
    return {
        "d_k": int(d_k),
        "rope_base": float(base),
        "n_frequencies": int(freqs.size),
        "min_frequency": float(np.min(freqs)),
        "C_theta": ct,
        "by_seq_len": by_s,
    }
