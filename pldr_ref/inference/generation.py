"""Token generation: greedy, temperature, top-k and top-p sampling with a seeded NumPy generator.

Filtering follows PT-v510 ``generate_text`` (spec §8.1): logits / temperature, then top-p, then
top-k; removed tokens get :data:`pldr_ref.constants.FILTERED_LOGIT`.  Sampling draws one
uniform number per row from a ``numpy.random.Generator`` and inverts the CDF, so a run is
reproducible from its seed (torch's multinomial stream is not reproduced).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from pldr_ref.attention import SoftmaxKernel
from pldr_ref.constants import FILTERED_LOGIT
from pldr_ref.inference.cache import GCache
from pldr_ref.inference.modes import InferenceMode, advance, prefill, resolve_mode
from pldr_ref.model import ForwardOutput
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable

STRATEGIES = ("greedy", "sample")


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How a token is chosen from the final-row logits.

    ``strategy``: ``"greedy"`` (argmax, lowest index on ties) or ``"sample"``.  For sampling:
    ``temperature`` > 0 divides the logits; ``top_p`` in (0, 1] (1 = off) keeps the sorted tokens
    whose cumulative probability is <= top_p (at least one, PT-v510 rule); ``top_k`` >= 0 (0 = off)
    keeps logits >= the k-th largest.
    """

    strategy: str = "greedy"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"SamplingConfig.strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        t = self.temperature
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            raise ValueError(f"SamplingConfig.temperature={self.temperature!r} must be a finite float > 0")
        if not isinstance(self.top_k, (int, np.integer)) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ValueError(f"SamplingConfig.top_k={self.top_k!r} must be an int >= 0 (0 = off)")
        if not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"SamplingConfig.top_p={self.top_p!r} must be in (0, 1] (1 = off)")


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, max-shifted: z - max - log sum exp(z - max)."""
    m = np.max(logits, axis=-1, keepdims=True)
    shifted = logits - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def top_k_filter(logits: np.ndarray, k: int) -> np.ndarray:
    """Logits [B, V] with every entry below the k-th largest set to FILTERED_LOGIT (k = 0: unchanged).
    Ties with the k-th largest are kept, as ``torch.where(logits < min_values, ...)`` does."""
    if k == 0:
        return logits
    if k > logits.shape[-1]:
        raise ValueError(f"top_k={k} exceeds the vocabulary size {logits.shape[-1]}")
    kth = np.sort(logits, axis=-1)[..., -k][..., None]
    return np.where(logits < kth, FILTERED_LOGIT, logits)


def top_p_filter(logits: np.ndarray, p: float) -> np.ndarray:
    """Nucleus filter of PT-v510: with sorted descending logits s and c = cumsum(softmax(s)),
    n = max(#{c <= p} - 1, 0); entries below s[n] get FILTERED_LOGIT (p = 1: unchanged)."""
    if p >= 1.0:
        return logits
    s = -np.sort(-logits, axis=-1)
    c = np.cumsum(np.exp(log_softmax(s)), axis=-1)
    n = np.maximum(np.sum(c <= p, axis=-1) - 1, 0)
    threshold = np.take_along_axis(s, n[..., None], axis=-1)
    return np.where(logits < threshold, FILTERED_LOGIT, logits)


def filter_logits(logits: np.ndarray, sampling: SamplingConfig) -> np.ndarray:
    """Temperature, then top-p, then top-k (the PT-v510 order); [B, V] -> [B, V]."""
    z = logits / sampling.temperature if sampling.temperature != 1.0 else logits
    return top_k_filter(top_p_filter(z, sampling.top_p), sampling.top_k)


def sample_from_logits(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``logits`` [B, V] by CDF inversion of softmax with one uniform draw per row.

    Index = #{v : CDF_v <= u * CDF_V}; a filtered token (probability exactly 0) is never chosen.
    """
    prob = np.exp(log_softmax(logits))
    cdf = np.cumsum(prob, axis=-1)
    u = rng.random(logits.shape[0])[:, None] * cdf[:, -1:]
    return np.minimum(np.sum(cdf <= u, axis=-1), logits.shape[-1] - 1)


def choose_tokens(logits: np.ndarray, sampling: SamplingConfig, rng: np.random.Generator) -> np.ndarray:
    """Next token per row [B] from final-row logits [B, V]."""
    if sampling.strategy == "greedy":
        return np.argmax(logits, axis=-1)
    return sample_from_logits(filter_logits(logits, sampling), rng)


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """Output of :func:`generate`.

    tokens [B, n]: generated tokens; sequences [B, T+n]: prompt + tokens; step_logits [n, B, V]:
    the unfiltered final-row logits each token was chosen from; traces: the forward trace of each of
    the n calls (prompt pass first) when requested, else None; mode: the mode's name.
    """

    tokens: np.ndarray
    sequences: np.ndarray
    step_logits: np.ndarray
    traces: tuple[ForwardOutput, ...] | None
    mode: str


def make_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A ``numpy.random.Generator``: the given one, or PCG64 seeded with ``seed`` (None = unseeded)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.Generator(np.random.PCG64(seed))


def generate(
    params: Params,
    prompt_ids: np.ndarray,
    max_new_tokens: int,
    *,
    mode: str | InferenceMode = "kv+g",
    sampling: SamplingConfig | None = None,
    seed: int | np.random.Generator | None = 0,
    eos_id: int | None = None,
    return_traces: bool = False,
    attention_mask: np.ndarray | None = None,
    initial_g_cache: GCache | None = None,
    rope_table: RopeTable | None = None,
    position_ids: np.ndarray | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> GenerationResult:
    """Autoregressive generation (paper eq. 4.8 loop; spec §8.1): one call per generated token.

    The prompt pass is a full causal forward of ``prompt_ids`` [B, T]; each later call is made as
    ``mode`` says (see :mod:`pldr_ref.inference.modes`).  Generation stops after ``max_new_tokens``
    or once every row has produced ``eos_id`` (rows that finished early keep being extended).
    In mode ``"hf-generate-5.x"`` with a left-padded ``attention_mask`` the RoPE positions are HF ``generate``'s
    per-row ``cumsum(mask) - 1`` (padding at 0 in transformers 5.x, at 1 in mode ``"hf-generate-4.x"``); explicit
    ``position_ids`` [B, T] of the prompt override them, and each row's later tokens continue from its last
    position.  ``rope_table`` is the table of ``rope_table="explicit"``, ``softmax_kernel`` the float32 softmax of
    ``softmax_precision="explicit"``.  ``check_finite_values=False`` lets NaN/inf logits through every call
    instead of raising ``FloatingPointError`` (HF eager on left padding returns NaN logits; a NaN row's greedy token
    is then NumPy's argmax of it).  ``ops``: the arithmetic of every call (:class:`pldr_ref.ops.Ops`; default
    float64).
    """
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    s = SamplingConfig() if sampling is None else sampling
    m = resolve_mode(mode)
    rng = make_rng(seed)
    step, state = prefill(params, prompt_ids, m, attention_mask=attention_mask, initial_g_cache=initial_g_cache,
                          rope_table=rope_table, position_ids=position_ids, softmax_kernel=softmax_kernel,
                          check_finite_values=check_finite_values, ops=ops)
    logits = step.logits[:, -1]
    tokens, all_logits, traces = [], [], [step.output]
    done = np.zeros(logits.shape[0], dtype=bool)
    for i in range(max_new_tokens):  # sequential by definition: each token feeds the next call
        tok = choose_tokens(logits, s, rng)
        tokens.append(tok)
        all_logits.append(logits)
        if eos_id is not None:
            done |= tok == eos_id
            if done.all():
                break
        if i + 1 < max_new_tokens:
            new_logits, step, state = advance(params, state, tok[:, None], m)
            logits = new_logits[:, -1]
            traces.append(step.output)
    toks = np.stack(tokens, axis=1)
    seqs = np.concatenate([np.asarray(prompt_ids, dtype=np.int64), toks], axis=1)
    return GenerationResult(toks, seqs, np.stack(all_logits), tuple(traces) if return_traces else None, m.name)
