"""Singular spectra and numerical ranks of per-head operators (paper Appendix D; Lean ``DensityOperator``).

Rank rule (stated in every report): the numerical rank of a matrix with singular values
sigma_1 >= sigma_2 >= ... is #{i : sigma_i > RANK_FACTOR * eps_float32 * sigma_1}, with RANK_FACTOR = 64
and eps_float32 = 2^-23 (the float32 machine epsilon: a trained checkpoint is stored in float32, so
directions below this relative level are not resolved by its weights).
"""

from __future__ import annotations

import numpy as np

from pldr_ref.diagnostics.run import ModelRun, stack

#: Multiplier of eps_float32 * sigma_1 in the numerical-rank threshold.
RANK_FACTOR: int = 64
#: eps of float32 (2^-23).
EPS_FLOAT32: float = float(np.finfo(np.float32).eps)
#: The rank rule as a sentence, copied into every report.
RANK_RULE = f"numerical rank = #{{i : sigma_i > {RANK_FACTOR} * eps_float32 * sigma_1}}, eps_float32 = 2^-23"


def singular_values(m: np.ndarray) -> np.ndarray:
    """Descending singular values [..., min(n, k)] of matrices [..., n, k] (float64, batched LAPACK)."""
    m = np.asarray(m, dtype=np.float64)
    if not np.all(np.isfinite(m)):
        raise ValueError("singular values of non-finite matrices are undefined")
    return np.linalg.svd(m, compute_uv=False)


def numerical_rank(sigma: np.ndarray, factor: int = RANK_FACTOR) -> np.ndarray:
    """#{i : sigma_i > factor * eps_float32 * sigma_1} per spectrum [..., k] (descending) -> int [...]."""
    s = np.asarray(sigma, dtype=np.float64)
    return np.sum(s > factor * EPS_FLOAT32 * s[..., :1], axis=-1)


def summary(x: np.ndarray) -> dict[str, float]:
    """{min, median, max, mean} of every finite entry of ``x`` (NaN entries are left out; empty -> NaNs)."""
    a = np.asarray(x, dtype=np.float64).ravel()
    a = a[~np.isnan(a)]
    if a.size == 0:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan"), "mean": float("nan")}
    return {"min": float(a.min()), "median": float(np.median(a)), "max": float(a.max()), "mean": float(a.mean())}


def histogram(values: np.ndarray) -> dict[str, int]:
    """{str(value): count} of an integer array, in increasing value order."""
    vals, counts = np.unique(np.asarray(values).ravel(), return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(vals, counts, strict=True)}


def spectrum_report(m: np.ndarray) -> dict:
    """Spectra of a stack of square matrices [..., d, d]: sigma_1, sigma_2/sigma_1, numerical-rank histogram,
    and the median normalised spectrum sigma_i / sigma_1 over the stack (for the spectrum plot)."""
    s = singular_values(m)
    flat = s.reshape(-1, s.shape[-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        normed = flat / flat[:, :1]
    return {
        "sigma_1": summary(flat[:, 0]),
        "sigma_2_over_sigma_1": summary(normed[:, 1]) if flat.shape[1] > 1 else summary(np.array([])),
        "numerical_rank": histogram(numerical_rank(flat)),
        "median_normalised_spectrum": [float(v) for v in np.nanmedian(normed, axis=0)],
    }


def cross_head_identity(a: np.ndarray) -> np.ndarray:
    """RMS(A_h - A_0) / RMS(A_0) for heads h = 1..H-1 of A [..., H, d, d] -> [..., H-1] (0: every head equal)."""
    a = np.asarray(a, dtype=np.float64)
    diff = a[..., 1:, :, :] - a[..., :1, :, :]
    num = np.sqrt(np.mean(diff * diff, axis=(-2, -1)))
    den = np.sqrt(np.mean(a[..., :1, :, :] ** 2, axis=(-2, -1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def row_identity_ratio(a: np.ndarray) -> np.ndarray:
    """mean_ij (A_ij - mean_i A_ij)^2 / mean_ij (A_ij - mean A)^2 per matrix [..., d, d] -> [...].

    The share of A's variance that is not explained by one repeated row: 0 when every row is the same row,
    up to 1 when rows differ as much as entries do.
    """
    a = np.asarray(a, dtype=np.float64)
    row_dev = a - np.mean(a, axis=-2, keepdims=True)
    all_dev = a - np.mean(a, axis=(-2, -1), keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mean(row_dev**2, axis=(-2, -1)) / np.mean(all_dev**2, axis=(-2, -1))


def spectra_section(run: ModelRun) -> dict:
    """Model section ``spectra``: spectra and numerical ranks of A0, A, A_LM, G_LM over layers, prompts and
    heads; cross-head identity and row-identity ratio of A."""
    rep: dict = {"rank_rule": RANK_RULE, "seq_len": int(run.ids.shape[1]), "d_k": run.config.d_k}
    for name in ("A0", "A", "A_LM", "G_LM"):
        t = stack(run, name)
        if t is None:
            rep[name] = None
            continue
        rep[name] = spectrum_report(t)
        rep[name]["numerical_rank_by_layer"] = [histogram(numerical_rank(singular_values(x))) for x in t]
    a = stack(run, "A")
    if a is not None:
        rep["A_cross_head_identity"] = summary(cross_head_identity(a)) if a.shape[2] > 1 else None
        rep["A_row_identity_ratio"] = summary(row_identity_ratio(a))
    return rep
