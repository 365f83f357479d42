"""KV-cache and G-cache of PLDR-LLM (spec §8.1-§8.2; paper §4.4).

* :class:`KVCache`, per layer: rotated keys k~ and values v [B, H, T, d_k] and the metric-learner
  output A [B, H, d_k, d_k] frozen at the prompt (PT-v510 ``kvcache = [k~, v, A]``).  With
  ``gram_mode="cumulative"`` the running Gram sum_{s < T} q~_s q~_s^T is stored instead of A, so a
  cached step rebuilds each new row's operator exactly as a full call would (paper eq. 4.16).
* :class:`GCache`, per layer: A_LM, A_P, G_LM [B_G, H, d_k, d_k] (PT-v510 ``Gcache = [A_LM, G_LM]``,
  v510_dag adds A_P).  B_G = 1 broadcasts one operator over the batch (HF ``cache_first_G``).
* :func:`hf_g_buffer` / :func:`from_hf_g_buffer`: the HF combined buffer ``decoder.past_G_values``
  [L, 3, B_G, H, d_k, d_k] holding (A, A_LM, G_LM).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.model import ForwardOutput

#: Slots of the HF combined G buffer ``decoder.past_G_values`` (spec §8.2).
HF_G_SLOTS = ("A", "A_LM", "G_LM")


def _check_block(name: str, arr: np.ndarray | None, config: PLDRConfig, batch: int | None) -> None:
    """Raise ``ValueError`` unless ``arr`` is None or a float64-able [B, H, d_k, d_k] block."""
    if arr is None:
        return
    want = (config.num_heads, config.d_k, config.d_k)
    if arr.ndim != 4 or arr.shape[1:] != want:
        raise ValueError(f"{name} has shape {arr.shape}, expected [B, {want[0]}, {want[1]}, {want[2]}]")
    if batch is not None and arr.shape[0] not in (1, batch):
        raise ValueError(f"{name} has batch size {arr.shape[0]}, expected 1 or {batch}")


@dataclasses.dataclass(frozen=True)
class LayerKV:
    """One layer's KV-cache entry.

    k_rot, v: [B, H, T, d_k] (keys rotated at their absolute positions, values unrotated);
    A: [B, H, d_k, d_k] metric-learner output frozen at the prompt (None without a metric
    learner or with the cumulative Gram); gram: [B, H, d_k, d_k] running Gram of the T cached
    queries (cumulative Gram only, else None).
    """

    k_rot: np.ndarray
    v: np.ndarray
    A: np.ndarray | None
    gram: np.ndarray | None


@dataclasses.dataclass(frozen=True)
class KVCache:
    """KV-cache of every layer plus the padding of the cached keys.

    ``key_padding`` [B, T] (True = padding key) is what a causal cached mask needs; the native
    cached step (mask None) ignores it, as PT-v510 does (spec §7.1).
    """

    layers: tuple[LayerKV, ...]
    key_padding: np.ndarray

    @property
    def length(self) -> int:
        """Number of cached positions T; the next token sits at absolute position T (spec §7.3)."""
        return int(self.layers[0].k_rot.shape[2])

    @property
    def batch_size(self) -> int:
        """Batch size B of the cached keys."""
        return int(self.layers[0].k_rot.shape[0])

    def validate(self, config: PLDRConfig, batch: int) -> None:
        """Raise ``ValueError`` naming the problem if the cache does not fit ``config`` and ``batch``."""
        if len(self.layers) != config.num_layers:
            raise ValueError(f"KV cache has {len(self.layers)} layers, config has {config.num_layers}")
        t = self.length
        want = (batch, config.num_heads, t, config.d_k)
        for i, lk in enumerate(self.layers):
            for name in ("k_rot", "v"):
                arr = getattr(lk, name)
                if arr.shape != want:
                    raise ValueError(f"KV cache layer {i} {name} has shape {arr.shape}, expected {want}")
            _check_block(f"KV cache layer {i} A", lk.A, config, batch)
            _check_block(f"KV cache layer {i} gram", lk.gram, config, batch)
            if config.gram_mode == "cumulative" and lk.gram is None:
                raise ValueError(f"KV cache layer {i} has no running Gram, needed by gram_mode='cumulative'")
        if self.key_padding.shape != (batch, t):
            raise ValueError(f"KV cache key_padding has shape {self.key_padding.shape}, expected {(batch, t)}")


@dataclasses.dataclass(frozen=True)
class LayerG:
    """One layer's G-cache entry: A_LM, A_P, G_LM [B_G, H, d_k, d_k] (A_LM, A_P None for a fixed G)."""

    A_LM: np.ndarray | None
    A_P: np.ndarray | None
    G_LM: np.ndarray

    def as_frozen(self) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
        """The ``frozen_G`` tuple taken by :func:`pldr_ref.layer.decoder_layer`."""
        return (self.A_LM, self.A_P, self.G_LM)


