"""Small models shared by the tests/test_inference_*.py files (not a test module)."""

from __future__ import annotations

import numpy as np

from pldr_ref import PLDRConfig, init_params, perturb_params
from pldr_ref.inference.modes import external_g_config, params_with_external_g
from pldr_ref.params import Params
from pldr_ref.resources import trained_g_lm_path

#: The trained G_LM bundled in the package.
G_FILE = trained_g_lm_path()


def model(preset: str = "tiny", seed: int = 1, **overrides: object) -> Params:
    """Random parameters with perturbed norms and biases (nothing at its init value)."""
    config = PLDRConfig.preset(preset, **overrides)
    return perturb_params(init_params(config, seed), seed + 100)


def external_g_model(seed: int = 1) -> Params:
    """L=5, H=14, d_k=64 model carrying the trained PLDRv51-110M-1 G_LM as a fixed external G."""
    config = external_g_config()
    return params_with_external_g(perturb_params(init_params(config, seed), seed + 100), G_FILE)


def tokens(batch: int, length: int, vocab: int, seed: int = 0) -> np.ndarray:
    """Token ids in [1, vocab) (no pad id 0)."""
    return np.random.default_rng(seed).integers(1, vocab, size=(batch, length))


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| (0 when equal)."""
    d = float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
    return 0.0 if d == 0.0 else d / float(np.max(np.abs(b)))
