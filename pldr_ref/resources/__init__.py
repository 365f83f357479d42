"""Locator of the data files that ship inside the package (the one place that knows their paths).

Bundled files (provenance in ``README.md`` beside this module):

* ``g_lm_pldrv51_110m_1.npz``: the trained G_LM tensors [L=5, H=14, d_k=64, d_k=64] (float32) of the
  released checkpoint PLDR-LLM-v51-110M-1 (Apache-2.0, the PLDR-LLM authors), key ``G_LM``.
* ``lean_catalog.md``: the catalog of the 79 Lean 4 theorems of ``burcgokden/PLDR-LLM-Math-Foundations``
  at commit :data:`LEAN_COMMIT`, with hypotheses and test ideas.

Every reader of these files goes through this module; nothing in the repository looks outside it.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path

import numpy as np

#: File name of the trained PLDRv51-110M-1 G_LM tensors.
TRAINED_G_LM_FILE = "g_lm_pldrv51_110m_1.npz"
#: Name of the array inside :data:`TRAINED_G_LM_FILE`.
TRAINED_G_LM_KEY = "G_LM"
#: Shape [layer, head, d_k, d_k] of the trained tensors.
TRAINED_G_LM_SHAPE = (5, 14, 64, 64)
#: SHA-256 of the bundled npz (a tampered or truncated copy is refused).
TRAINED_G_LM_SHA256 = "724f354c0554c6acfb1454da89c9aa592b8e81e8bf96953d8c64370fb5b84cef"
#: RoPE base and head width of the checkpoint the tensors come from (interleaved planes).
TRAINED_ROPE_BASE = 10000.0
TRAINED_D_K = 64

#: File name of the Lean theorem catalog.
LEAN_CATALOG_FILE = "lean_catalog.md"
#: Commit of burcgokden/PLDR-LLM-Math-Foundations the catalog was read at.
LEAN_COMMIT = "78ba3fb0f48ab5438cd61a4082d550723e76b06c"
#: Lean repository the catalog describes.
LEAN_REPOSITORY = "burcgokden/PLDR-LLM-Math-Foundations"


def resource_path(name: str) -> Path:
    """Filesystem path of the bundled file ``name``; ``FileNotFoundError`` naming it when absent."""
    path = Path(str(resources.files(__name__).joinpath(name)))
    if not path.is_file():
        raise FileNotFoundError(f"bundled data file {name!r} is missing from the installed package (expected {path})")
    return path


def trained_g_lm_path() -> Path:
    """Path of the bundled trained G_LM ``.npz``."""
    return resource_path(TRAINED_G_LM_FILE)


@functools.lru_cache(maxsize=1)
def trained_g_lm() -> np.ndarray:
    """Trained G_LM [5, 14, 64, 64] widened exactly to float64, read-only; hash- and shape-checked."""
    path = trained_g_lm_path()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != TRAINED_G_LM_SHA256:
        raise ValueError(f"{path}: SHA-256 {digest} does not match the bundled file's {TRAINED_G_LM_SHA256}")
    with np.load(path, allow_pickle=False) as npz:
        g = np.asarray(npz[TRAINED_G_LM_KEY], dtype=np.float64)
    if g.shape != TRAINED_G_LM_SHAPE or not np.all(np.isfinite(g)):
        raise ValueError(f"{path}: expected finite {TRAINED_G_LM_KEY} of shape {TRAINED_G_LM_SHAPE}, got {g.shape}")
    g.setflags(write=False)
    return g


def lean_catalog_path() -> Path:
    """Path of the bundled Lean theorem catalog (markdown)."""
    return resource_path(LEAN_CATALOG_FILE)
