"""One diagnosed model run: parameters, prompts, the traced prompt pass and the options every section reads.

A :class:`ModelRun` is built once per ``diagnose model`` call; each section (spectra, order parameter, ...)
is a function ``section(run) -> dict`` that reads the prompt-pass trace ``run.out`` and may make calls of
its own (generation, recomputation).  ``final_row_forward`` is the forward map restricted to the logits of
the last row, for the many prefix recomputations of the decoding and scoring sections.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.inference.cache import GCache, KVCache, LayerG, LayerKV
from pldr_ref.inference.modes import DecodeState, InferenceMode
from pldr_ref.layer import LayerTrace
from pldr_ref.model import ForwardOutput, depth_pass, forward, sequence_mask
from pldr_ref.params import Params


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """Knobs of the model sections (defaults sized for ``v510-110m`` with 8 prompts of 40 tokens in minutes).

    decode_steps / decode_prompts: greedy steps and prompts of the cached-vs-recomputed comparison (every step
    recomputes the whole prefix, so its cost is steps x prompts forward calls); decode_mode: the cached inference mode
    compared against full recomputation; op_steps / op_seeds: length and seeds of the two sampled continuations
    of the order-parameter protocol, op_prompts the prompts it uses (each continuation is recomputed
    uncached); jacobian_rows / pool_rows: rows per prompt for Jacobians / pairwise ratios;
    pairs: pairwise ratios drawn per layer (each of within- and cross-prompt); online_prompts / online_rows:
    prompts of the online-contract checks and rows of its sequential scoring (one prefix call per row); seed: the
    sampling seed of rows.
    """

    decode_steps: int = 6
    decode_prompts: int = 4
    decode_mode: str = "kv+g"
    op_steps: int = 16
    op_prompts: int = 4
    op_seeds: tuple[int, int] = (100, 101)
    jacobian_rows: int = 16
    pool_rows: int = 32
    pairs: int = 200
    online_prompts: int = 1
    online_rows: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("decode_steps", "op_steps", "jacobian_rows", "pool_rows", "pairs", "online_prompts",
                     "decode_prompts", "online_rows", "op_prompts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"ModelOptions.{name} must be an int >= 1, got {v!r}")
        if len(self.op_seeds) != 2 or self.op_seeds[0] == self.op_seeds[1]:
            raise ValueError(f"ModelOptions.op_seeds must be two different seeds, got {self.op_seeds!r}")


@dataclasses.dataclass(frozen=True)
class ModelRun:
    """params, prompt ids [B, T] (no padding), the traced prompt pass ``out`` and the options."""

    params: Params
    ids: np.ndarray
    out: ForwardOutput
    options: ModelOptions
    label: str

    @property
    def config(self) -> PLDRConfig:
        """The model configuration."""
        return self.params.config


def random_prompts(config: PLDRConfig, n: int, length: int, seed: int = 0) -> np.ndarray:
    """n prompts of ``length`` token ids drawn uniformly from 1..V-1 (never the pad id 0), int64 [n, length]."""
    if n < 1 or length < 2:
        raise ValueError(f"--random-prompts must be >= 1 and --length >= 2, got {n} and {length}")
    if length > config.max_seq_len:
        raise ValueError(f"--length {length} exceeds the model's max_seq_len {config.max_seq_len}")
    rng = np.random.Generator(np.random.PCG64(seed))
    ids = rng.integers(1, config.vocab_size, size=(n, length), dtype=np.int64)
    return np.where(ids == config.pad_id, (ids % (config.vocab_size - 1)) + 1, ids)


def make_run(params: Params, ids: np.ndarray, options: ModelOptions | None = None, label: str = "model") -> ModelRun:
    """A :class:`ModelRun`: validates ``ids`` [B, T] (T >= 2, no pad id) and runs the traced prompt pass."""
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[1] < 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"prompts must be integer token ids [B, T] with T >= 2, got shape {ids.shape}")
    if np.any(ids == params.config.pad_id):
        raise ValueError(f"prompts must not contain the pad id {params.config.pad_id} (diagnostics use unpadded rows)")
    return ModelRun(params, ids.astype(np.int64), forward(params, ids), options or ModelOptions(), label)


def layer_pass(params: Params, ids: np.ndarray) -> tuple[tuple[LayerTrace, ...], np.ndarray]:
    """(every layer's trace, final hidden states [B, S, d]) of the full causal call on ``ids``, without the LM head.

    The same layer calls as :func:`pldr_ref.model.forward` (its traces are bitwise equal); sections that need
    the deductive tensors of a recomputation but not its [B, S, V] logits use this to skip the LM-head GEMM.
    """
    positions, mask = sequence_mask(params.config, ids)
    run = depth_pass(params, ids, positions=positions, mask=mask, head="none")
    return run.layers, run.hidden


def final_row_forward(params: Params, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(logits of the last row [B, V], G_LM per layer [L, B, H, d_k, d_k]) of the full causal call on ``ids``.

    The same layer calls as :func:`pldr_ref.model.forward`; only the LM head is restricted to the last row
    (its G_LM are bitwise those of ``forward``; the logits agree up to the LM-head GEMM's summation order).
    """
    positions, mask = sequence_mask(params.config, ids)
    run = depth_pass(params, ids, positions=positions, mask=mask, head="last")
    return run.logits, np.stack([t.G_LM for t in run.layers])


def prompt_state(run: ModelRun, mode: InferenceMode, n: int) -> tuple[np.ndarray, DecodeState]:
    """(final-row logits [n, V], decode state) of the first ``n`` prompts after the prompt pass, built from the
    traced prompt pass itself: the caches ``mode`` keeps are exactly those ``pldr_ref.inference.modes.prefill``
    would fill (its prompt call is ``forward`` on the same ids), without a second prompt pass."""
    c = run.config
    ids = run.ids[:n]
    cumulative = c.gram_mode == "cumulative"
    kv = g = None
    if mode.kv_cache:
        layers = tuple(LayerKV(t.k_rot[:n], t.v[:n], None if cumulative or t.A is None else t.A[:n],
                               t.A0[:n, :, -1] if cumulative else None) for t in run.out.layers)
        kv = KVCache(layers, ids == c.pad_id if mode.pad_from_token else np.zeros(ids.shape, dtype=bool))
    if mode.g_cache:
        if cumulative:
            raise ValueError(f"mode {mode.name!r} freezes one G per head; gram_mode='cumulative' has one per row")

        def first(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[:n]

        g = GCache(tuple(LayerG(first(t.A_LM), first(t.A_P), t.G_LM[:n]) for t in run.out.layers))
        if mode.cache_first_G:
            g = g.first_sample()
    return run.out.logits[:n, -1], DecodeState(ids, None, kv, g)


def stack(run: ModelRun, name: str) -> np.ndarray | None:
    """Trace entry ``name`` of every layer stacked [L, ...], or None when the configuration does not compute it."""
    arrs = [getattr(t, name) for t in run.out.layers]
    return None if any(a is None for a in arrs) else np.stack(arrs)
