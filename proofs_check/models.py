"""Small deterministic pldr_ref models whose real forward traces feed the model-level checks."""

from __future__ import annotations

import functools

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.model import ForwardOutput, forward
from pldr_ref.params import Params, init_params, perturb_params


@functools.lru_cache(maxsize=8)
def tiny_params(seed: int = 0, **overrides: object) -> Params:
    """``tiny`` preset (2 layers, 2 heads, d_k = 8) with every norm and PLGA bias perturbed off its init."""
    config = PLDRConfig.preset("tiny", **overrides)
    return perturb_params(init_params(config, seed), seed + 1)


def token_batch(seed: int, batch: int, length: int, vocab: int) -> np.ndarray:
    """Token ids [batch, length] in 1..vocab-1 (no pad id 0, so no padding mask)."""
    return np.random.default_rng(seed).integers(1, vocab, size=(batch, length))


def tiny_forward(seed: int = 0, length: int = 6) -> ForwardOutput:
    """Real forward trace of :func:`tiny_params` on a fixed batch of two sequences (recomputed on every call, so
    that the traced run of a check really calls ``forward``)."""
    params = tiny_params(seed)
    return forward(params, token_batch(seed, 2, length, params.config.vocab_size))
