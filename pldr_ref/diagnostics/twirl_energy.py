"""Model section ``twirl-energy``: what the finite-S RoPE twirl removes from the query second moments
(paper Lemma 5.9, Corollary 7.1).

Per prompt, layer and head, with q_p the pre-rotation queries and q~_p = R_p q_p the rotated ones (p = 0..S-1):

    M_unrot = (1/S) sum_p q_p q_p^T,     M_rot = (1/S) sum_p q~_p q~_p^T  (= A0 / S for the global Gram).

Both are decomposed in the RoPE eigenbasis U: energy E_jk = |(U^* M U)_jk|^2; the commutant entries are those
with omega_j = omega_k.  Reported: the commutant fraction of each (sum of commutant energy / total), the
off-commutant suppression 1 - E_rot[off] / E_unrot[off] (the share of off-commutant energy the rotation
removed), as per-instance ratios and as per-layer ratios of energies pooled over prompts and heads (ratios do
not commute with pooling, so both are given), the stationarity ||M_1 - M_2||_F / ||(M_1 + M_2)/2||_F of the
pre-rotation moments of the two halves of the sequence, and the consistency ||M_rot - A0/S|| / ||A0/S||.
"""

from __future__ import annotations

import numpy as np

from pldr_ref.diagnostics.commutant import eigenbasis_energy, rope_eigenbasis, same_frequency_mask
from pldr_ref.diagnostics.run import ModelRun, stack
from pldr_ref.diagnostics.spectra import summary


def second_moment(x: np.ndarray) -> np.ndarray:
    """(1/S) X^T X per block of rows x [..., S, d] -> [..., d, d]."""
    return np.matmul(np.swapaxes(x, -1, -2), x) / x.shape[-2]


def energy_split(e: np.ndarray, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(commutant energy, off-commutant energy) of energies e [..., d, d] under the mask ``comm`` [d, d]."""
    return np.sum(e * comm, axis=(-2, -1)), np.sum(e * ~comm, axis=(-2, -1))


def twirl_energy_section(run: ModelRun) -> dict:
    """Commutant fractions, off-commutant suppression, stationarity and rotation consistency (see module doc)."""
    c = run.config
    q = stack(run, "q")  # [L, B, H, S, d_k]
    q_rot = stack(run, "q_rot")
    u, omega = rope_eigenbasis(c.d_k, c.rope_base, c.rope_layout)
    comm = same_frequency_mask(omega)
    m_u = second_moment(q)
    m_r = second_moment(q_rot)
    cu, ou = energy_split(eigenbasis_energy(m_u, u), comm)
    cr, orr = energy_split(eigenbasis_energy(m_r, u), comm)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac_u = cu / (cu + ou)
        frac_r = cr / (cr + orr)
        supp = 1.0 - orr / ou
        pooled = (1.0 - orr.sum(axis=(1, 2)) / ou.sum(axis=(1, 2)))
        pooled_fu = cu.sum(axis=(1, 2)) / (cu + ou).sum(axis=(1, 2))
        pooled_fr = cr.sum(axis=(1, 2)) / (cr + orr).sum(axis=(1, 2))
    half = q.shape[-2] // 2
    m1, m2 = second_moment(q[..., :half, :]), second_moment(q[..., half:, :])
    stat = np.linalg.norm(m1 - m2, axis=(-2, -1)) / np.linalg.norm(0.5 * (m1 + m2), axis=(-2, -1))
    rep = {
        "per_instance": {
            "label": "ratios per (layer, prompt, head) instance",
            "offcommutant_suppression": summary(supp),
            "commutant_fraction_unrotated": summary(frac_u),
            "commutant_fraction_rotated": summary(frac_r),
            "n_instances": int(supp.size),
        },
        "pooled_per_layer": {
            "label": "per layer, energies summed over prompts and heads before the ratio",
            "offcommutant_suppression": pooled.tolist(),
            "commutant_fraction_unrotated": pooled_fu.tolist(),
            "commutant_fraction_rotated": pooled_fr.tolist(),
        },
        "stationarity_between_halves": summary(stat),
    }
    a0 = stack(run, "A0")
    if a0 is not None and c.gram_mode == "global":
        ref = a0 / q.shape[-2]
        rep["rotated_vs_A0_over_S"] = summary(np.linalg.norm(m_r - ref, axis=(-2, -1)) /
                                              np.linalg.norm(ref, axis=(-2, -1)))
    return rep
