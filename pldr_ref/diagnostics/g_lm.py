"""``diagnose g-lm``: structure of a stored energy-curvature tensor G_LM [L, H, d_k, d_k] (paper Cor. 7.1,
Appendix D): commutant residual and fraction per layer and head, singular spectra and numerical ranks,
Perron-Frobenius applicability, DAG loss.  Default input: the bundled trained PLDRv51-110M-1 G_LM.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pldr_ref.constants import ROPE_BASE
from pldr_ref.dag import dag_loss
from pldr_ref.diagnostics.commutant import commutant_fraction, commutant_residual
from pldr_ref.diagnostics.spectra import RANK_RULE, numerical_rank, singular_values, spectrum_report, summary

#: Array name of G_LM inside an ``.npz`` file (the bundled file's key).
G_LM_KEY = "G_LM"


def load_g_lm(path: str | os.PathLike[str] | None = None) -> tuple[np.ndarray, str]:
    """(G_LM float64 [L, H, d_k, d_k], source label) from an ``.npz`` (key ``G_LM``) or ``.npy`` file;
    ``None`` reads the bundled trained tensor.  [L, 1, H, d_k, d_k] (a stored batch axis of 1) is squeezed."""
    if path is None:
        from pldr_ref.resources import TRAINED_G_LM_FILE, trained_g_lm

        return np.array(trained_g_lm()), f"bundled {TRAINED_G_LM_FILE}"
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--file {p} does not exist")
    if p.suffix not in (".npy", ".npz"):
        raise ValueError(f"--file {p}: expected a .npz (key {G_LM_KEY!r}) or .npy file")
    check_g_lm_header(p)  # shape, dtype and budget from the header: nothing decompressed yet
    if p.suffix == ".npy":
        g = np.load(p, allow_pickle=False)
    else:
        with np.load(p, allow_pickle=False) as z:
            g = z[G_LM_KEY]
    return check_g_lm(g, str(p)), str(p)


#: Arrays of G_LM's size the g-lm diagnostics hold at once (the loaded values, float64, spectra and products).
G_LM_WORK_COPIES = 4


def check_g_lm_header(p: Path) -> None:
    """From the ``.npy`` header (of the ``.npz`` member ``G_LM``) alone: the key, a float dtype, the shape
    [L, (1,) H, d_k, d_k] and the diagnostics' memory within the budget; ValueError / MemoryBudgetError."""
    from pldr_ref.array_headers import check_arrays_budget, npy_header, npz_headers

    if p.suffix == ".npz":
        headers = npz_headers(p)
        if G_LM_KEY not in headers:
            raise ValueError(f"{p} has no array {G_LM_KEY!r} (found {sorted(headers)})")
        head = headers[G_LM_KEY]
    else:
        head = npy_header(p)
    shape = head.shape[:1] + head.shape[2:] if len(head.shape) == 5 and head.shape[1] == 1 else head.shape
    if len(shape) != 4 or shape[-1] != shape[-2] or shape[-1] % 2:
        raise ValueError(f"{p}: expected G_LM of shape [L, H, d_k, d_k] with even d_k, got {head.shape}")
    if head.dtype.kind != "f":
        raise ValueError(f"{p}: G_LM must hold finite floats, got dtype {head.dtype}")
    check_arrays_budget(f"G_LM file {p}", [head], factor=G_LM_WORK_COPIES)


def check_g_lm(g: np.ndarray, name: str = "G_LM") -> np.ndarray:
    """``g`` as finite float64 [L, H, d_k, d_k] with even d_k, or ``ValueError`` naming the problem."""
    g = np.asarray(g)
    if g.ndim == 5 and g.shape[1] == 1:
        g = g[:, 0]
    if g.ndim != 4 or g.shape[-1] != g.shape[-2] or g.shape[-1] % 2:
        raise ValueError(f"{name}: expected G_LM of shape [L, H, d_k, d_k] with even d_k, got {g.shape}")
    if not np.issubdtype(g.dtype, np.floating) or not np.all(np.isfinite(g)):
        raise ValueError(f"{name}: G_LM must hold finite floats, got dtype {g.dtype}")
    return g.astype(np.float64)


def perron_frobenius(g: np.ndarray) -> dict:
    """Perron-Frobenius applicability per matrix of ``g`` [L, H, d, d].

    PF (Perron's theorem) applies to an entrywise positive matrix: its spectral radius is a simple positive
    eigenvalue with a positive eigenvector.  Reported: the entry minimum per matrix, which matrices are
    entrywise positive / nonnegative, and for positive ones the Perron root (NaN elsewhere) with a check that
    the dominant eigenvalue is indeed real and positive.
    """
    mins = np.min(g, axis=(-2, -1))
    positive = mins > 0.0
    eig = np.linalg.eigvals(g)
    top = np.take_along_axis(eig, np.argmax(np.abs(eig), axis=-1)[..., None], axis=-1)[..., 0]
    radius = np.abs(top)
    real_pos = (top.real > 0) & (np.abs(top.imag) <= 1e-12 * np.maximum(radius, 1e-300))
    return {
        "applicable": positive.tolist(),
        "n_positive": int(positive.sum()),
        "n_nonnegative": int((mins >= 0.0).sum()),
        "n_matrices": int(positive.size),
        "min_entry": summary(mins),
        "perron_root": np.where(positive, radius, np.nan).tolist(),
        "dominant_real_positive_where_applicable": bool(np.all(real_pos[positive])),
    }


def g_lm_report(g: np.ndarray, *, rope_base: float = ROPE_BASE, layout: str = "interleaved",
                source: str = "array") -> dict:
    """Every ``g-lm`` number of G_LM [L, H, d_k, d_k] as a JSON-ready dict (see docs/diagnostics.md)."""
    g = check_g_lm(g, source)
    res = commutant_residual(g, layout)
    frac = commutant_fraction(g, layout)
    sig = singular_values(g)
    return {
        "source": source,
        "shape": list(g.shape),
        "rope_base": float(rope_base),
        "layout": layout,
        "commutant_residual": res.tolist(),
        "commutant_residual_median_by_layer": np.median(res, axis=1).tolist(),
        "commutant_residual_summary": summary(res),
        "commutant_fraction": frac.tolist(),
        "commutant_fraction_summary": summary(frac),
        "spectra": spectrum_report(g),
        "spectra_by_layer": [spectrum_report(x) for x in g],
        "numerical_rank": numerical_rank(sig).tolist(),
        "rank_rule": RANK_RULE,
        "perron_frobenius": perron_frobenius(g),
        "dag_loss": dag_loss(g).tolist(),
        "dag_loss_summary": summary(dag_loss(g)),
    }