@dataclasses.dataclass(frozen=True)
class GCache:
    """G-cache of every layer (spec §8.1): the deductive outputs frozen at the prompt pass."""

    layers: tuple[LayerG, ...]

    def validate(self, config: PLDRConfig, batch: int) -> None:
        """Raise ``ValueError`` if a block is mis-shaped or the batch is neither 1 nor ``batch``."""
        if config.gram_mode == "cumulative":
            raise ValueError("a G cache freezes one operator per head; gram_mode='cumulative' has one per row")
        if len(self.layers) != config.num_layers:
            raise ValueError(f"G cache has {len(self.layers)} layers, config has {config.num_layers}")
        for i, lg in enumerate(self.layers):
            for name in ("A_LM", "A_P", "G_LM"):
                _check_block(f"G cache layer {i} {name}", getattr(lg, name), config, batch)

    def first_sample(self) -> GCache:
        """Keep sample 0 only (B_G = 1): HF ``cache_first_G`` broadcasts it over the batch (spec §8.2)."""

        def first(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[:1]

        return GCache(tuple(LayerG(first(g.A_LM), first(g.A_P), g.G_LM[:1]) for g in self.layers))


def kv_cache_from_output(output: ForwardOutput, key_padding: np.ndarray) -> KVCache:
    """KV-cache after a (cached or full) call: every layer's k~, v, A and, for the cumulative Gram, the
    running Gram = the last row's cumulative A0 (which already includes any earlier offset)."""
    cumulative = output.config.gram_mode == "cumulative"
    layers = []
    for t in output.layers:
        gram = t.A0[:, :, -1] if cumulative else None
        a = None if cumulative else t.A
        layers.append(LayerKV(t.k_rot, t.v, a, gram))
    return KVCache(tuple(layers), np.asarray(key_padding, dtype=bool))


def g_cache_from_output(output: ForwardOutput) -> GCache:
    """G-cache of the operators a call used (spec §8.1: ``Gcachelst = [[t[0], t[4]]]`` plus A_P)."""
    if output.config.gram_mode == "cumulative":
        raise ValueError("a G cache freezes one operator per head; gram_mode='cumulative' has one per row")
    return GCache(tuple(LayerG(t.A_LM, t.A_P, t.G_LM) for t in output.layers))


def fixed_g_cache(g_lm: np.ndarray, a_lm: np.ndarray | None = None) -> GCache:
    """A G cache holding a given G_LM [L, H, d_k, d_k] (batch 1), as PT-v510 ``Gcachelst_init``.

    ``a_lm`` (same shape, optional) is what the native init lists carry beside G (zeros in the
    released ablation pickles); A_P is not part of that format.
    """
    g = np.asarray(g_lm, dtype=np.float64)
    if g.ndim != 4 or g.shape[-1] != g.shape[-2]:
        raise ValueError(f"G_LM must have shape [L, H, d_k, d_k], got {g.shape}")
    if not np.all(np.isfinite(g)):
        raise ValueError("G_LM contains NaN or inf")
    a = None if a_lm is None else np.asarray(a_lm, dtype=np.float64)
    if a is not None and a.shape != g.shape:
        raise ValueError(f"A_LM has shape {a.shape}, expected {g.shape}")
    return GCache(tuple(LayerG(None if a is None else a[i][None], None, g[i][None]) for i in range(g.shape[0])))


def hf_g_buffer(kv: KVCache, g: GCache) -> np.ndarray:
    """HF ``decoder.past_G_values`` [L, 3, B_G, H, d_k, d_k] = stack(A, A_LM, G_LM) per layer (spec §8.2).

    Missing A or A_LM (fixed G, no metric learner) are stored as zeros, as HF does for ``custom_G_type``.
    B_G is the G cache's batch (1 after :meth:`GCache.first_sample`); A is cut to that batch.
    """
    out = []
    for lk, lg in zip(kv.layers, g.layers, strict=True):
        b_g = lg.G_LM.shape[0]
        a = np.zeros_like(lg.G_LM) if lk.A is None else lk.A[:b_g]
        a_lm = np.zeros_like(lg.G_LM) if lg.A_LM is None else lg.A_LM
        out.append(np.stack([a, a_lm, lg.G_LM]))
    return np.stack(out)


def from_hf_g_buffer(buffer: np.ndarray) -> tuple[tuple[np.ndarray, ...], GCache]:
    """Inverse of :func:`hf_g_buffer`: (A per layer, G cache with A_P = None, as HF keeps no A_P)."""
    buf = np.asarray(buffer, dtype=np.float64)
    if buf.ndim != 6 or buf.shape[1] != len(HF_G_SLOTS):
        raise ValueError(f"HF G buffer must have shape [L, 3, B_G, H, d_k, d_k], got {buf.shape}")
    a = tuple(buf[:, 0])
    return a, GCache(tuple(LayerG(buf[i, 1], None, buf[i, 2]) for i in range(buf.shape[0])))
