"""The trained G_LM tensors of PLDR-LLM-v51-110M-1 ([5, 14, 64, 64] float32) from ``../shared/data``."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

#: File name of the released G_LM tensors (see ``shared/data/README.md``).
G_LM_FILE = "g_lm_pldrv51_110m_1.npz"

#: Environment variable that may point at the ``shared/data`` folder when it is not beside the repository.
DATA_DIR_ENV = "PLDR_REF_SHARED_DATA"


def data_dir() -> Path:
    """``$PLDR_REF_SHARED_DATA`` if set, else ``<repo>/../shared/data``."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


@functools.lru_cache(maxsize=1)
def real_g_lm() -> np.ndarray:
    """G_LM [layer=5, head=14, d_k=64, d_k=64] widened exactly to float64 (read-only).

    Raises ``FileNotFoundError`` naming the expected path when the file is absent.
    """
    path = data_dir() / G_LM_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"real G_LM tensors not found at {path}; place shared/data beside the repository or set {DATA_DIR_ENV}"
        )
    with np.load(path, allow_pickle=False) as npz:
        g = np.asarray(npz["G_LM"], dtype=np.float64)
    if g.shape != (5, 14, 64, 64) or not np.all(np.isfinite(g)):
        raise ValueError(f"{path}: expected finite G_LM of shape (5, 14, 64, 64), got {g.shape}")
    g.setflags(write=False)
    return g


#: RoPE base and head width of the checkpoint the tensors come from (interleaved planes).
REAL_ROPE_BASE: float = 10000.0
REAL_D_K: int = 64
