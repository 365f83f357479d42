"""PNG figures of ``pldr-ref diagnose`` (optional: needs the ``plots`` extra, matplotlib, imported lazily).

Each function takes the JSON document of its subcommand (plus analytic inputs it can recompute) and writes
one PNG; :func:`write_plots` writes every figure of a document into a folder and returns their paths.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pldr_ref.diagnostics.twirl import difference_frequencies, twirl_multiplier


def _pyplot():
    """matplotlib.pyplot with the file-only Agg backend, or ImportError naming the extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'pldr-ref[plots]'") from exc
    return plt


def plot_twirl(doc: dict, path: Path) -> Path:
    """m(omega, S) against omega (log axes) for every S, with the per-frequency bound min(1, 1/(S |sin(omega/2)|))
    (whose maximum over the spectrum is the uniform bound min(1, C_Theta / S))."""
    plt = _pyplot()
    w = np.sort(difference_frequencies(doc["d_k"], doc["rope_base"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s, row in doc["by_seq_len"].items():
        line, = ax.loglog(w, np.maximum(twirl_multiplier(w, int(s)), 1e-12), ".", ms=2, label=f"m(omega, {s})")
        envelope = np.minimum(1.0, 1.0 / (int(s) * np.abs(np.sin(w / 2.0))))
        ax.loglog(w, envelope, color=line.get_color(), ls="--", lw=1,
                  label=f"min(1, 1/(S|sin(w/2)|)); C_Theta/{s} = {row['uniform_bound']:.3g}")
    ax.set_xlabel("difference frequency omega (rad / position)")
    ax.set_ylabel("twirl multiplier |sin(S w/2)| / (S |sin(w/2)|)")
    ax.set_title(f"RoPE twirl, d_k = {doc['d_k']}, base = {doc['rope_base']:g}, C_Theta = {doc['C_theta']:.4g}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_residual_heatmap(doc: dict, path: Path) -> Path:
    """Commutant residual per layer (rows) and head (columns)."""
    plt = _pyplot()
    res = np.array(doc["commutant_residual"], dtype=float)
    fig, ax = plt.subplots(figsize=(1 + 0.45 * res.shape[1], 1.2 + 0.45 * res.shape[0]))
    im = ax.imshow(res, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title("commutant residual ||G - Pi G||_F / ||G||_F")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_spectra(spectra: dict[str, dict], path: Path, title: str) -> Path:
    """Median normalised singular spectra sigma_i / sigma_1 (log y) of each named operator."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rep in spectra.items():
        if not isinstance(rep, dict) or "median_normalised_spectrum" not in rep:
            continue
        s = np.array([np.nan if v is None else v for v in rep["median_normalised_spectrum"]], dtype=float)
        ax.semilogy(np.arange(1, s.size + 1), np.maximum(s, 1e-300), label=name)
    from pldr_ref.diagnostics.spectra import EPS_FLOAT32, RANK_FACTOR

    ax.axhline(RANK_FACTOR * EPS_FLOAT32, color="k", ls=":", lw=1, label="rank threshold 64 eps_f32")
    ax.set_xlabel("index i")
    ax.set_ylabel("median sigma_i / sigma_1")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_decoding(sec: dict, path: Path) -> Path:
    """Per-step 2 max |dlogit| (solid) and top-1 margin (dashed) of every prompt (2B < margin is the criterion);
    steps where cached and recomputed logits agree exactly are gaps."""
    plt = _pyplot()
    d = np.array(sec["per_step"]["dlogit"], dtype=float)
    m = np.array(sec["per_step"]["margin"], dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = np.arange(d.shape[1])
    with np.errstate(invalid="ignore"):
        d = np.where(d > 0, d, np.nan)  # exact agreement (0) has no place on a log axis: left as a gap
        m = np.where(m > 0, m, np.nan)
    for b in range(d.shape[0]):
        line, = ax.semilogy(steps, 2 * d[b], lw=1, marker=".")
        ax.semilogy(steps, m[b], ls="--", lw=1, color=line.get_color())
    ax.set_xlabel("decoding step")
    ax.set_ylabel("2 max|dlogit| (solid), margin (dashed)")
    ax.set_title(f"cached ({sec['mode']}) vs recomputed greedy decoding")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(doc: dict, folder: str | os.PathLike[str]) -> list[Path]:
    """Every figure of a diagnose document into ``folder``; returns the written paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    kind = doc["kind"]
    if kind == "twirl":
        return [plot_twirl(doc, out / "twirl_multipliers.png")]
    if kind == "g-lm":
        return [plot_residual_heatmap(doc, out / "g_lm_commutant_residual.png"),
                plot_spectra({f"layer {i}": rep for i, rep in enumerate(doc["spectra_by_layer"])},
                             out / "g_lm_spectra.png", "G_LM singular spectra (median over heads)")]
    paths = []
    sec = doc["sections"]
    if "spectra" in sec:
        ops = {k: sec["spectra"].get(k) for k in ("A0", "A", "A_LM", "G_LM")}
        paths.append(plot_spectra(ops, out / "model_spectra.png", f"{doc['model']}: singular spectra"))
    if "decoding" in sec:
        paths.append(plot_decoding(sec["decoding"], out / "model_decoding.png"))
    return paths
