"""The five training / evaluation semantics of paper §4.5, under the paper's names.

1. **blockwise cross-entropy** (paper eq. 4.10, the training objective; spec §9): one full-block
   call on seq[:, :-1], cross-entropy at every aligned row; native mask on target id 0
   (:func:`blockwise_cross_entropy`) or the HF variant ignoring -100 (:func:`hf_blockwise_cross_entropy`).
2. **sequential autoregressive NLL**: -sum_t log p(x_{t+1} | x_{0:t}) by repeated final-row prefix
   calls (:func:`sequential_nll`).  Equals 1. whenever historical-row prefix consistency (paper
   Definition 4.8, eq. 4.14) holds at the visited inputs.
3. **one-pass block scoring** of candidate continuations (the published evaluation protocol): one
   call on context + candidate, candidate log-probabilities summed (:func:`one_pass_block_scores`).
4. **sequential generation**: the deployed online loop of eq. 4.8 (:func:`sequential_generation`).
5. **prompt-frozen cache inference**: the KV/G-cache semantics of paper §4.4, caches frozen at the
   prompt (:func:`prompt_frozen_scores`).

:func:`scoring_gap` measures blockwise against sequential scoring on given inputs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pldr_ref.attention import SoftmaxKernel
from pldr_ref.constants import HF_IGNORE_INDEX, PAD_ID
from pldr_ref.inference.explicit import ExplicitInputs
from pldr_ref.inference.generation import GenerationResult, SamplingConfig, generate, log_softmax
from pldr_ref.inference.modes import InferenceMode, teacher_forced_logits
from pldr_ref.model import forward
from pldr_ref.ops import FLOAT64_OPS, Ops
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable

#: The five semantics of paper §4.5, by the paper's names.
SEMANTICS = (
    "blockwise cross-entropy",
    "sequential autoregressive NLL",
    "one-pass block scoring",
    "sequential generation",
    "prompt-frozen cache inference",
)


@dataclasses.dataclass(frozen=True)
class TokenScores:
    """Per-target negative log-likelihoods nll [B, T] and the mask of counted targets [B, T]."""

    nll: np.ndarray
    mask: np.ndarray

    @property
    def total(self) -> float:
        """Sum of the counted NLLs (sequential NLL; perplexity = exp(mean))."""
        return float(np.sum(np.where(self.mask, self.nll, 0.0)))

    @property
    def mean(self) -> float:
        """Token mean sum(m * CE) / sum(m) over the batch (the native loss, spec §9)."""
        n = int(np.sum(self.mask))
        if n == 0:
            raise ValueError("no target is counted (every target is masked)")
        return self.total / n


def _as_batch(token_ids: np.ndarray, min_len: int = 2) -> np.ndarray:
    ids = np.asarray(token_ids)
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[1] < min_len:
        raise ValueError(f"token ids must be [B, T] with T >= {min_len}, got shape {np.shape(token_ids)}")
    return ids


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """CE_{b,t} = logsumexp(z_{b,t}) - z_{b,t}[y_{b,t}] for logits [B, T, V], targets [B, T] (in range)."""
    lp = log_softmax(logits)
    return -np.take_along_axis(lp, targets[..., None], axis=-1)[..., 0]


def masked_cross_entropy(logits: np.ndarray, targets: np.ndarray, pad_id: int = PAD_ID) -> TokenScores:
    """Native masked CE (TF/PT ``masked_loss_function``): targets equal to ``pad_id`` are not counted."""
    t = np.asarray(targets)
    return TokenScores(token_nll(logits, t), t != pad_id)


def hf_causal_lm_loss(logits: np.ndarray, labels: np.ndarray, ignore_index: int = HF_IGNORE_INDEX) -> TokenScores:
    """HF ``ForCausalLMLoss``: labels [B, T] unshifted; row t predicts labels[t+1]; ``ignore_index`` not counted.

    (HF upcasts the logits to float32 first; this reference stays in float64.)  Returns [B, T-1] scores.
    """
    lab = np.asarray(labels)[:, 1:]
    keep = lab != ignore_index
    safe = np.where(keep, lab, 0)
    return TokenScores(np.where(keep, token_nll(logits[:, :-1], safe), 0.0), keep)


def blockwise_cross_entropy(
    params: Params,
    token_ids: np.ndarray,
    pad_id: int = PAD_ID,
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> TokenScores:
    """Semantics 1 (native): one call on tar_inp = seq[:, :-1], CE against tar_real = seq[:, 1:], pad id masked.

    ``.mean`` is the native loss; ``.total`` the summed NLL comparable with :func:`sequential_nll`.
    """
    ids = _as_batch(token_ids)
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    x.check_length(ids.shape[1])
    out = forward(params, ids[:, :-1], **x.prefix(ids.shape[1] - 1).forward_kwargs())
    return masked_cross_entropy(out.logits, ids[:, 1:], pad_id)


def hf_blockwise_cross_entropy(
    params: Params,
    input_ids: np.ndarray,
    labels: np.ndarray,
    attention_mask: np.ndarray | None = None,
    *,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> TokenScores:
    """Semantics 1 (HF variant): one call on ``input_ids`` (padding from ``attention_mask`` only, not id 0),
    loss over labels shifted internally, -100 ignored."""
    ids = _as_batch(input_ids)
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    x.check_length(ids.shape[1])
    out = forward(params, ids, pad_masking=False, **x.forward_kwargs())
    return hf_causal_lm_loss(out.logits, labels)


def prefix_final_row_logits(
    params: Params,
    token_ids: np.ndarray,
    start: int = 1,
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> np.ndarray:
    """Logits [B, T-start+1, V]: row j is the final row of the prefix call on x_{0 : start+j} (paper eq. 4.8)."""
    ids = _as_batch(token_ids, min_len=1)
    if not 1 <= start <= ids.shape[1]:
        raise ValueError(f"start={start} must be in [1, {ids.shape[1]}]")
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    x.check_length(ids.shape[1])
    # one call per prefix is the definition of this semantics: the calls see different inputs
    rows = [forward(params, ids[:, :t], **x.prefix(t).forward_kwargs()).logits[:, -1]
            for t in range(start, ids.shape[1] + 1)]
    return np.stack(rows, axis=1)


def sequential_nll(
    params: Params,
    token_ids: np.ndarray,
    pad_id: int = PAD_ID,
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> TokenScores:
    """Semantics 2: nll[b, t] = -log p(x_{t+1} | x_{0:t}) from the final row of the prefix call on x_{0:t},
    t = 0..T-2; targets equal to ``pad_id`` are not counted (the blockwise mask)."""
    ids = _as_batch(token_ids)
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    x.check_length(ids.shape[1])
    logits = prefix_final_row_logits(params, ids[:, :-1], **x.prefix(ids.shape[1] - 1).forward_kwargs())
    return masked_cross_entropy(logits, ids[:, 1:], pad_id)


def _candidate_list(candidates: list[np.ndarray] | np.ndarray) -> list[np.ndarray]:
    cands = [np.asarray(c, dtype=np.int64).reshape(-1) for c in candidates]
    if not cands or any(c.size == 0 for c in cands):
        raise ValueError("candidates must be a non-empty list of non-empty token sequences")
    return cands


def _context(context: np.ndarray, x: ExplicitInputs) -> np.ndarray:
    ctx = np.asarray(context, dtype=np.int64).reshape(-1)
    if ctx.size == 0:
        raise ValueError("context must hold at least one token")
    x.check_length(ctx.size, "the context")
    return ctx


def one_pass_block_scores(
    params: Params,
    context: np.ndarray,
    candidates: list[np.ndarray],
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> np.ndarray:
    """Semantics 3: for each candidate c, one call on context + c; score = sum_j log p(c_j | row n+j-1).

    context: 1-D ids (n >= 1); candidates: 1-D id sequences.  Returns [n_candidates] log-probabilities.
    Candidates are scored in separate calls because padding them to one batch would change the
    global Gram (paper §4.5, padding at the Gram boundary).
    """
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    ctx = _context(context, x)
    scores = []
    for c in _candidate_list(candidates):  # ragged lengths: one unpadded call each
        ids = np.concatenate([ctx, c])[None]
        lp = log_softmax(forward(params, ids, **x.extended(c.size).forward_kwargs()).logits[0, ctx.size - 1 : -1])
        scores.append(np.sum(lp[np.arange(c.size), c]))
    return np.array(scores)


def sequential_candidate_scores(
    params: Params,
    context: np.ndarray,
    candidates: list[np.ndarray],
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> np.ndarray:
    """Chain-rule scores of candidates: sum_j log p(c_j | context + c_{<j}) by final-row prefix calls."""
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    ctx = _context(context, x)
    scores = []
    for c in _candidate_list(candidates):  # ragged lengths: one set of prefix calls each
        ids = np.concatenate([ctx, c])[None]
        xc = x.extended(c.size).prefix(ids.shape[1] - 1)
        lp = log_softmax(prefix_final_row_logits(params, ids[:, :-1], start=ctx.size, **xc.forward_kwargs())[0])
        scores.append(np.sum(lp[np.arange(c.size), c]))
    return np.array(scores)


def sequential_generation(
    params: Params,
    prompt_ids: np.ndarray,
    max_new_tokens: int,
    *,
    sampling: SamplingConfig | None = None,
    seed: int | np.random.Generator | None = 0,
    eos_id: int | None = None,
    return_traces: bool = False,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> GenerationResult:
    """Semantics 4: the deployed online loop (eq. 4.8): every step is a fresh call on the known prefix
    (native mode ``"none"``, everything recomputed)."""
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    return generate(
        params, _as_batch(prompt_ids, 1), max_new_tokens, mode="none", sampling=sampling, seed=seed,
        eos_id=eos_id, return_traces=return_traces, **x.forward_kwargs(),
    )


def prompt_frozen_scores(
    params: Params,
    prompt_ids: np.ndarray,
    continuation: np.ndarray,
    mode: str | InferenceMode = "kv+g",
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> np.ndarray:
    """Semantics 5: teacher-forced log p(y_j | prompt, y_{<j}) with the caches frozen at the prompt pass.

    prompt_ids [B, T], continuation [B, n].  The continuation is fed one token per call, as the
    native cached step does.  Returns log-probabilities [B, n].
    """
    cont = _as_batch(continuation, 1)
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    lp = log_softmax(teacher_forced_logits(params, _as_batch(prompt_ids, 1), cont, mode, **x.forward_kwargs()))
    return np.take_along_axis(lp, cont[..., None], axis=-1)[..., 0]


@dataclasses.dataclass(frozen=True)
class ScoringGap:
    """Blockwise vs sequential on the same inputs.

    blockwise, sequential: :class:`TokenScores`; max_abs_logit_gap: max |block row t - prefix final row|
    over every row; total_gap: |sum blockwise NLL - sum sequential NLL|; relative_total_gap: that over
    |sum sequential NLL| (0 when both are 0).
    """

    blockwise: TokenScores
    sequential: TokenScores
    max_abs_logit_gap: float
    total_gap: float
    relative_total_gap: float


def scoring_gap(
    params: Params,
    token_ids: np.ndarray,
    pad_id: int = PAD_ID,
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> ScoringGap:
    """Measure blockwise cross-entropy against sequential NLL on ``token_ids`` [B, T] (paper §4.5, App. D)."""
    ids = _as_batch(token_ids)
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    x.check_length(ids.shape[1])
    head = x.prefix(ids.shape[1] - 1).forward_kwargs()
    block_logits = forward(params, ids[:, :-1], **head).logits
    seq_logits = prefix_final_row_logits(params, ids[:, :-1], **head)
    block = masked_cross_entropy(block_logits, ids[:, 1:], pad_id)
    seq = masked_cross_entropy(seq_logits, ids[:, 1:], pad_id)
    gap = abs(block.total - seq.total)
    rel = 0.0 if gap == 0.0 else gap / abs(seq.total)
    return ScoringGap(block, seq, float(np.max(np.abs(block_logits - seq_logits))), gap, rel)


def prefix_consistency_gap(
    params: Params,
    token_ids: np.ndarray,
    *,
    attention_mask: np.ndarray | None = None,
    position_ids: np.ndarray | None = None,
    rope_table: RopeTable | None = None,
    softmax_kernel: SoftmaxKernel | None = None,
    check_finite_values: bool = True,
    ops: Ops = FLOAT64_OPS,
) -> float:
    """Violation of historical-row prefix consistency (paper Definition 4.8, eq. 4.14) on ``token_ids``:
    max_r |F(x)[r] - F(x_{0:r})[r]| / max |F(x_{0:r})[r]| over every row r of the logits (0 iff consistent)."""
    ids = _as_batch(token_ids, min_len=1)
    x = ExplicitInputs(attention_mask, position_ids, rope_table, softmax_kernel, check_finite_values, ops)
    x.check_length(ids.shape[1])
    block = forward(params, ids, **x.forward_kwargs()).logits
    seq = prefix_final_row_logits(params, ids, **x.forward_kwargs())
    gap = float(np.max(np.abs(block - seq)))
    return 0.0 if gap == 0.0 else gap / float(np.max(np.abs(seq)))
